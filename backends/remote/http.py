"""The remote backend's transport (`remote.py` speaks the protocol over it): base URLs, secrets, limits, error
lines and the parsing of what a server streams.

Nothing a server sends is trusted: its time (an overall deadline per request and a cap on a stream without data,
which a server trickling bytes or keep-alives cannot defeat, unlike httpx's per-read timeout: `_transport` holds
every network read to the request's `_Limits`), its sizes (a line, an event, a whole answer), its JSON (any depth,
any type) and its text (every excerpt put in a message goes through `redact`: no API key or URL password, no
control characters, one line). Every failure is a `RemoteError` with one line a person can act on. httpx and
httpcore are imported only where a request is made.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import json
import math
import re
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from backends.base import ModelLoadError
from backends.remote.tokens import MalformedError, UnalignedError

TIMEOUT_S = 60.0  # between two bytes of a stream (servers send keep-alives while they prefill)
WHOLE_TIMEOUT_S = 600.0  # for a run asked for whole (nothing arrives until it is done)
DEADLINE_S = 600.0  # one request from start to last byte, however the server trickles (at least `timeout`)
EVENT_TIMEOUT_S = 300.0  # a stream with no data event (keep-alives alone) for this long ends (at least `timeout`)
MAX_EVENT_BYTES = 4 << 20  # one line or one event of a stream (a token with its top-20 is ~2 KiB)
MAX_BODY_BYTES = 64 << 20  # one whole answer: a run asked for whole, the model list
ERROR_BODY_BYTES = 64 << 10  # what is read of an error answer


class RemoteError(ModelLoadError):
    """A server that cannot be reached or answered wrongly: `status` the HTTP status it answered with (None: no
    answer), `retry_after` the seconds it asked to wait (429), `model_list_failed` the server was reached but could
    not list its models (a model named by hand may still run)."""

    status: int | None = None
    retry_after: float | None = None
    model_list_failed: bool = False
    unreachable: bool = False  # no connection at all (refused, DNS, TLS, connect timeout)


def normalize_url(base_url: str) -> str:
    """`http://host:8000` or `.../v1` -> `http://host:8000/v1`; other paths are kept as given (user:password
    too: `RemoteModel` sends them as basic auth). A URL no request could go to is one `RemoteError` line that
    shows it without its password."""
    url = str(base_url).strip().rstrip("/")
    shown = _hide_userinfo(url)

    def bad(why: str) -> RemoteError:
        return RemoteError(f"the base URL must look like http://host:port/v1: {shown!r} {why}")

    if not url:
        raise RemoteError("the base URL must look like http://host:port/v1: it is empty")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise bad("has spaces or control characters (write a space in a path as %20)")
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port  # .port raises ValueError out of 0-65535 or not a number
    except ValueError as e:
        raise bad(f"is not a valid URL ({_excerpt(_hide_userinfo(str(e)), 80)})") from None
    if parts.scheme not in ("http", "https"):
        raise bad("must start with http:// or https://")
    if not host:
        raise bad("has no host")
    if port == 0:
        raise bad("has port 0")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise bad("has a query or fragment (?...#...): give the server's base path only")
    try:
        import httpx
    except ImportError:
        httpx = None
    try:
        if httpx is not None:
            httpx.URL(url)
    except (httpx.InvalidURL, ValueError, UnicodeError, TypeError) as e:
        said = str(e).replace(parts.password or "\0", "***") if parts.password else str(e)
        raise bad(f"is not a valid URL ({_excerpt(_hide_userinfo(said), 80)})") from None
    return url + "/v1" if parts.path in ("", "/") else url


def where(url: str) -> str:
    """The server as a message names it: scheme, host, port and path; never user:password, a query or fragment."""
    try:
        p = urlsplit(str(url).strip())
        host = p.hostname or ""
        try:
            port = p.port
        except ValueError:
            port = None
    except ValueError:
        return _excerpt(_hide_userinfo(str(url)), 120)
    host = f"[{host}]" if ":" in host else host
    return f"{p.scheme}://{host}{f':{port}' if port else ''}{p.path}"


def _hide_userinfo(text: str) -> str:
    """`http://user:pw@host` -> `http://***@host` wherever it appears in `text` (a URL that may not parse)."""
    return re.sub(r"//[^/?#\s]*@", "//***@", text)


def _credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """`url` without its user:password, and them (percent-decoded), if any."""
    p = urlsplit(url)
    if "@" not in p.netloc:
        return url, None
    clean = p._replace(netloc=p.netloc.rpartition("@")[2]).geturl()
    user, password = unquote(p.username or ""), unquote(p.password or "")
    return clean, (user, password) if user or password else None


# secrets: never in a message --------------------------------------------------------------------------------
_secrets: set[str] = set()
_secrets_lock = threading.Lock()
PARTIAL = 8  # a secret's first 8 characters or more are redacted even where an excerpt cut the rest off


def keep_secret(value: str | None) -> None:
    """From now on `redact` removes `value` (as written, percent-encoded, JSON-escaped) from every text."""
    if not value:
        return
    forms = {value, quote(value, safe=""), quote(value), json.dumps(value)[1:-1], value.replace("/", "\\/")}
    with _secrets_lock:
        _secrets.update(f for f in forms if f)


def redact(text: str) -> str:
    """`text` with every secret `keep_secret` was given (an API key, a URL's password) replaced by ***, whatever
    its case, and a cut-off start of one (PARTIAL characters or more, as an excerpt ends) too."""
    with _secrets_lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    if not secrets or not text:
        return text
    low = text.lower()
    fold = len(low) == len(text)  # (a few characters change length in lower case: then match case exactly)
    spans: list[tuple[int, int]] = []
    for secret in secrets:
        s, hay = (secret.lower(), low) if fold else (secret, text)
        head = s[:PARTIAL]
        start = hay.find(head)
        while start != -1:
            end, n = start + len(head), len(head)
            while n < len(s) and end < len(hay) and hay[end] == s[n]:
                end, n = end + 1, n + 1
            spans.append((start, end))
            start = hay.find(head, end)
    if not spans:
        return text
    out, at = [], 0
    for start, end in sorted(spans):
        if start >= at:
            out += [text[at:start], "***"]
        at = max(at, end)  # (an overlapping one widens the last)
    return "".join(out) + text[at:]


def _excerpt(text: str, n: int = 160) -> str:
    """What a message may quote of a server's text: its first line, redacted, control characters as spaces,
    at most `n` characters."""
    text = str(text)[:65536].strip()
    line = text.splitlines()[0] if text else ""
    line = redact(line)[: n * 2]
    line = " ".join("".join(c if c.isprintable() else " " for c in line).split())
    return line if len(line) <= n else line[: n - 1] + "…"


def _quote(text: str, n: int = 80) -> str:
    """A redacted excerpt of raw data, quoted (repr: control characters escaped)."""
    return repr(redact(str(text)[:4096])[:n])


# time: enforced here, not by the server ----------------------------------------------------------------------
class _Expired(Exception):  # noqa: N818 - a request past its deadline, or a stream past its cap without data
    def __init__(self, limits: _Limits, idle: bool) -> None:
        self.limits, self.idle = limits, idle


_active = threading.local()  # the limits of the request this thread is reading now


class _Limits:
    """One request's time: `total` seconds in all, and (a stream) `idle` seconds at most without a data event.
    Every network read of the request, made within `active()`, is cut short at the nearer of the two."""

    def __init__(self, total: float, idle: float | None = None) -> None:
        self.total, self.idle = total, idle
        now = time.monotonic()
        self.end, self.idle_end = now + total, now + idle if idle else math.inf

    def saw_event(self) -> None:
        if self.idle:
            self.idle_end = time.monotonic() + self.idle

    def left(self) -> float:
        return min(self.end, self.idle_end) - time.monotonic()

    def expired(self) -> _Expired:
        return _Expired(self, self.idle_end < self.end)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        before = getattr(_active, "limits", None)
        _active.limits = self
        try:
            yield
        finally:
            _active.limits = before

    def chunks(self, it: Iterable[bytes]) -> Iterator[bytes]:
        """`it`'s chunks, each read within these limits (and checked between reads)."""
        it = iter(it)
        while True:
            if self.left() <= 0:
                raise self.expired()
            with self.active():
                chunk = next(it, None)
            if chunk is None:
                return
            yield chunk


def _budget(timeout: float | None) -> tuple[float | None, _Limits | None]:
    """The time a network operation may take now: its own timeout, or less where the request's limits are nearer
    (then also those limits, to tell their expiry from the operation's own timeout)."""
    limits = getattr(_active, "limits", None)
    if limits is None:
        return timeout, None
    left = limits.left()
    if left <= 0:
        raise limits.expired()
    return (left, limits) if timeout is None or left < timeout else (timeout, None)


@contextlib.contextmanager
def _held(limits: _Limits | None) -> Iterator[None]:
    """A timeout of an operation that `_budget` cut short to the request's limits is their expiry."""
    import httpcore

    try:
        yield
    except httpcore.TimeoutException:
        if limits is not None:
            raise limits.expired() from None
        raise


@functools.cache
def _network_classes() -> tuple[type, type]:
    import httpcore

    class Stream(httpcore.NetworkStream):
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            timeout, limits = _budget(timeout)
            with _held(limits):
                return self._inner.read(max_bytes, timeout)

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            timeout, limits = _budget(timeout)
            with _held(limits):
                self._inner.write(buffer, timeout)

        def close(self) -> None:
            self._inner.close()

        def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
            timeout, limits = _budget(timeout)
            with _held(limits):
                return Stream(self._inner.start_tls(ssl_context, server_hostname, timeout))

        def get_extra_info(self, info: str) -> Any:
            return self._inner.get_extra_info(info)

    class Backend(httpcore.NetworkBackend):
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                        socket_options: Any = None) -> Any:
            timeout, limits = _budget(timeout)
            with _held(limits):
                return Stream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

        def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
            timeout, limits = _budget(timeout)
            with _held(limits):
                return Stream(self._inner.connect_unix_socket(path, timeout, socket_options))

        def sleep(self, seconds: float) -> None:
            self._inner.sleep(seconds)

    return Stream, Backend


