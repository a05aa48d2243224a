"""The generation loop: prompt -> prefill (chunked, with the KV cache) -> decode, one event per token.

`generate(model, request, cancel)` is a generator of events; it checks `cancel` before every step and between
prefill chunks, so a cancel is honoured within one step. Stops on EOS, stop strings (which may span tokens and
are never shown), max tokens, the context length, or cancel. Text is detokenized as a stream: no half
characters, no dropped bytes. It does not own threads or the model's lifetime: `model_thread` does.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from app.core.events import Event, Finished, FinishReason, Prefilled, Request, Step
from app.core.metrics import Clock
from app.core.sampling import History, Sample, start_sample
from app.core.settings import MAX_SEED
from app.core.trace import RunTrace, StepTrace
from backends.base import LoadedModel, Tokenizer

PREFILL_CHUNK = 512


class PromptError(ValueError):
    """A prompt that cannot be run (empty, too long, chat without a template)."""


def build_prompt(tok: Tokenizer, request: Request, context_length: int = 0) -> tuple[list[int], str]:
    if request.prompt_ids is not None:
        ids, text = list(request.prompt_ids), tok.decode(request.prompt_ids)
    elif request.messages is not None:
        msgs = [{"role": m.role, "content": m.content} for m in request.messages]
        try:
            text = tok.apply_chat_template(msgs)
        except ValueError as e:
            raise PromptError(str(e)) from e
        ids = tok.encode(text, add_special_tokens=False)
    else:
        text = request.prompt
        ids = tok.encode(text)
    if not ids:
        if tok.bos_id is None:
            raise PromptError("the prompt is empty: type something to continue")
        ids = [tok.bos_id]  # an empty prompt starts from the beginning-of-text token
    if context_length and len(ids) >= context_length:
        raise PromptError(f"the prompt is {len(ids)} tokens; this model's context holds {context_length}")
    return ids, text


class StopHold:
    """Holds back the steps whose text could be the start of a stop string, and trims a stop string found."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.text = ""
        self.pending: list[list[Any]] = []  # [start offset, piece, payload]

    def push(self, piece: str, payload: Any, partial: bool = False) -> tuple[list[tuple[str, Any]], bool]:
        """Add one token's text; returns the (piece, payload) pairs now safe to show and whether a stop hit."""
        start = len(self.text)
        self.text += piece
        self.pending.append([start, piece, payload])
        hit = self._find_stop(start)
        if hit is not None:
            out = [(p[: hit - s], pl) for s, p, pl in self.pending if s < hit or (s == hit == 0 and not p)]
            self.pending, self.text = [], self.text[:hit]
            return out, True
        boundary = len(self.text) - self._held_suffix()
        n = 0
        while n < len(self.pending) and self.pending[n][0] + len(self.pending[n][1]) <= boundary:
            n += 1
        if partial:
            n = min(n, len(self.pending) - 1)  # a half character belongs with the token that completes it
        out = [(p, pl) for _, p, pl in self.pending[:n]]
        del self.pending[:n]
        return out, False

    def finish(self, tail: str = "") -> list[tuple[str, Any]]:
        if tail and self.pending:
            self.pending[-1][1] += tail
        out = [(p, pl) for _, p, pl in self.pending]
        self.pending = []
        return out

    def _find_stop(self, start: int) -> int | None:
        hits = [self.text.find(s, max(0, start - len(s) + 1)) for s in self.stops]
        hits = [h for h in hits if h >= 0]
        return min(hits) if hits else None

    def _held_suffix(self) -> int:
        best = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.text)), best, -1):
                if self.text.endswith(s[:k]):
                    best = k
                    break
        return best


def generate(model: LoadedModel, request: Request, cancel: threading.Event) -> Iterator[Event]:
    clock = Clock()
    ids, text = build_prompt(model.tokenizer, request, model.info.context_length)
    s = request.settings
    seed = s.seed if s.seed is not None else secrets.randbelow(MAX_SEED + 1)
    rng = np.random.default_rng(seed)
    cache = model.new_cache()
    run = RunTrace(prompt_ids=ids, settings=s, seed=seed)
    logits = None
    for i in range(0, len(ids), PREFILL_CHUNK):
        if cancel.is_set():
            yield Finished(request.id, "cancelled", clock.metrics(len(ids), 0), run)
            return
        logits = model.forward(ids[i : i + PREFILL_CHUNK], cache)
    model.ops.sync([logits])  # lazy frameworks (MLX) compute here: the prefill time is the prefill's
    yield Prefilled(request.id, tuple(ids), text, seed, clock.prefilled())

    ops, vocab = model.ops, int(logits.shape[0])
    history = History.start(ops, vocab, ids) if s.uses_penalties else None
    decoder, hold = model.tokenizer.stream(), StopHold(s.stop)
    eos = frozenset() if request.ignore_eos else model.tokenizer.eos_ids
    ctx = model.info.context_length or 0
    reason: FinishReason = "length"
    last = min(s.max_tokens, ctx - len(ids)) if ctx else s.max_tokens  # the context may fill up first
    for step in range(last):
        if cancel.is_set():
            reason = "cancelled"
            break
        pending = start_sample(ops, logits, s, float(rng.random()), history=history, top_n=request.top_n,
                               record=request.record)
        ahead = ops.overlap and step + 1 < last
        if ahead:  # queue the next forward before reading this step (wasted once, at a stop)
            ops.start(list(pending.outputs))  # this step's draw and record first, so reading them waits for
            logits = model.forward(pending.token, cache)  # them only, not for the forward queued behind
            ops.start([logits])
        out = pending.result()
        token = out.token if isinstance(out, Sample) else out
        seconds = clock.token()
        done = token in eos
        piece = "" if done else decoder.add(token)
        released, stopped = hold.push(piece, (step, out, seconds), partial=not done and piece == "")
        yield from _steps(model, request, run, released, cache)
        if done or stopped:
            reason = "eos" if done else "stop"
            break
        if not ahead and step + 1 < last:
            logits = model.forward([token], cache)
    yield from _steps(model, request, run, hold.finish(decoder.flush()), cache)
    yield Finished(request.id, reason, clock.metrics(len(ids), model.cache_bytes(cache)), run)


def _steps(model: LoadedModel, request: Request, run: RunTrace, released: list, cache: Any) -> Iterator[Step]:
    if not released:
        return
    kv = model.cache_bytes(cache)
    tok = model.tokenizer
    for piece, (step, out, seconds) in released:
        trace = None
        if isinstance(out, Sample):
            texts = tuple(tok.token_text(int(t)) for t in out.top_ids[: request.top_n])
            trace = StepTrace(step, out, piece, texts, seconds)
            run.steps.append(trace)
        yield Step(request.id, step, out.token if isinstance(out, Sample) else out, piece, trace, kv)
