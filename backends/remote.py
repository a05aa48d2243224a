"""The remote backend: any OpenAI-compatible server (vLLM, llama.cpp's server, mlx_lm.server, LM Studio, Ollama).

`connect` opens one httpx client on a base URL; the `RemoteModel` lists the server's models and `complete`s a
prompt (`/v1/completions`) or a chat (`/v1/chat/completions`) as a stream of `Token`s with their top
log-probabilities (`remote_tokens`). It streams over SSE; a server that streams no log-probabilities
(mlx_lm.server 0.32) is asked for each run whole instead, once it has said so. It samples nothing and holds no
weights; every failure is a `RemoteError` with one line a person can act on (never the API key).

Nothing a server sends is trusted: its time (an overall deadline per request and a cap on a stream without data,
which a server trickling bytes or keep-alives cannot defeat, unlike httpx's per-read timeout), its sizes (a line,
an event, a whole answer), its JSON (any depth, any type) and its text (every excerpt put in a message goes
through `redact`: no API key or URL password, no control characters, one line).
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import functools
import json
import math
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from backends.base import LoadOptions, ModelInfo, ModelLoadError, Positions
from backends.remote_tokens import MalformedError, Token, TokenMaker, UnalignedError, Vocab, drawn_tokens, entries

COMPLETIONS, CHAT = "/completions", "/chat/completions"
TIMEOUT_S = 60.0  # between two bytes of a stream (servers send keep-alives while they prefill)
WHOLE_TIMEOUT_S = 600.0  # for a run asked for whole (nothing arrives until it is done)
DEADLINE_S = 600.0  # one request from start to last byte, however the server trickles (at least `timeout`)
EVENT_TIMEOUT_S = 300.0  # a stream with no data event (keep-alives alone) for this long ends (at least `timeout`)
MAX_EVENT_BYTES = 4 << 20  # one line or one event of a stream (a token with its top-20 is ~2 KiB)
MAX_BODY_BYTES = 64 << 20  # one whole answer: a run asked for whole, the model list
ERROR_BODY_BYTES = 64 << 10  # what is read of an error answer
MAX_NAME = 4096  # a model's id in the model list


class RemoteError(ModelLoadError):
    """A server that cannot be reached or answered wrongly: `status` the HTTP status it answered with (None: no
    answer), `retry_after` the seconds it asked to wait (429), `model_list_failed` the server was reached but could
    not list its models (a model named by hand may still run)."""

    status: int | None = None
    retry_after: float | None = None
    model_list_failed: bool = False
    unreachable: bool = False  # no connection at all (refused, DNS, TLS, connect timeout)


@dataclass(frozen=True)
class End:
    """The end of one completion: the server's finish reason and what it says it did."""

    reason: str  # stop, length, ... as the server names it
    prompt_tokens: int | None = None
    stop_reason: Any = None  # vLLM: the stop string (str) or token id that ended it


@dataclass
class _Negotiated:
    """What this server accepts, learnt from its refusals (400s naming the parameter) and remembered."""

    streams_logprobs: bool | None = None  # None: not known yet
    int_logprobs: dict[str, bool] = field(default_factory=lambda: {COMPLETIONS: True, CHAT: False})
    max_top: int | None = None
    usage: bool = True  # stream_options.include_usage


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


