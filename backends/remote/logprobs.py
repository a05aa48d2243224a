"""A server's log-probability entries, read without trusting them: the chat format's `logprobs.content` and the
legacy completions format's `tokens` / `token_logprobs` / `top_logprobs` made one list of `_Entry`s (the entry's
own token and its top candidates, sorted here: mlx_lm.server 0.32 sends an unsorted top-N). Every value is
type-checked where it is read (a `MalformedError` naming its field); a token id is from 0 to MAX_ID (int32: what a
record holds). Which candidate was drawn is `tokens`'s to say.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backends.remote.vocab import token_bytes


class MalformedError(ValueError):
    """A server message that is not what the OpenAI API describes."""


@dataclass(frozen=True)
class _Cand:
    server_id: int | None
    data: bytes
    logprob: float


@dataclass(frozen=True)
class _Entry:
    own: _Cand
    top: tuple[_Cand, ...]  # sorted, descending

    def choices(self) -> list[_Cand]:
        """Who may have been drawn, the likeliest first (the entry's own token too, last if not in the top)."""
        return [*self.top, self.own] if self.own not in self.top else list(self.top)


MAX_ID = 2**31 - 1  # the largest token id a record holds (int32); a server's ids are from 0 to this


class _Brief(reprlib.Repr):
    """reprlib's bounded repr, cutting a string's end only (what `redact` finds of a secret is its start)."""

    maxstring = maxother = 40

    def repr_str(self, x: str, level: int) -> str:
        return repr(x[: self.maxstring]) + ("…" if len(x) > self.maxstring else "")


_brief = _Brief().repr  # a server's value as a message quotes it, however big or deep


def _token_id(value: Any, field: str) -> int | None:
    """A token id as sent (`field` names it): None where there is none; else a whole number from 0 to MAX_ID, or a
    `MalformedError` (a float, a negative id or one past int32 names no token of any vocabulary)."""
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= MAX_ID:
        raise MalformedError(f"{field} is not a token id (a whole number from 0 to {MAX_ID}): {_brief(value)}")
    return value


def _logprob(value: Any, field: str) -> float:
    """A log-probability as sent (`field` names it): a number <= 0; -inf is a probability of 0 (recorded as it is:
    a trace writes it as "-Infinity"); rounding above 0 by up to 1e-3 is 0. NaN, +inf, anything above and
    anything not a number are a `MalformedError`."""
    if type(value) not in (int, float):  # (not a bool, a string, null)
        raise MalformedError(f"{field} is not a number: {_brief(value)}")
    try:
        v = float(value)
    except OverflowError:  # an integer past a float's range
        v = -math.inf if value < 0 else math.inf
    if math.isnan(v) or v > 1e-3:
        raise MalformedError(f"{field} is {v:g}, which no log-probability is")
    return min(v, 0.0)


def _cand(obj: Any, field: str) -> _Cand:
    """One candidate of the chat format ({"token", "logprob"}, and "bytes", "id" where sent)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("token"), str):
        raise MalformedError(f"{field} is not a log-probability entry (an object with a token): {_brief(obj)}")
    return _Cand(_token_id(obj.get("id"), f"{field}.id"), token_bytes(obj["token"], obj.get("bytes")),
                 _logprob(obj.get("logprob"), f"{field}.logprob"))


def _sorted(cands: Sequence[_Cand]) -> tuple[_Cand, ...]:
    return tuple(sorted(cands, key=lambda c: -c.logprob))


def entries(choice: dict) -> list[_Entry] | None:
    """The log-probability entries of one streamed or whole choice (chat or legacy format); None when it has none.
    Every value is checked: one of the wrong type is a `MalformedError` naming its field."""
    lp = choice.get("logprobs")
    if not lp:
        return None
    if not isinstance(lp, dict):
        raise MalformedError(f"logprobs is not an object: {_brief(lp)}")
    if isinstance(lp.get("content"), list):
        return [_chat_entry(e, f"logprobs.content[{i}]") for i, e in enumerate(lp["content"]) if e]
    if isinstance(lp.get("tokens"), list):
        return _legacy_entries(lp)
    raise MalformedError(f"logprobs in an unknown format (no content or tokens list): {_brief(lp)}")


def _chat_entry(e: Any, field: str) -> _Entry:
    top = e.get("top_logprobs") if isinstance(e, dict) else None
    if top and not isinstance(top, list):
        raise MalformedError(f"{field}.top_logprobs is not a list: {_brief(top)}")
    return _Entry(_cand(e, field), _sorted([_cand(t, f"{field}.top_logprobs[{j}]") for j, t in enumerate(top or [])]))


def _legacy_entries(lp: dict) -> list[_Entry]:
    """The legacy completions format: `tokens` (text), `token_logprobs` and `top_logprobs` (token -> log-probability,
    or null), one of each per token."""
    tokens, logprobs = lp["tokens"], lp.get("token_logprobs")
    tops = lp.get("top_logprobs") or [None] * len(tokens)
    for name, values in (("token_logprobs", logprobs), ("top_logprobs", tops)):
        if not isinstance(values, list) or len(values) != len(tokens):
            raise MalformedError(f"logprobs.{name} is not a list of one per token ({len(tokens)}): {_brief(values)}")
    out = []
    for i, (t, g, top) in enumerate(zip(tokens, logprobs, tops, strict=True)):
        if not isinstance(t, str):
            raise MalformedError(f"logprobs.tokens[{i}] is not text: {_brief(t)}")
        if top is not None and not isinstance(top, dict):
            raise MalformedError(f"logprobs.top_logprobs[{i}] is not an object (token -> log-probability): "
                                 f"{_brief(top)}")
        cands = [_Cand(None, token_bytes(k), _logprob(v, f"logprobs.top_logprobs[{i}][{_brief(k)}]"))
                 for k, v in (top or {}).items()]
        out.append(_Entry(_Cand(None, token_bytes(t), _logprob(g, f"logprobs.token_logprobs[{i}]")), _sorted(cands)))
    return out


def drawn_tokens(choice: dict) -> list[tuple[int, float]] | None:
    """The drawn tokens of a choice whose entries name them by id alone (mlx_lm.server asked for no top-N):
    [(id, log-probability)], or None when its entries are not of that form."""
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(content, list) or not content:
        return None
    if not all(isinstance(e, dict) and type(e.get("id")) is int for e in content):
        return None
    field = "logprobs.content[{}].{}".format
    return [(_token_id(e["id"], field(i, "id")), _logprob(e.get("logprob"), field(i, "logprob")))
            for i, e in enumerate(content)]
