"""Files a user keeps (traces, sessions, presets, exports) are written atomically: to a temporary file beside the
target, flushed and fsynced, then renamed over it, so a reader sees the old file or the whole new one. Only a
regular file is ever replaced: a symbolic link's target is written (the link stays), and a path that is not a
regular file (a device such as /dev/null, a FIFO, a socket) is written in place. One implementation for every
writer; what goes in the file is the caller's. Each kind of file starts with a header naming its format and
version, checked by `check_header` when read; `parse_json` is every reader's JSON parser.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

MISSING = object()  # read_field's default: the field is required


def parse_json(data: str | bytes) -> Any:
    """`data` as JSON. Anything else raises ValueError with one line saying what: text that is not UTF-8 or not
    JSON, and JSON nested too deeply for this Python to read (json raises RecursionError there)."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deeply to be read") from None


def read_field(obj: dict[str, Any], key: str, check: Callable[[Any], bool], kind: str, *, null: bool = False,
               default: Any = MISSING, where: str = "") -> Any:
    """obj[key] (a JSON object's field) if `check` passes it, or if it is null where `null` allows that; absent,
    `default`. Anything else raises ValueError naming the field (after `where`, the object's own name) and `kind`,
    what it must be."""
    if key not in obj:
        if default is MISSING:
            raise ValueError(f"no {where}{key}")
        return default
    v = obj[key]
    if (v is None and null) or (v is not None and check(v)):
        return v
    raise ValueError(f"{where}{key} must be {kind}{' or null' if null else ''}, got {brief(v)}")


def is_a(tp: type) -> Callable[[Any], bool]:
    """A `read_field` check: the value is a `tp` (str, list, dict...)."""
    return lambda v: isinstance(v, tp)


def whole(v: Any) -> bool:
    """A `read_field` check: the value is a whole number (JSON's true and false are not)."""
    return type(v) is int


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write `data` (text as UTF-8) atomically."""
    write_chunks(path, [data.encode("utf-8") if isinstance(data, str) else data])


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> None:
    """Write each of `lines` (JSON, no newline of their own) atomically, streamed rather than joined in memory. A
    lone surrogate, which UTF-8 cannot hold (a command line's undecodable byte, a server's broken escape), is
    written as its JSON escape (\\udcff): the file stays UTF-8 and reads back the same string."""
    write_chunks(path, ((line + "\n").encode("utf-8", "backslashreplace") for line in lines))


def write_chunks(path: str | os.PathLike, chunks: Iterable[bytes]) -> None:
    path = Path(os.path.realpath(path))  # a link's target is what is written; the link stays a link
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = stat.S_IFREG  # a new file
    if not stat.S_ISREG(mode):  # a device, a FIFO, a socket: no file to replace (a folder fails to open)
        with path.open("wb") as f:
            for chunk in chunks:
                f.write(chunk)
        return
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; this is an ordinary user file
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename survives a crash once the folder is synced (POSIX)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def check_header(obj: object, fmt: str, version: int, kind: str, error: type[Exception]) -> None:
    """Raise `error` unless `obj` is a header of format `fmt` at `version` or older: a file of another kind, or
    one a newer Logit Lab wrote, is refused with a message that says which and what to do."""
    found = obj.get("format") if isinstance(obj, dict) else None
    if found != fmt:
        other = re.fullmatch(r"logitlab-([a-z]{1,20})", found) if isinstance(found, str) else None
        if other:  # ours, of another kind: say which
            raise error(f"a Logit Lab {other[1]} file, not a {kind} file")
        raise error(f"not a Logit Lab {kind} file (no {kind} header)")
    found = obj.get("version")
    if type(found) is not int or found > version:
        raise error(f"written by a newer Logit Lab ({kind} format {brief(found)}; this one reads up to {version}): "
                    f"update Logit Lab to open it")


def typed(text: str, limit: int = 60) -> str:
    """What a user typed (a flag's value), as a message quotes it: its repr, cut with … where longer, so that a
    refusal never echoes a megabyte back."""
    if len(text) <= limit:
        return repr(text)
    head = repr(text[:limit])
    return f"{head[:-1]}…{head[-1]} ({len(text):,} characters)"


def brief(value: Any, limit: int = 40) -> str:
    """A value read from a file, as JSON, for a message: one short line, cut with … where longer."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


# JSON has no NaN or infinity: such a float is written as one of these strings (every other float32 value round-trips
# exactly through a JSON number: Python writes the shortest repr of the same float64). Trace and session files.
NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def json_number(v: Any) -> Any:
    """A value as the file holds it: a float that is not finite as its string, anything else as it is (a numpy
    float as a Python one: json writes no numpy scalar)."""
    if type(v).__module__ == "numpy" and hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"
    return v


def read_number(v: Any) -> float | None:
    """A JSON number, or the string of a non-finite one (`json_number`), as a float; None for anything else."""
    if isinstance(v, str):
        return NONFINITE.get(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v)
    except OverflowError:  # a whole number past float64
        return None
