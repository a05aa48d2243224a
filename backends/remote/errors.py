"""The remote backend's error lines: every failed exchange (`transport_error`) or HTTP error status (`_raise_for`)
is one `RemoteError` line a person can act on, naming the server through `where` (never user:password or the key)
and quoting what it said through `_excerpt` (redacted, one line, bounded); a 400 that may name a parameter is
`_Refused`, for the protocol to learn from. Reads at most ERROR_BODY_BYTES of an error's answer.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any
from urllib.parse import urlsplit

from backends.remote.http import ERROR_BODY_BYTES, RemoteError, _excerpt, _Expired, _Limits, redact, where
from backends.remote.logprobs import MalformedError
from backends.remote.tokens import UnalignedError


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
