"""What a server's JSON answers say, read without trusting them: a completion's choice, its text and its end (`End`:
the finish reason and token count it reports), and the /v1/models list (`_model_list`). A value of the wrong type
is a `MalformedError` naming its field, or dropped where it is only a hint (`READ_FIELDS`, a token count); every
string kept of a model list is redacted. No HTTP: the protocol (`backend`) hands these its parsed messages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from backends.remote.errors import _said
from backends.remote.http import RemoteError, _quote, redact
from backends.remote.logprobs import MalformedError

MAX_NAME = 4096  # a model's id in the model list


@dataclass(frozen=True)
class End:
    """The end of one completion: the server's finish reason and what it says it did."""

    reason: str  # stop, length, ... as the server names it
    prompt_tokens: int | None = None
    stop_reason: Any = None  # vLLM: the stop string (str) or token id that ended it


def _model_list(raw: bytes, host: str, status: int) -> list[dict[str, Any]]:
    """/v1/models' answer: its "data", each an object with a model name as its `id` (a `RemoteError` line
    otherwise); a field read (`READ_FIELDS`) of the wrong type is dropped, strings are redacted."""

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
        out.append({k: v for k, v in _redacted(m).items() if k not in READ_FIELDS or READ_FIELDS[k](v)})
    return out


# The fields of a /v1/models entry that Logit Lab reads besides its id, and the type each must have: one of another
# type is dropped (harmless: they only name the server's kind and the model's context).
READ_FIELDS = {"max_model_len": lambda v: bool(_int(v)), "context_length": lambda v: bool(_int(v)),
               "owned_by": lambda v: isinstance(v, str), "created": lambda v: _int(v) is not None}


def _choice(msg: dict) -> dict | None:
    choices = msg.get("choices")
    if not choices:
        return None
    if not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise MalformedError(f"choices is not a list of objects: {_said(choices)}")
    return choices[0]


def _text(choice: dict) -> str:
    """A choice's text: its chat delta's (or message's) content, else its completion text; "" where it has none."""
    for key in ("delta", "message"):
        if choice.get(key) is not None and not isinstance(choice[key], dict):
            raise MalformedError(f"choices[0].{key} is not an object: {_said(choice[key])}")
    key = next((k for k in ("delta", "message") if choice.get(k)), None)  # (an empty one: none)
    text = choice[key].get("content") if key else choice.get("text")
    if text is not None and not isinstance(text, str):
        raise MalformedError(f"choices[0].{f'{key}.content' if key else 'text'} is not text: {_said(text)}")
    return text or ""


# a thinking model's reasoning, apart from its content: reasoning_content (llama.cpp's server and vLLM's reasoning
# parsers, DeepSeek's API), reasoning (newer vLLM, OpenRouter)
REASONING_FIELDS = ("reasoning_content", "reasoning")


def _reasoning(choice: dict) -> str:
    """A choice's reasoning text (its delta's or message's `reasoning_content` or `reasoning`): what a server that
    separates a thinking model's think span from its answer sends of the span; "" where it has none."""
    key = next((k for k in ("delta", "message") if isinstance(choice.get(k), dict)), None)
    if key is None:
        return ""
    for name in REASONING_FIELDS:
        text = choice[key].get(name)
        if text is not None and not isinstance(text, str):
            raise MalformedError(f"choices[0].{key}.{name} is not text: {_said(text)}")
        if text:
            return text
    return ""


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


def _int(value: Any, default: int | None = None) -> int | None:
    """A count a server sent: a non-negative int (not a bool, float, string or NaN), else `default`."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53 else default


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
