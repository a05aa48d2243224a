"""The remote backend: any OpenAI-compatible server (vLLM, llama.cpp's server, mlx_lm.server, LM Studio, Ollama).

`connect` opens one httpx client on a base URL; the `RemoteModel` lists the server's models and `complete`s a
prompt (`/v1/completions`) or a chat (`/v1/chat/completions`) as a stream of `Token`s with their top
log-probabilities (`remote_tokens`). It streams over SSE; a server that streams no log-probabilities
(mlx_lm.server 0.32) is asked for each run whole instead, once it has said so. It samples nothing and holds no
weights; every failure is a `RemoteError` with one line a person can act on (never the API key).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from backends.base import LoadOptions, ModelInfo, ModelLoadError, Positions
from backends.remote_tokens import MalformedError, Token, TokenMaker, Vocab, entries

COMPLETIONS, CHAT = "/completions", "/chat/completions"
TIMEOUT_S = 60.0  # between two bytes of a stream (servers send keep-alives while they prefill)
WHOLE_TIMEOUT_S = 600.0  # for a run asked for whole (nothing arrives until it is done)


class RemoteError(ModelLoadError):
    """A server that cannot be reached or answered wrongly: `status` the HTTP status it answered with (None: no
    answer), `retry_after` the seconds it asked to wait (429)."""

    status: int | None = None
    retry_after: float | None = None


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
    """`http://host:8000` or `.../v1` -> `http://host:8000/v1`; other paths are kept as given."""
    url = base_url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise RemoteError(f"the base URL must look like http://host:port/v1, got {base_url!r}")
    return url + "/v1" if parts.path in ("", "/") else url


def where(url: str) -> str:
    """The server as a message names it: scheme, host and port, never user:password."""
    p = urlsplit(url)
    return f"{p.scheme}://{p.hostname}{f':{p.port}' if p.port else ''}{p.path}"


class RemoteModel:
    """A model on a server. `complete` may run from several threads at once (concurrent samples)."""

    remote = True
    ops = None

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = TIMEOUT_S) -> None:
        import httpx

        self.base_url, self.model, self.timeout = normalize_url(base_url), model, timeout
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=httpx.Timeout(timeout, connect=
                                    min(timeout, 10.0)), limits=httpx.Limits(max_connections=64), trust_env=False)
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
        """The server's /v1/models list (each an object with at least an `id`)."""
        with self._errors():
            r = self._client.get("/models")
        _raise_for(r, self, negotiable=False)
        try:
            data = r.json()["data"]
            if not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
                raise TypeError
        except (ValueError, KeyError, TypeError) as e:
            err = RemoteError(f"{where(self.base_url)}/models did not return a model list: {r.text[:80]!r}")
            err.status = r.status_code
            raise err from e
        return data

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
        with self._errors(got_tokens=lambda: got), self._client.stream("POST", endpoint, json=body) as r:
            _raise_for(r, self)
            for data in sse_events(r.iter_lines()):
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
        body = {**body, **self._logprob_params(endpoint, top_n), "stream": False}
        with self._errors():
            r = self._client.post(endpoint, json=body, timeout=max(self.timeout, WHOLE_TIMEOUT_S))
        _raise_for(r, self)
        msg = _json(r.text)
        choice = _choice(msg)
        if choice is None:
            raise RemoteError(f"the server's answer has no completion: {r.text[:80]!r}")
        text = _text(choice)
        found = entries(choice)
        if not found:
            raise RemoteError("the server returned no log-probabilities: it cannot drive the charts (vLLM, "
                              "llama.cpp's server and mlx_lm.server can)")
        yield from TokenMaker(self.vocab).tokens(found, text)
        yield _end(msg, None) or End("stop")

    def _errors(self, got_tokens: Any = None) -> Any:
        return _TransportErrors(self, got_tokens)

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


class _TransportErrors:
    """Turns httpx's exceptions into one `RemoteError` line naming the server (never the key)."""

    def __init__(self, model: RemoteModel, got_tokens: Any = None) -> None:
        self.model, self.got_tokens = model, got_tokens

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, e: BaseException | None, tb: Any) -> bool:
        import httpx

        if e is None or isinstance(e, RemoteError) or not isinstance(e, (httpx.HTTPError, MalformedError)):
            return False
        raise transport_error(e, self.model.base_url, self.model.timeout,
                              self.got_tokens() if self.got_tokens else 0) from None


