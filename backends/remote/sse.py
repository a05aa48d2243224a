"""Reading what a server streams, bounded: the lines of a byte stream (`_lines`), the data of its server-sent events
(`sse_events`), one JSON object of it (`_json`: any depth, any type checked; a server's "error" a `RemoteError`).
A line or event past its size is a `MalformedError` as it grows, not once it has all arrived. No HTTP, no protocol.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable, Iterator

from backends.remote.errors import _said, _size
from backends.remote.http import MAX_EVENT_BYTES, RemoteError, _quote
from backends.remote.logprobs import MalformedError

_EOL = re.compile(r"\r\n|\r|\n")


def _lines(chunks: Iterable[bytes], max_line: int = MAX_EVENT_BYTES) -> Iterator[str]:
    """The lines of a byte stream (CRLF, CR or LF), UTF-8 decoded; a `MalformedError` for a line longer than
    `max_line` characters (found as it grows, not once it has all arrived)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    partial: list[str] = []
    size, after_cr = 0, False

    def whole(last: str) -> str:
        line = "".join(partial) + last
        if len(line) > max_line:
            raise MalformedError(f"a line longer than {_size(max_line)}")
        return line

    for chunk in chunks:
        text = decoder.decode(chunk)
        if after_cr and text.startswith("\n"):
            text = text[1:]  # (the LF of a CRLF that came split across two reads)
        if not text:
            continue
        after_cr = text.endswith("\r")
        *done, last = _EOL.split(text)
        for piece in done:
            yield whole(piece)
            partial, size = [], 0
        partial.append(last)
        size += len(last)
        if size > max_line:
            raise MalformedError(f"a line longer than {_size(max_line)}")
    tail = decoder.decode(b"", final=True)
    if partial or tail:
        line = whole(tail)
        if line:
            yield line


def sse_events(lines: Iterable[str], max_event: int = MAX_EVENT_BYTES) -> Iterator[str]:
    """The data of each server-sent event (comments and other fields skipped; multi-line data joined); a
    `MalformedError` for an event over `max_event` characters."""
    data: list[str] = []
    size = 0
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data, size = [], 0
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
            size += len(data[-1]) + 1
            if size > max_event:
                raise MalformedError(f"an event longer than {_size(max_event)}")
        elif not line.startswith((":", "event:", "id:", "retry:")):
            raise MalformedError(f"not a server-sent event line: {_quote(line)}")
    if data:
        yield "\n".join(data)


def _json(data: str) -> dict:
    """One JSON object a server sent (any depth, any type: a `MalformedError` where it is not an object); its
    "error", if it has one, as a `RemoteError`."""
    try:
        msg = json.loads(data)
    except ValueError:
        raise MalformedError(f"not JSON: {_quote(data)}") from None
    except RecursionError:
        raise MalformedError(f"JSON nested too deep to read: {_quote(data, 40)}") from None
    if not isinstance(msg, dict):
        raise MalformedError(f"not a JSON object: {_quote(data)}")
    err = msg.get("error")
    if err:
        if isinstance(err, dict):
            err = err.get("message") or err.get("detail") or err
        raise RemoteError(f"the server reported an error mid-stream: {_said(err)}")
    return msg