class RemoteModel:
    """A model on a server. `complete` may run from several threads at once (concurrent samples)."""

    remote = True
    dialect: Any = None  # the server's dialect (app.core.server_request), set by whoever recognised the server
    ops = None

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = TIMEOUT_S, *,
                 deadline: float | None = None, event_timeout: float | None = None,
                 max_event: int = MAX_EVENT_BYTES, max_body: int = MAX_BODY_BYTES) -> None:
        """`timeout`: between two bytes (and to connect, at most 10 s); `deadline`: one request in all (default
        DEADLINE_S); `event_timeout`: a stream without a data event (default EVENT_TIMEOUT_S); `max_event`,
        `max_body`: the bytes of one stream line or event, of one whole answer. A user:password in the base URL
        is sent as basic auth when there is no API key (a key goes as a bearer token) and is never shown."""
        import httpx

        url, login = _credentials(normalize_url(base_url))
        self.base_url, self.model, self.timeout = url, model, timeout  # (base_url: without user:password)
        self.deadline = deadline if deadline is not None else max(DEADLINE_S, timeout)
        self.event_timeout = event_timeout if event_timeout is not None else max(EVENT_TIMEOUT_S, timeout)
        self.max_event, self.max_body = max_event, max_body
        api_key = api_key.strip() if api_key else None
        auth = None
        if login is not None:
            user, password = login
            keep_secret(password or user)  # (a user alone in a URL is a token)
            keep_secret(base64.b64encode(f"{user}:{password}".encode()).decode())
            auth = None if api_key else httpx.BasicAuth(user, password)
        if api_key:
            keep_secret(api_key)
            if not all(33 <= ord(c) < 127 for c in api_key):
                raise RemoteError("the API key has characters an HTTP header cannot carry (spaces, line breaks or "
                                  "non-ASCII): set it again")
        headers = {"Accept-Encoding": "identity", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, auth=auth, timeout=httpx.Timeout(
                                    timeout, connect=min(timeout, 10.0)), transport=_transport(), trust_env=False,
                                    follow_redirects=False)
        self.vocab = Vocab()
        self.tokenizer = RemoteTokenizer(self.vocab)
        self.info = remote_info(model, self.base_url)
        self._learnt = _Negotiated()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RemoteModel({self.model!r} at {where(self.base_url)})"

    @property
    def streams_logprobs(self) -> bool | None:
        """Whether this server streams log-probabilities (False: runs are asked for whole); None: not known yet."""
        return self._learnt.streams_logprobs

    # the server's models ------------------------------------------------------------------------------------
    def models(self) -> list[dict[str, Any]]:
        """The server's /v1/models list (each an object with at least an `id`). A server that cannot say is one
        `RemoteError` line naming /models and what went wrong, with `model_list_failed` set and, where a model
        named by hand may still run, the command that does so."""
        host = where(self.base_url)
        limits = _Limits(self.deadline)
        try:
            with self._errors(limits=limits, endpoint="/models"), self._open("GET", "/models", limits) as r:
                _raise_for(r, self, negotiable=False, limits=limits, endpoint="/models")
                raw = self._read(r, limits, self.max_body, "/models")
            return _model_list(raw, host, r.status_code)
        except RemoteError as e:
            if e.unreachable or e.status in (401, 403, 429):
                raise
            err = RemoteError(f"{e}; the server could not list its models: type the model name instead: "
                              f"logitlab generate --base-url {host} --model NAME")
            err.status, err.retry_after, err.model_list_failed = e.status, e.retry_after, True
            raise err from None

    # completions -------------------------------------------------------------------------------------------
    def complete(self, params: dict[str, Any], *, prompt: str | None = None, messages: list[dict] | None = None,
                 top_n: int = 20, stop: threading.Event | None = None) -> Iterator[Token | End]:
        """Stream one completion of `prompt` (or chat `messages`) with `params` (temperature, seed...):
        `Token`s, then one `End`. `stop` set: the stream is closed at the next token (nothing more is yielded)."""
        endpoint = CHAT if messages is not None else COMPLETIONS
        body = {"model": self.model, **params, **({"messages": messages} if messages is not None else
                                                   {"prompt": prompt})}
        stop = stop or threading.Event()
        for _ in range(6):  # a refusal naming a parameter teaches us this server's dialect: ask again
            asked = self._dialect(endpoint, top_n)
            try:
                if self._learnt.streams_logprobs is False:
                    yield from self._whole(endpoint, body, top_n)
                else:
                    yield from self._stream(endpoint, body, top_n, stop)
                return
            except _Refused as e:
                # (a concurrent request may have learnt it already: then ask again as it now knows)
                if not self._negotiate(endpoint, e.message, top_n) and asked == self._dialect(endpoint, top_n):
                    raise RemoteError(f"the server refused the request (HTTP 400): {e.message}") from None
        raise RemoteError("the server refused every form of the request for log-probabilities")

    def _dialect(self, endpoint: str, top_n: int) -> tuple:
        return self._logprob_params(endpoint, top_n), self._learnt.usage, self._learnt.streams_logprobs

    def _logprob_params(self, endpoint: str, top_n: int) -> dict[str, Any]:
        n = min(top_n, self._learnt.max_top or top_n)
        return {"logprobs": n} if self._learnt.int_logprobs[endpoint] else {"logprobs": True, "top_logprobs": n}

    def _negotiate(self, endpoint: str, message: str, top_n: int) -> bool:
        low = message.lower()
        with self._lock:
            if "stream_options" in low and self._learnt.usage:
                self._learnt.usage = False
                return True
            if "logprob" not in low:
                return False
            numbers = [int(n) for n in re.findall(r"\d+", low)]
            limit = min((n for n in numbers if n < min(top_n, self._learnt.max_top or top_n)), default=None)
            if "top_logprobs" in low and limit is not None and limit > 0:
                self._learnt.max_top = limit
                return True
            wants_int = "int" in low and "bool" not in low
            if self._learnt.int_logprobs[endpoint] != wants_int:
                self._learnt.int_logprobs[endpoint] = wants_int
                return True
            return False

    def _stream(self, endpoint: str, body: dict, top_n: int, stop: threading.Event) -> Iterator[Token | End]:
        body = {**body, **self._logprob_params(endpoint, top_n), "stream": True}
        if self._learnt.usage:
            body["stream_options"] = {"include_usage": True}
        maker, got, end, text_only = TokenMaker(self.vocab), 0, None, False
        limits = _Limits(self.deadline, self.event_timeout)
        with self._errors(got_tokens=lambda: got, limits=limits), self._open("POST", endpoint, limits,
                                                                             json=body) as r:
            _raise_for(r, self, limits=limits)
            for data in sse_events(_lines(limits.chunks(r.iter_bytes()), self.max_event), self.max_event):
                limits.saw_event()
                if stop.is_set():
                    return
                if data == "[DONE]":
                    break
                msg = _json(data)
                end = _end(msg, end)
                choice = _choice(msg)
                if choice is None:
                    continue
                text = _text(choice)
                found = entries(choice)
                if found is None and text:
                    if got == 0 and self._learnt.streams_logprobs is not True:
                        text_only = True
                        break  # a server that streams text alone: ask it for each run whole, from now on
                    raise RemoteError(f"the server stopped sending log-probabilities (after {got} tokens)")
                if found:
                    self._learnt.streams_logprobs = True
                    for token in maker.tokens(found, text):
                        got += 1
                        yield token
        if text_only:
            self._learnt.streams_logprobs = False
            yield from self._whole(endpoint, {k: v for k, v in body.items() if k != "stream_options"}, top_n)
            return
        if end is None:
            raise RemoteError(f"the server ended the stream without finishing the completion (after {got} tokens)")
        yield end

    def _whole(self, endpoint: str, body: dict, top_n: int) -> Iterator[Token | End]:
        msg, said, choice = self._answer(endpoint, {**body, **self._logprob_params(endpoint, top_n)})
        with self._errors():  # (a malformed answer is one line, as a malformed stream is)
            found = entries(choice)
            if not found:
                raise RemoteError("the server returned no log-probabilities: it cannot drive the charts (vLLM, "
                                  "llama.cpp's server and mlx_lm.server can)")
            try:
                tokens = TokenMaker(self.vocab).tokens(found, said)
            except UnalignedError as e:  # (mlx_lm.server lists the top-N of each step, not the token it drew)
                tokens = TokenMaker(self.vocab).tokens(found, said, self._drawn(endpoint, body, said, e))
            end = _end(msg, None) or End("stop")
        yield from tokens
        yield end

    def _answer(self, endpoint: str, body: dict) -> tuple[dict, str, dict]:
        """One whole (not streamed) answer: the message, its text and its choice."""
        body = {**body, "stream": False}
        limits = _Limits(self.deadline)
        with self._errors(limits=limits), self._open("POST", endpoint, limits, json=body,
                                                     timeout=max(self.timeout, WHOLE_TIMEOUT_S)) as r:
            _raise_for(r, self, limits=limits)
            raw = self._read(r, limits, self.max_body, endpoint)
        with self._errors():
            text = raw.decode("utf-8", errors="replace")
            msg = _json(text)
            choice = _choice(msg)
            if choice is None:
                raise RemoteError(f"the server's answer has no completion: {_quote(text)}")
            return msg, _text(choice), choice

    def _drawn(self, endpoint: str, body: dict, said: str, unaligned: UnalignedError) -> list[tuple[int, float]]:
        """The tokens a server drew, by id, asked for again with the same seed and no top-N (mlx_lm.server then
        names each drawn token and its log-probability): only where the model's vocabulary is known here (ids to
        bytes), and only when the second answer is the same text."""
        if not self.vocab.knows_vocabulary:
            raise unaligned
        _, again, choice = self._answer(endpoint, {**body, "logprobs": True, "top_logprobs": 0})
        drawn = drawn_tokens(choice)
        if again != said or not drawn:
            raise UnalignedError(f"{unaligned} (asked again for the tokens it drew, the server answered "
                                 f"{'another text' if again != said else 'without them'})")
        return drawn

    def _errors(self, got_tokens: Any = None, limits: _Limits | None = None, endpoint: str = "") -> Any:
        return _TransportErrors(self, got_tokens, limits, endpoint)

    @contextlib.contextmanager
    def _open(self, method: str, path: str, limits: _Limits, **kw: Any) -> Iterator[Any]:
        """A streamed request whose every read (headers too) is held to `limits`."""
        with limits.active():
            opened = self._client.stream(method, path, **kw)
            r = opened.__enter__()
        try:
            yield r
        finally:
            opened.__exit__(None, None, None)  # (closes: reads nothing more)

    def _read(self, r: Any, limits: _Limits, cap: int, endpoint: str) -> bytes:
        """The whole body of `r`, or a `RemoteError` once it passes `cap` bytes (before, if it says it will)."""
        too_big = RemoteError(f"{where(self.base_url)}{endpoint} sent an answer of more than {_size(cap)}: "
                              "Logit Lab reads no more")
        declared = r.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise too_big
        buf = bytearray()
        for chunk in limits.chunks(r.iter_bytes()):
            buf += chunk
            if len(buf) > cap:
                raise too_big
        return bytes(buf)

    # the LoadedModel surface: a server has no local forward pass ------------------------------------------
    def new_cache(self) -> Any:
        raise RemoteError("a model on a server has no local forward pass (no KV cache, no logits over a prompt)")

    def forward(self, tokens: Any, cache: Any, positions: Positions = "last") -> Any:
        return self.new_cache()

    def cache_len(self, cache: Any) -> int:
        return 0

    def cache_bytes(self, cache: Any) -> int:
        return 0

    def close(self) -> None:
        self._client.close()


