"""The remote backend's HTTP client underneath the protocol (`backend`): base URLs, secrets, and time.

Nothing a server sends is trusted with time: an overall deadline per request and a cap on a stream without data,
which a server trickling bytes or keep-alives cannot defeat (unlike httpx's per-read timeout: `_transport` holds
every network read to the request's `_Limits`). Every excerpt put in a message goes through `redact`: no API key or
URL password. Error lines are `errors`', reading a stream `sse`'s. httpx and httpcore load only where a request is made.
"""

from __future__ import annotations

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