def _transport() -> Any:
    """httpx's transport, its network reads and writes held to the limits of the request being read (where this
    httpcore lets them be: else `_Limits.chunks` checks the limits between reads)."""
    import httpx

    transport = httpx.HTTPTransport(limits=httpx.Limits(max_connections=64), trust_env=False)
    pool = getattr(transport, "_pool", None)
    if pool is not None and hasattr(pool, "_network_backend"):
        pool._network_backend = _network_classes()[1](pool._network_backend)
    return transport


# errors: one line each, naming the server through `where`, quoting it through `_excerpt` -----------------------
class _TransportErrors:
    """Turns httpx's exceptions into one `RemoteError` line naming the server (never the key)."""

    def __init__(self, base_url: str, timeout: float, got_tokens: Any = None, limits: _Limits | None = None,
                 endpoint: str = "") -> None:
        self.base_url, self.timeout = base_url, timeout
        self.got_tokens, self.limits, self.endpoint = got_tokens, limits, endpoint

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, e: BaseException | None, tb: Any) -> bool:
        import httpx

        if isinstance(e, RemoteError):
            e.args = tuple(redact(a) if isinstance(a, str) else a for a in e.args)
            return False
        if e is None or not isinstance(e, (httpx.HTTPError, MalformedError, _Expired, RecursionError)):
            return False
        got = self.got_tokens() if self.got_tokens else 0
        raise transport_error(e, self.base_url, self.timeout, got, self.endpoint) from None