class _Refused(Exception):  # noqa: N818 - a 400 that may name a parameter this server wants otherwise
    def __init__(self, message: str) -> None:
        self.message = message


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

    def __init__(self, model: RemoteModel, got_tokens: Any = None, limits: _Limits | None = None,
                 endpoint: str = "") -> None:
        self.model, self.got_tokens, self.limits, self.endpoint = model, got_tokens, limits, endpoint

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
        raise transport_error(e, self.model.base_url, self.model.timeout, got, self.endpoint) from None


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
                           "one request")
    if isinstance(e, UnalignedError):  # well formed, but its tokens cannot be told apart: said as it is
        return RemoteError(_excerpt(text, 300))
    if isinstance(e, (MalformedError, RecursionError)):
        return RemoteError(f"the server sent a malformed {'answer' if endpoint else 'stream'}: {_excerpt(text, 200)}")
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


def _raise_for(r: Any, model: RemoteModel, negotiable: bool = True, limits: _Limits | None = None,
               endpoint: str = "") -> None:
    """One clear line for an HTTP error status (or a redirect); a `negotiable` 400 is `_Refused` (it may name a
    parameter). `endpoint` ("/models"): the line names it. Reads at most ERROR_BODY_BYTES of the answer."""
    code = r.status_code
    if code < 300:
        return
    said = server_message(_read_some(r, limits, ERROR_BODY_BYTES))
    host, reason = where(model.base_url) + endpoint, _excerpt(r.reason_phrase or "", 60)
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
        e = RemoteError(f"{host} has no model {_excerpt(model.model, 200)!r} or no such endpoint (HTTP 404): check "
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


def _model_list(raw: bytes, host: str, status: int) -> list[dict[str, Any]]:
    """/v1/models' answer: its "data", each an object with a model name as its `id` (a `RemoteError` line
    otherwise); context lengths that are not counts are dropped, strings redacted."""

    def bad(why: str) -> RemoteError:
        e = RemoteError(f"{host}/models answered HTTP {status} {why}")
        e.status = status
        return e

    if not raw.strip():
        raise bad("with an empty body instead of a model list")
    try:
        body = json.loads(raw.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        excerpt = _quote(raw[:4096].decode("utf-8", errors="replace"))
        raise bad(f"with something that is not JSON instead of a model list: {excerpt}") from None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise bad(f"without a model list (no \"data\" list): {_said(body)}")
    out = []
    for m in data:
        name = m.get("id") if isinstance(m, dict) else None
        if not isinstance(name, str) or not name or len(name) > MAX_NAME or not name.isprintable():
            raise bad(f"with an entry that has no model name (a string id): {_said(m)}")
        m = _redacted(m)
        for key in ("max_model_len", "context_length"):
            if key in m and not _int(m[key], 0):
                del m[key]
        out.append(m)
    return out


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


def _choice(msg: dict) -> dict | None:
    choices = msg.get("choices")
    if not choices:
        return None
    if not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise MalformedError(f"choices is not a list of objects: {_said(choices)}")
    return choices[0]


def _text(choice: dict) -> str:
    delta = choice.get("delta") or choice.get("message")
    text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    if text is not None and not isinstance(text, str):
        raise MalformedError(f"text that is not a string: {_said(text)}")
    return text or ""


def _end(msg: dict, end: End | None) -> End | None:
    """The finish a chunk reports, if any; a reason that is not a string, a token count that is not a count (a
    string, negative, a float, NaN) and a stop reason that is neither a string nor an int are ignored."""
    usage = msg.get("usage")
    prompt_tokens = _int(usage.get("prompt_tokens")) if isinstance(usage, dict) else None
    choice = _choice(msg)
    reason = choice.get("finish_reason") if choice else None
    if isinstance(reason, str) and reason:
        stop = choice.get("stop_reason")
        stop = stop if isinstance(stop, str) or _int(stop) is not None else None
        return End(reason[:64], prompt_tokens or (end.prompt_tokens if end else None), stop)
    if end is not None and prompt_tokens is not None:
        return End(end.reason, prompt_tokens, end.stop_reason)
    return end


def remote_info(model: str, base_url: str, context_length: int = 0) -> ModelInfo:
    """What is known of a model behind a server: its name and where it runs; the rest is the server's."""
    return ModelInfo(name=model, backend="remote", architecture="(on the server)", parameters=0, layers=0, heads=0,
                     kv_heads=0, head_dim=0, hidden_size=0, vocab_size=0, context_length=context_length,
                     dtype="(on the server)", device=where(base_url), quantization=None, weight_bytes=0,
                     kv_bytes_per_token=0)


class RemoteTokenizer:
    """The tokens a server has named so far. It cannot encode: the server tokenizes prompts itself."""

    eos_ids: frozenset[int] = frozenset()
    bos_id = None
    has_chat_template = True  # the server applies its own

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        raise RemoteError("the server tokenizes prompts itself: token counts and prompt surprisal need a local model")

    def apply_chat_template(self, messages: Any) -> str:
        return self.encode("")  # type: ignore[return-value]

    def decode(self, ids: Any) -> str:
        return "".join(self.vocab.text(int(i)) for i in ids)

    def token_text(self, token_id: int) -> str:
        return self.vocab.text(token_id)


class RemoteBackend:
    """`connect` to a server; `load` (a local folder) does not apply."""

    name = "remote"
    park_thread_on_exit = False

    def available(self) -> bool:
        import importlib.util

        return importlib.util.find_spec("httpx") is not None

    def load(self, path: Path, options: LoadOptions) -> RemoteModel:
        raise RemoteError("the remote backend connects to a server: give a base URL and a model name")

    def connect(self, base_url: str, model: str, api_key: str | None = None, timeout: float = TIMEOUT_S,
                **limits: Any) -> RemoteModel:
        """`limits`: RemoteModel's deadline, event_timeout, max_event, max_body."""
        return RemoteModel(base_url, model, api_key, timeout, **limits)
