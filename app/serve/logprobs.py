"""Log-probabilities as OpenAI's API shapes them, read from a step's record (`StepTrace.sample`), never recomputed:
"raw" is the model's distribution (row 0 of the record: what the surprisal view and vLLM's raw mode report),
"processed" the distribution the token was drawn from (after every stage: its last row). A token's text and bytes
are the tokenizer's (a byte-level piece of a character: its real bytes, its text with U+FFFD). No HTTP.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from app.core.decoding.surprisal import PromptScore
    from app.core.record.record import StepTrace
    from backends.base import Tokenizer

Mode = Literal["raw", "processed"]
MODES = ("raw", "processed")
_HEX = re.compile(r"‹([0-9a-f]{2}(?: [0-9a-f]{2})*)›")  # how `token_text` shows a byte-level piece of a character


def token_piece(tok: Tokenizer, token_id: int) -> tuple[str, bytes]:
    """A token's text (as OpenAI's `token`) and its bytes."""
    text = tok.token_text(token_id)
    if m := _HEX.fullmatch(text):
        raw = bytes.fromhex(m[1])
        return raw.decode("utf-8", errors="replace"), raw
    return text, text.encode("utf-8")


def _log(p: float) -> float:
    return math.log(p) if p > 0 else -math.inf


def candidates(step: StepTrace, mode: Mode, k: int) -> tuple[float | None, list[tuple[int, float]]]:
    """The drawn token's log-probability and the `k` likeliest candidates [(id, log-probability)] in `mode`'s
    distribution (processed: only those it kept); (None, []) where the record holds no such row."""
    s = step.sample
    if mode == "raw":
        probs, drawn = s.raw_probs, s.raw_logprob
    else:
        probs, drawn = s.final_probs, None if s.prob is None else _log(s.prob)
    if probs is None:
        return drawn, []
    order = np.argsort(-probs, kind="stable")[:k]  # (k,): the raw row is sorted already; the last row is not
    top = [(int(s.top_ids[i]), _log(float(probs[i]))) for i in order if probs[i] > 0]
    return drawn, top


def chat_entry(step: StepTrace, tok: Tokenizer, mode: Mode, k: int) -> dict[str, Any]:
    """One token of `choices[i].logprobs.content` (and the Responses API's `logprobs`), with its `id` (llama.cpp's
    extension, which Logit Lab's remote backend reads)."""
    drawn, top = candidates(step, mode, k)

    def one(token_id: int, lp: float | None) -> dict[str, Any]:
        text, raw = token_piece(tok, token_id)
        return {"id": token_id, "token": text, "logprob": _finite(lp), "bytes": list(raw)}

    return {**one(step.token_id, drawn), "top_logprobs": [one(i, lp) for i, lp in top]}


def legacy(steps: Sequence[StepTrace], tok: Tokenizer, mode: Mode, k: int, offset: int = 0) -> dict[str, Any]:
    """/v1/completions' `logprobs`: tokens, token_logprobs, top_logprobs (text -> log-probability), text_offset."""
    out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for step in steps:
        drawn, top = candidates(step, mode, k)
        text = token_piece(tok, step.token_id)[0]
        out["tokens"].append(text)
        out["token_logprobs"].append(_finite(drawn))
        out["top_logprobs"].append({token_piece(tok, i)[0]: _finite(lp) for i, lp in top})
        out["text_offset"].append(offset)
        offset += len(step.text)
    return out


def prompt_legacy(score: PromptScore, tok: Tokenizer, k: int) -> dict[str, Any]:
    """The prompt's own log-probabilities (the score runner's all-positions forward: the raw model), in the legacy
    shape; its first token's is null (nothing precedes it), as OpenAI's echo gives it."""
    out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    offset = 0
    for t, token_id in enumerate(score.ids):
        text = token_piece(tok, token_id)[0]
        out["tokens"].append(text)
        out["text_offset"].append(offset)
        offset += len(text)
        if t == 0:
            out["token_logprobs"].append(None)
            out["top_logprobs"].append(None)
            continue
        out["token_logprobs"].append(float(score.logprobs[t]))
        top = zip(score.top_ids[t][:k], score.top_logprobs[t][:k], strict=True)
        out["top_logprobs"].append({token_piece(tok, int(i))[0]: float(lp) for i, lp in top if math.isfinite(lp)})
    return out


def join_legacy(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The prompt's entries then the completion's (echo), the completion's offsets moved past the prompt's text."""
    shift = (a["text_offset"][-1] + len(a["tokens"][-1])) if a["tokens"] else 0
    return {**{key: a[key] + b[key] for key in a if key != "text_offset"},
            "text_offset": a["text_offset"] + [o + shift for o in b["text_offset"]]}


def _finite(lp: float | None) -> float | None:
    """JSON has no -inf: a probability of 0 is OpenAI's floor, -9999."""
    if lp is None:
        return None
    return lp if math.isfinite(lp) else -9999.0
