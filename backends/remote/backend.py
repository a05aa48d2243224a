"""The remote backend: any OpenAI-compatible server (vLLM, llama.cpp's server, mlx_lm.server, LM Studio, Ollama).

`connect` opens one httpx client on a base URL; the `RemoteModel` lists the server's models and `complete`s a
prompt (`/v1/completions`) or a chat (`/v1/chat/completions`) as a stream of `Token`s with their top
log-probabilities. It streams over SSE; a server that streams no log-probabilities (mlx_lm.server 0.32) is asked
for each run whole instead, once it has said so. It samples nothing and holds no weights; every failure is a
`RemoteError` with one line a person can act on (never the API key).

This module is the protocol: the requests, the dialect learnt from a server's refusals, the answers read as tokens.
Under it: the HTTP client with its URLs, secrets and time limits (`http`), error lines (`errors`), streams and JSON
read without trusting the server (`sse`, `replies`), and the token side (`logprobs`, `tokens`, `vocab`).
"""

from __future__ import annotations

import base64
import contextlib
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from backends.base import SERVER, Capabilities, ModelInfo
from backends.remote.errors import _raise_for, _Refused, _size, _TransportErrors
from backends.remote.http import (
    DEADLINE_S,
    EVENT_TIMEOUT_S,
    MAX_BODY_BYTES,
    MAX_EVENT_BYTES,
    TIMEOUT_S,
    WHOLE_TIMEOUT_S,
    RemoteError,
    _credentials,
    _Limits,
    _quote,
    _transport,
    keep_secret,
    normalize_url,
    where,
)
from backends.remote.logprobs import drawn_tokens, entries
from backends.remote.replies import End, _choice, _end, _model_list, _reasoning, _text
from backends.remote.sse import _json, _lines, sse_events
from backends.remote.tokens import Token, TokenMaker, UnalignedError, thinking
from backends.remote.vocab import Vocab

COMPLETIONS, CHAT = "/completions", "/chat/completions"


@dataclass
class _Negotiated:
    """What this server accepts, learnt from its refusals (400s naming the parameter) and remembered."""

    streams_logprobs: bool | None = None  # None: not known yet
    int_logprobs: dict[str, bool] = field(default_factory=lambda: {COMPLETIONS: True, CHAT: False})
    max_top: int | None = None
    usage: bool = True  # stream_options.include_usage


class RemoteModel:
    """A model on a server: a `Model` with no local forward pass (it samples by itself and reports its top
    log-probabilities). `complete` may run from several threads at once (concurrent samples)."""

    dialect: Any = None  # the server's dialect (app.core.remote.server_request), set by whoever recognised the server

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
    def capabilities(self) -> Capabilities:
        """A server's: it reports as many candidates a step as it accepts (learnt from its refusals)."""
        return replace(SERVER, reported_top_n=self._learnt.max_top)

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
                _raise_for(r, self.base_url, self.model, negotiable=False, limits=limits, endpoint="/models")
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
            _raise_for(r, self.base_url, self.model, limits=limits)
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
                reasoning = _reasoning(choice)
                text = reasoning + _text(choice)  # (the entries cover both: the reasoning first)
                found = entries(choice)
                if found is None and text:
                    if got == 0 and self._learnt.streams_logprobs is not True:
                        text_only = True
                        break  # a server that streams text alone: ask it for each run whole, from now on
                    raise RemoteError(f"the server stopped sending log-probabilities (after {got} tokens)")
                if found:
                    self._learnt.streams_logprobs = True
                    for token in thinking(maker.tokens(found, text), len(reasoning)):
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
        with self._errors(endpoint=endpoint):  # (a malformed answer is one line, as a malformed stream is)
            reasoning = _reasoning(choice)
            said = reasoning + said
            found = entries(choice)
            if not found:
                raise RemoteError("the server returned no log-probabilities: it cannot drive the charts (vLLM, "
                                  "llama.cpp's server and mlx_lm.server can)")
            try:
                tokens = TokenMaker(self.vocab).tokens(found, said)
            except UnalignedError as e:  # (mlx_lm.server lists the top-N of each step, not the token it drew)
                tokens = TokenMaker(self.vocab).tokens(found, said, self._drawn(endpoint, body, said, e))
            tokens = thinking(tokens, len(reasoning))
            end = _end(msg, None) or End("stop")
        yield from tokens
        yield end

    def answer(self, endpoint: str, body: dict, top_n: int = 0) -> dict:
        """One whole answer as the server sent it (every choice), through this model's limits and error lines, with
        the log-probability fields this server was found to take (`top_n` > 0). A 400 is a RemoteError with status
        400 (what `logitlab probe` judges a refused field by)."""
        body = {"model": self.model, **body, **(self._logprob_params(endpoint, top_n) if top_n else {})}
        try:
            return self._answer(endpoint, body)[0]
        except _Refused as e:
            err = RemoteError(f"the server refused the request (HTTP 400): {e.message}")
            err.status = 400
            raise err from None

    def _answer(self, endpoint: str, body: dict) -> tuple[dict, str, dict]:
        """One whole (not streamed) answer: the message, its text and its choice."""
        body = {**body, "stream": False}
        limits = _Limits(self.deadline)
        with self._errors(limits=limits, endpoint=endpoint), self._open(
                "POST", endpoint, limits, json=body, timeout=max(self.timeout, WHOLE_TIMEOUT_S)) as r:
            _raise_for(r, self.base_url, self.model, limits=limits)
            raw = self._read(r, limits, self.max_body, endpoint)
        with self._errors(endpoint=endpoint):
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
        again = _reasoning(choice) + again
        drawn = drawn_tokens(choice)
        if again != said or not drawn:
            raise UnalignedError(f"{unaligned} (asked again for the tokens it drew, the server answered "
                                 f"{'another text' if again != said else 'without them'})")
        return drawn

    def _errors(self, got_tokens: Any = None, limits: _Limits | None = None, endpoint: str = "") -> Any:
        return _TransportErrors(self.base_url, self.timeout, got_tokens, limits, endpoint)

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

    def close(self) -> None:
        self._client.close()


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

    def apply_chat_template(self, messages: Any, options: Any = None) -> str:
        return self.encode("")  # type: ignore[return-value]

    def decode(self, ids: Any) -> str:
        return "".join(self.vocab.text(int(i)) for i in ids)

    def token_text(self, token_id: int) -> str:
        return self.vocab.text(token_id)


class RemoteBackend:
    """A server's backend: it `connect`s to a base URL (it loads no folder; `backends.BACKENDS` declares so)."""

    name = "remote"
    park_thread_on_exit = False

    def connect(self, base_url: str, model: str, api_key: str | None = None, timeout: float = TIMEOUT_S,
                **limits: Any) -> RemoteModel:
        """`limits`: RemoteModel's deadline, event_timeout, max_event, max_body."""
        return RemoteModel(base_url, model, api_key, timeout, **limits)
