"""One HTTP request read into a `Call`: the route's own fields (messages, prompt or input; n, stream, logprobs,
top_logprobs, echo, the `logitlab` extension), the sampling fields (`fields.read_sampling`) and the constraint
(`formats.read_constraint`: response_format and the like), made one `Request`
for the model thread. Bodies are bounded in size and JSON depth; a model name is never a path to load (the one
model served answers every name, and a name that is not its own is listed as not applied). No HTTP, no model.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.core.events import Message, Request
from app.core.models.sources import ModelSpec
from app.serve.fields import RequestError, read_sampling
from app.serve.formats import FIELDS as FORMAT_FIELDS
from app.serve.formats import read_constraint
from app.serve.logprobs import MODES, Mode

MAX_BODY = 8 * 2**20  # bytes of one request body
MAX_DEPTH = 32  # JSON nesting of one request body
MAX_N = 16
MAX_TOP = 20  # top_logprobs (OpenAI's own limit)
COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions; chat and responses: our settings' (256)
CHAT_MAX_TOKENS = 256
REASONING_FORMATS = ("auto", "deepseek", "none")  # llama.cpp's: the think span apart (auto, deepseek) or in content
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
COMMON = ("model", "stream", "stream_options", "n", "logitlab", "user")
ROUTE_FIELDS = {
    "chat": (*COMMON, "messages", "logprobs", "top_logprobs", "reasoning_format"),
    "completions": (*COMMON, "prompt", "logprobs", "echo"),
    "responses": (*COMMON, "input", "instructions", "top_logprobs", "include"),
}


@dataclass(frozen=True)
class Call:
    route: str  # chat, completions or responses
    request: Request
    stream: bool
    top: int  # top_logprobs asked for (0: none)
    logprobs: bool  # log-probabilities asked for
    mode: Mode  # raw: the model's; processed: the distribution drawn from
    echo: bool
    usage: bool  # streaming: a last chunk with the usage
    ignored: tuple[str, ...]
    id: str
    created: int
    generate: bool = True  # False: echo with max_tokens 0, the prompt's log-probabilities alone (no run)
    reasoning: bool = True  # chat: a thinking model's think span apart, in reasoning_content (False: in content)

    @property
    def name(self) -> str:
        """The run's name in the session: its route, and any field not applied."""
        ignored = f" · not applied: {', '.join(self.ignored)}" if self.ignored else ""
        return f"/v1/{'chat/completions' if self.route == 'chat' else self.route}{ignored}"