def transport_error(e: BaseException, url: str, timeout: float, got: int = 0, endpoint: str = "") -> RemoteError:
    """One line for a failed exchange: `endpoint` ("/models") names what was asked (else a completion's stream,
    `got` tokens in)."""
    import httpx

    host = where(url)
    text = str(e)
    asked = f"{host}{endpoint}"
    if isinstance(e, _Expired):
        lim = e.limits
        if e.idle:
            return RemoteError(f"{host} sent nothing but keep-alives for {lim.idle:g} s (after {got} tokens): "
                               "Logit Lab stops waiting there")
        tokens = "" if endpoint else f" (after {got} tokens)"
        return RemoteError(f"{asked} took more than {lim.total:g} s to answer{tokens}: Logit Lab's time limit for "
                           "one request (--deadline SECONDS sets it)")
    if isinstance(e, UnalignedError):  # well formed, but its tokens cannot be told apart: said as it is
        return RemoteError(_excerpt(text, 300))
    if isinstance(e, (MalformedError, RecursionError)):  # (its text names the field, its value quoted)
        if endpoint:
            return RemoteError(f"{asked} sent a malformed answer: {_excerpt(text, 200)}")
        return RemoteError(f"{host} sent a malformed stream (after {got} tokens): {_excerpt(text, 200)}")
    if isinstance(e, (httpx.ConnectTimeout, httpx.ConnectError)):
        err = _connect_error(e, url, host, timeout)
        err.unreachable = True
        return err
    if isinstance(e, httpx.TimeoutException):
        if endpoint:
            return RemoteError(f"{asked} stopped answering for {timeout:g} s")
        return RemoteError(f"{host} stopped answering for {timeout:g} s (after {got} tokens)")
    if isinstance(e, (httpx.RemoteProtocolError, httpx.ReadError)):
        if endpoint:
            return RemoteError(f"{asked} closed the connection without a complete answer "
                               f"({_excerpt(text, 100) or type(e).__name__})")
        return RemoteError(f"{host} closed the connection mid-stream (after {got} tokens)")
    return RemoteError(f"HTTP error talking to {asked}: {type(e).__name__}: {_excerpt(text)}")