def transport_error(e: BaseException, url: str, timeout: float, got: int = 0) -> RemoteError:
    import httpx

    host = where(url)
    text = str(e)
    if isinstance(e, MalformedError):
        return RemoteError(f"the server sent a malformed stream: {e}")
    if isinstance(e, httpx.ConnectTimeout):
        return RemoteError(f"no answer from {host} within {timeout:g} s: is the server up and reachable?")
    if isinstance(e, httpx.TimeoutException):
        return RemoteError(f"{host} stopped answering for {timeout:g} s (after {got} tokens)")
    if isinstance(e, httpx.ConnectError):
        if "refused" in text.lower() or "errno 111" in text.lower() or "errno 61" in text.lower():
            return RemoteError(f"cannot connect to {host}: connection refused (is the server running on that port?)")
        if any(s in text for s in ("Name or service not known", "nodename nor servname", "getaddrinfo",
                                   "Temporary failure in name resolution", "No address associated")):
            return RemoteError(f"cannot find the host {urlsplit(url).hostname} (DNS lookup failed): check the base URL")
        if "SSL" in text or "CERTIFICATE" in text.upper() or "TLS" in text:
            return RemoteError(f"TLS error talking to {host} ({_first_line(text)}): check http vs https and the "
                               "server's certificate")
        return RemoteError(f"cannot connect to {host}: {_first_line(text)}")
    if isinstance(e, (httpx.RemoteProtocolError, httpx.ReadError)):
        return RemoteError(f"{host} closed the connection mid-stream (after {got} tokens)")
    return RemoteError(f"HTTP error talking to {host}: {type(e).__name__}: {_first_line(text)}")


def _first_line(text: str, n: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= n else line[: n - 1] + "…"


def _raise_for(r: Any, model: RemoteModel, negotiable: bool = True) -> None:
    """One clear line for an HTTP error status; a `negotiable` 400 is `_Refused` (it may name a parameter)."""
    if r.status_code < 400:
        return
    r.read()
    said = server_message(r)
    host, code = where(model.base_url), r.status_code
    if code == 400 and negotiable:
        raise _Refused(said)
    if code in (401, 403):
        what = "refused the API key" if code == 401 else "forbids this key"
        e = RemoteError(f"{host} {what} (HTTP {code}): set the key for this server (keychain or --api-key-env)"
                        f"{': ' + said if said else ''}")
    elif code == 404:
        e = RemoteError(f"{host} has no model {model.model!r} or no such endpoint (HTTP 404): check the model name "
                        f"(logitlab models --base-url ...) and that the URL ends in /v1{': ' + said if said else ''}")
    elif code == 429:
        after = _retry_after(r.headers.get("retry-after"))
        wait = f"; it asks to wait {after:g} s" if after is not None else ""
        e = RemoteError(f"{host} is rate-limiting requests (HTTP 429){wait}{': ' + said if said else ''}")
        e.retry_after = after
    elif code >= 500:
        e = RemoteError(f"{host} failed (HTTP {code} {r.reason_phrase}){': ' + said if said else ''}")
    else:
        e = RemoteError(f"{host} answered HTTP {code} {r.reason_phrase}{': ' + said if said else ''}")
    e.status = code
    raise e


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: said as received would be no clearer


def server_message(r: Any) -> str:
    """The error a server put in its answer (OpenAI's {"error": {"message"}}, mlx's {"error": "..."}, text)."""
    try:
        body = r.json()
    except ValueError:
        return _first_line(r.text)
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        err = err.get("message") or err.get("detail") or err
    return _first_line(str(err))


def sse_events(lines: Iterator[str]) -> Iterator[str]:
    """The data of each server-sent event (comments and other fields skipped; multi-line data joined)."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line.startswith((":", "event:", "id:", "retry:")):
            raise MalformedError(f"not a server-sent event line: {line[:80]!r}")
    if data:
        yield "\n".join(data)


def _json(data: str) -> dict:
    try:
        msg = json.loads(data)
    except ValueError:
        raise MalformedError(f"not JSON: {data[:80]!r}") from None
    if not isinstance(msg, dict):
        raise MalformedError(f"not a JSON object: {data[:80]!r}")
    if "error" in msg:
        raise RemoteError(f"the server reported an error mid-stream: {_first_line(str(msg['error']))}")
    return msg


def _choice(msg: dict) -> dict | None:
    choices = msg.get("choices")
    if not choices:
        return None
    if not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise MalformedError(f"choices is not a list of objects: {str(choices)[:80]}")
    return choices[0]


def _text(choice: dict) -> str:
    delta = choice.get("delta") or choice.get("message")
    text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    if text is not None and not isinstance(text, str):
        raise MalformedError(f"text that is not a string: {text!r}")
    return text or ""


def _end(msg: dict, end: End | None) -> End | None:
    usage = msg.get("usage")
    prompt_tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    choice = _choice(msg)
    reason = choice.get("finish_reason") if choice else None
    if reason:
        return End(str(reason), prompt_tokens or (end.prompt_tokens if end else None), choice.get("stop_reason"))
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

    def connect(self, base_url: str, model: str, api_key: str | None = None,
                timeout: float = TIMEOUT_S) -> RemoteModel:
        return RemoteModel(base_url, model, api_key, timeout)