def parse_body(data: bytes) -> dict[str, Any]:
    """The body as a JSON object within MAX_BODY and MAX_DEPTH, else a `RequestError` saying which."""
    if len(data) > MAX_BODY:
        raise RequestError(f"the body is over {MAX_BODY // 2**20} MiB", status=413)
    try:
        body = json.loads(data)
    except RecursionError:
        raise RequestError(f"the body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:
        raise RequestError(f"the body is not JSON: {str(e)[:80]}") from None
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    if _depth(body) > MAX_DEPTH:
        raise RequestError(f"the body nests deeper than {MAX_DEPTH} levels")
    return body


def _depth(value: Any) -> int:
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, d = todo.pop()
        deepest = max(deepest, d)
        if d <= MAX_DEPTH and isinstance(v, (dict, list)):
            todo.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def read_call(route: str, body: Mapping[str, Any], spec: ModelSpec, served: str, vocab: int) -> Call:
    """The call `body` makes on `route`, for the model `spec` served as `served`."""
    default = COMPLETION_MAX_TOKENS if route == "completions" else CHAT_MAX_TOKENS
    generate = not (route == "completions" and body.get("echo") is True and body.get("max_tokens") == 0)
    if not generate:  # (lm-eval's log-likelihood request: the prompt scored, nothing generated)
        body = {**body, "max_tokens": 1}
    sampling = read_sampling(body, (*ROUTE_FIELDS[route], *FORMAT_FIELDS[route]), default, vocab)
    settings = sampling.settings.with_(constraint=read_constraint(body, route))
    ignored = list(sampling.ignored)
    if body.get("model") not in (None, "", served):
        ignored.append("model")
    n = _int(body, "n", 1, MAX_N, 1)
    stream = _bool(body, "stream")
    logprobs, top = _logprobs(route, body)
    prompt, messages, ids = _content(route, body, vocab)
    request = Request(model=spec, prompt=prompt, messages=messages, prompt_ids=ids, settings=settings,
                      n=n, top_n=max(MAX_TOP, top))
    options = body.get("stream_options") or {}
    return Call(route, request, stream, top, logprobs, _mode(body), route == "completions" and _bool(body, "echo"),
                stream and isinstance(options, dict) and options.get("include_usage") is True, tuple(ignored),
                f"{'chatcmpl' if route == 'chat' else 'cmpl' if route == 'completions' else 'resp'}-"
                f"{uuid.uuid4().hex[:24]}", int(time.time()), generate, _reasoning(body))


def _reasoning(body: Mapping[str, Any]) -> bool:
    """llama.cpp's `reasoning_format`: the think span in reasoning_content unless it is "none"."""
    value = body.get("reasoning_format")
    if value is not None and value not in REASONING_FORMATS:
        raise RequestError(f"reasoning_format must be one of {', '.join(REASONING_FORMATS)}, got {value!r}",
                           "reasoning_format")
    return value != "none"


def _int(body: Mapping[str, Any], key: str, lo: int, hi: int, default: int) -> int:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise RequestError(f"{key} must be an integer from {lo} to {hi}, got {value!r}", key)
    return value


def _bool(body: Mapping[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise RequestError(f"{key} must be true or false, got {value!r}", key)
    return bool(value)


def _logprobs(route: str, body: Mapping[str, Any]) -> tuple[bool, int]:
    """Whether log-probabilities are asked for, and how many candidates a token (each route says it its way)."""
    if route == "completions":  # logprobs: the number of candidates (0: the drawn token's alone)
        value = body.get("logprobs")
        return value is not None and value is not False, _int(body, "logprobs", 0, MAX_TOP, 0) if value else 0
    top = _int(body, "top_logprobs", 0, MAX_TOP, 0)
    if route == "responses":
        include = body.get("include") or []
        return top > 0 or "message.output_text.logprobs" in include, top
    if body.get("top_logprobs") is not None and not body.get("logprobs"):
        raise RequestError("top_logprobs needs logprobs: true", "top_logprobs")
    return _bool(body, "logprobs"), top


def _mode(body: Mapping[str, Any]) -> Mode:
    ext = body.get("logitlab") or {}
    mode = ext.get("logprobs", "raw") if isinstance(ext, dict) else None
    if mode not in MODES:
        raise RequestError(f"logitlab.logprobs must be {' or '.join(MODES)}, got {mode!r}", "logitlab.logprobs")
    return mode


def _content(route: str, body: Mapping[str, Any], vocab: int) -> tuple[str, tuple[Message, ...] | None,
                                                                         tuple[int, ...] | None]:
    """(prompt, messages, token ids): what the model is to continue."""
    if route == "chat":
        return "", _messages(body.get("messages"), "messages"), None
    if route == "responses":
        value = body.get("input")
        turns = [Message("user", value)] if isinstance(value, str) else list(_messages(value, "input"))
        if isinstance(body.get("instructions"), str):
            turns.insert(0, Message("system", body["instructions"]))
        return "", tuple(turns), None
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]  # (one prompt in a list: several prompts in one call are not served)
    if isinstance(prompt, str):
        return prompt, None, None
    if isinstance(prompt, list) and prompt and all(type(t) is int and 0 <= t < vocab for t in prompt):
        return "", None, tuple(prompt)
    raise RequestError(f"prompt must be text or a list of token ids from 0 to {vocab - 1} (one prompt a request)",
                       "prompt")


def _messages(value: Any, field: str) -> tuple[Message, ...]:
    if not isinstance(value, list) or not value:
        raise RequestError(f"{field} must be a non-empty list of messages", field)
    out = []
    for i, m in enumerate(value):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ROLES:
            raise RequestError(f"{field}[{i}].role must be one of {', '.join(ROLES)}, got {role!r}", f"{field}[{i}]")
        out.append(Message(ROLES[role], _text(m.get("content"), f"{field}[{i}].content")))  # type: ignore[arg-type]
    return tuple(out)


def _text(content: Any, field: str) -> str:
    """A message's content: text, or a list of text parts (OpenAI's `{"type": "text", "text": ...}`)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        if len(parts) == len(content) and all(isinstance(t, str) for t in parts):
            return "".join(parts)
    raise RequestError(f"{field} must be text or a list of text parts (images and files are not served)", field)