def _connect_error(e: BaseException, url: str, host: str, timeout: float) -> RemoteError:
    import httpx

    text = str(e)
    if isinstance(e, httpx.ConnectTimeout):
        return RemoteError(f"no answer from {host} within {min(timeout, 10.0):g} s: is the server up and reachable?")
    if "refused" in text.lower() or "errno 111" in text.lower() or "errno 61" in text.lower():
        return RemoteError(f"cannot connect to {host}: connection refused (is the server running on that port?)")
    if any(s in text for s in ("Name or service not known", "nodename nor servname", "getaddrinfo",
                               "Temporary failure in name resolution", "No address associated")):
        return RemoteError(f"cannot find the host {_excerpt(urlsplit(url).hostname or '', 100)} (DNS lookup "
                           "failed): check the base URL")
    if "SSL" in text or "CERTIFICATE" in text.upper() or "TLS" in text:
        return RemoteError(f"TLS error talking to {host} ({_excerpt(text)}): check http vs https and the "
                           "server's certificate")
    return RemoteError(f"cannot connect to {host}: {_excerpt(text)}")


class _Refused(Exception):  # noqa: N818 - a 400 that may name a parameter this server wants otherwise
    def __init__(self, message: str) -> None:
        self.message = message


def _raise_for(r: Any, base_url: str, model: str, negotiable: bool = True, limits: _Limits | None = None,
               endpoint: str = "") -> None:
    """One clear line for an HTTP error status (or a redirect) from `base_url`, asked for `model`; a `negotiable`
    400 is `_Refused` (it may name a parameter). `endpoint` ("/models"): the line names it. Reads at most
    ERROR_BODY_BYTES of the answer."""
    code = r.status_code
    if code < 300:
        return
    said = server_message(_read_some(r, limits, ERROR_BODY_BYTES))
    host, reason = where(base_url) + endpoint, _excerpt(r.reason_phrase or "", 60)
    if code == 400 and negotiable:
        raise _Refused(said)
    tail = f": {said}" if said else ""
    if code < 400:
        to = _excerpt(r.headers.get("location", ""), 120)
        e = RemoteError(f"{host} redirects (HTTP {code}){f' to {to}' if to else ''}: give the address it redirects "
                        f"to as the base URL{'' if to else tail}")
    elif code in (401, 403):
        what = "refused the API key" if code == 401 else "forbids this key"
        e = RemoteError(f"{host} {what} (HTTP {code}): set the key for this server (keychain or --api-key-env)"
                        f"{tail}")
    elif code == 404 and endpoint:
        e = RemoteError(f"{host} is not there (HTTP 404){tail}")
    elif code == 404:
        e = RemoteError(f"{host} has no model {_excerpt(model, 200)!r} or no such endpoint (HTTP 404): check "
                        f"the model name (logitlab models --base-url ...) and that the URL ends in /v1{tail}")
    elif code == 429:
        after = _retry_after(r.headers.get("retry-after"))
        wait = f"; it asks to wait {after:g} s" if after is not None else ""
        e = RemoteError(f"{host} is rate-limiting requests (HTTP 429){wait}{tail}")
        e.retry_after = after
    elif code >= 500:
        e = RemoteError(f"{host} failed (HTTP {code}{f' {reason}' if reason else ''}){tail}")
    else:
        e = RemoteError(f"{host} answered HTTP {code}{f' {reason}' if reason else ''}{tail}")
    e.status = code
    raise e


def _read_some(r: Any, limits: _Limits | None, cap: int) -> bytes:
    """The first `cap` bytes of `r`'s body (an error's: the rest is not read)."""
    buf = bytearray()
    with contextlib.suppress(Exception):  # (what came before a failure still says something)
        for chunk in (limits.chunks(r.iter_bytes()) if limits else r.iter_bytes()):
            buf += chunk
            if len(buf) >= cap:
                break
    return bytes(buf[:cap])


def _retry_after(value: str | None) -> float | None:
    try:
        after = float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: said as received would be no clearer
    return after if after is not None and 0 <= after <= 86400 else None  # (nan, inf, negative: not a wait)


def server_message(body: Any) -> str:
    """The error a server put in its answer (OpenAI's {"error": {"message"}}, mlx's {"error": "..."}, FastAPI's
    {"detail"}, text), as one redacted line; `body` its bytes (or text, or a read response)."""
    if not isinstance(body, (bytes, str)):
        body = body.content
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError:
            return f"(an answer of {_size(len(body))} that is not text)"
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return _excerpt(body)
    err = obj.get("error", obj) if isinstance(obj, dict) else obj
    if isinstance(err, dict):
        err = err.get("message") or err.get("detail") or err
    return _said(err)


def _said(value: Any) -> str:
    """A server's JSON value as one line of a message: a string as it is, anything else as compact JSON."""
    if not isinstance(value, str):
        try:
            value = json.dumps(value, ensure_ascii=False)[:4096]
        except (ValueError, TypeError, RecursionError):
            value = "(a JSON value nested too deep to show)"
    return _excerpt(value)


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n / 2**10:g} KiB" if n >= 2**10 else f"{n} bytes"


def _int(value: Any, default: int | None = None) -> int | None:
    """A count a server sent: a non-negative int (not a bool, float, string or NaN), else `default`."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53 else default


# reading: lines, events, JSON, bounded -------------------------------------------------------------------------
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


def _redacted(obj: Any, depth: int = 0) -> Any:
    """A server's JSON value with every string (keys too) redacted; nothing below 64 levels."""
    if isinstance(obj, str):
        return redact(obj)
    if depth >= 64:
        return None
    if isinstance(obj, dict):
        return {redact(str(k)): _redacted(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redacted(v, depth + 1) for v in obj]
    return obj
