"""The generation loop, in two layers.

`decode` is the token-level generator over a batch: forward, sample, record; no text. Beam search and speculative
decoding are other loops over the same `forward` / `trim` / `fork` and the same sampler.
`generate(model, request, cancel, prefix)` wraps it for one request: prompt -> prefill (only what the `Prefix`
cache does not already hold) -> decode of `request.n` samples in one batch -> events, one per token per sample.
It checks `cancel` before every step and between prefill chunks. Stops on EOS, stop strings (which may span
tokens and are never shown), max tokens, the context length, or cancel. Text is detokenized as a stream: no
half characters, no dropped bytes. It does not own threads or the model's lifetime: `model_thread` does.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from app.core.events import Event, Finished, FinishReason, Message, Prefilled, Request, Step
from app.core.metrics import Clock
from app.core.prefill import chunks as prefill_chunks
from app.core.sampling import History, Sample, start_sample
from app.core.settings import MAX_SEED, SamplerSettings
from app.core.trace import RunTrace, StepTrace
from backends.base import LoadedModel, StreamDecoder, Tokenizer
from backends.ops import ArrayOps


class PromptError(ValueError):
    """A prompt that cannot be run (empty, too long, chat without a template)."""


def prompt_tokens(tok: Tokenizer, prompt: str, messages: Sequence[Message] | None) -> tuple[list[int], str]:
    """The text the model sees (chat messages through the model's template) and its token ids: one definition
    for a run and for the editor's token count."""
    if messages is None:
        return tok.encode(prompt), prompt
    try:
        text = tok.apply_chat_template([{"role": m.role, "content": m.content} for m in messages])
    except ValueError as e:
        raise PromptError(str(e)) from e
    return tok.encode(text, add_special_tokens=False), text


def build_prompt(tok: Tokenizer, request: Request, context_length: int = 0) -> tuple[list[int], str]:
    if request.prompt_ids is not None:
        ids, text = list(request.prompt_ids), tok.decode(request.prompt_ids)
    else:
        ids, text = prompt_tokens(tok, request.prompt, request.messages)
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


@dataclass
class Row:
    """One row of a batch as `decode` sees it: its own seeded draws and penalty counts. The caller sets `done`."""

    rng: np.random.Generator
    history: History | None = None
    done: bool = False
    force: int | None = None  # the token to take at the first step, whatever the draw (a fork)


def decode(model: LoadedModel, logits: Any, cache: Any, settings: SamplerSettings, rows: list[Row], *,
           steps: int, top_n: int = 20, record: bool = True,
           cancel: threading.Event | None = None) -> Iterator[list[Sample | int | None]]:
    """Draw up to `steps` tokens for each row; `logits` (B, V) or (1, V) (one prefill shared by every row).

    Yields, per step, one outcome per row (a `Sample`, or a token id when not recording; None for a row already
    done). Between steps the caller may mark rows done; decoding ends when all are, after `steps`, or on cancel.
    Where the device runs behind the host, step t+1's forward is queued before step t is read (as mlx-lm).
    A row's `force` replaces its first draw (the step is recorded as drawn, with the forced token taken).
    """
    ops = model.ops
    for step in range(steps):
        if (cancel is not None and cancel.is_set()) or all(r.done for r in rows):
            return
        pending = [start_sample(ops, logits[min(i, logits.shape[0] - 1)], settings, float(r.rng.random()),
                                history=r.history, top_n=top_n, record=record) for i, r in enumerate(rows)]
        forcing = any(r.force is not None for r in rows)
        ahead = ops.overlap and step + 1 < steps and not forcing
        if ahead:  # this step's draws and records first, so that reading them waits for them only
            ops.start([a for p in pending for a in p.outputs])
            logits = model.forward(ops.stack([p.token for p in pending]), cache)
            ops.start([logits])
        outs = [p.result() for p in pending]
        if forcing:
            outs = [_forced(ops, r, o) for r, o in zip(rows, outs, strict=True)]
        yield [None if r.done else o for r, o in zip(rows, outs, strict=True)]
        if not ahead and step + 1 < steps and not all(r.done for r in rows):
            logits = model.forward([[token_of(o)] for o in outs], cache)


def _forced(ops: ArrayOps, row: Row, out: Sample | int) -> Sample | int:
    """`out` with the row's forced token taken instead of the drawn one; its penalty counts follow."""
    if row.force is None:
        return out
    token, row.force = row.force, None
    if row.history is not None:
        row.history.swap(ops, token_of(out), token)
    return out.forcing(token) if isinstance(out, Sample) else token


def token_of(out: Sample | int) -> int:
    return out.token if isinstance(out, Sample) else out


class Prefix:
    """The KV cache a run leaves behind and the tokens it holds, so that the next run sharing a prefix of them
    prefills only what follows (a re-run, a changed ending, a branch). Owned by the thread that owns the model."""

    def __init__(self) -> None:
        self.cache: Any = None
        self.ids: list[int] = []

    def take(self, model: LoadedModel, ids: Sequence[int]) -> tuple[Any, int]:
        """A cache holding the longest reusable prefix of `ids` (at least the last token is left to compute: its
        logits are needed), and that prefix's length."""
        cache, held, self.cache, self.ids = self.cache, self.ids, None, []
        n = min(common_prefix(held, ids), len(ids) - 1)
        if cache is None or n <= 0:
            return model.new_cache(), 0
        model.trim(cache, model.cache_len(cache) - n)
        return cache, n

    def keep(self, model: LoadedModel, cache: Any, ids: Sequence[int]) -> None:
        """Keep `cache`, which holds the first `cache_len` of `ids` (a last drawn token may not be in it)."""
        self.cache, self.ids = cache, list(ids[: model.cache_len(cache)])

    def clear(self) -> None:
        self.cache, self.ids = None, []


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class _Run:
    """The text side of one sample: its trace, detokenizer, held-back stop-string text and clock."""

    id: int
    sequence: int
    trace: RunTrace
    decoder: StreamDecoder
    hold: StopHold
    clock: Clock
    drawn: list[int] = field(default_factory=list)
    reason: FinishReason | None = None


def generate(model: LoadedModel, request: Request, cancel: threading.Event,
             prefix: Prefix | None = None) -> Iterator[Event]:
    """A branch (`request.inherited`) starts after its parent's first k steps: they are prefilled (mostly from
    the `Prefix` cache), taken into its trace and re-sent as its first Step events, and its draws continue the
    seed's sequence at step k (the same uniform per step as its parent); `request.force` is taken at step k."""
    if getattr(model, "remote", False):  # a server samples by itself: app/core/remote_run.py
        from app.core.remote_run import run_remote
        return (yield from run_remote(model, request, cancel))  # type: ignore[arg-type]
    clock = Clock()
    ids, text = build_prompt(model.tokenizer, request, model.info.context_length)
    inherited = list(request.inherited)
    context = ids + [st.token_id for st in inherited]  # what the model has seen before the first new step
    ctx = model.info.context_length or 0
    if ctx and len(context) >= ctx:
        raise PromptError(f"the prompt and the branch's first {len(inherited)} tokens are {len(context)} tokens; "
                          f"this model's context holds {ctx}")
    s = request.settings
    seed = s.seed if s.seed is not None else secrets.randbelow(MAX_SEED + 1)
    prefix = prefix if prefix is not None else Prefix()
    cache, reused = prefix.take(model, context)
    logits = None
    for i, j in prefill_chunks(reused, len(context)):  # sized by time: a cancel waits at most ~one chunk
        if cancel.is_set():
            prefix.keep(model, cache, context)
            for rid in request.run_ids:
                yield Finished(request.id, "cancelled", replace(clock.metrics(len(context), 0), reused_tokens=reused),
                               None, rid)
            return
        logits = model.forward([context[i:j]], cache)
        model.ops.sync([logits])  # computed now, not when a lazy framework (MLX) gets to it: timed, cancellable
    model.ops.sync([logits])  # lazy frameworks (MLX) compute here: the prefill time is the prefill's
    yield Prefilled(request.id, tuple(ids), text, seed, clock.prefilled(), reused)

    runs = [_new_run(model, request, ids, text, (seed + i) % (MAX_SEED + 1), rid, i, clock)
            for i, rid in enumerate(request.run_ids)]
    batch = model.fork(cache, request.n) if request.n > 1 else cache  # the prompt's own cache stays reusable
    rows = [_new_row(model, request, run, context, int(logits.shape[-1])) for run in runs]
    eos = frozenset() if request.ignore_eos else model.tokenizer.eos_ids
    last = max(0, min(s.max_tokens, ctx - len(ids)) if ctx else s.max_tokens)  # the context may fill up first
    texts: dict[int, str] = {}  # token id -> display text, shared by every step of the request
    for run in runs:
        yield from (Step(request.id, st.step, st.token_id, st.text, st, 0, run.id, run.sequence) for st in inherited)
        if inherited and inherited[-1].token_id in eos:
            run.reason = "eos"
    for row, run in zip(rows, runs, strict=True):
        row.done = run.reason is not None
    for outs in decode(model, logits, batch, s, rows, steps=last - len(inherited), top_n=request.top_n,
                       record=request.record, cancel=cancel):
        for run, row, out in zip(runs, rows, outs, strict=True):
            if out is None:
                continue
            token = token_of(out)
            run.drawn.append(token)
            seconds = run.clock.token()
            done = token in eos
            piece = "" if done else run.decoder.add(token)
            released, stopped = run.hold.push(piece, (len(run.drawn) - 1, out, seconds),
                                              partial=not done and piece == "")
            yield from _steps(model, request, run, released, batch, texts)
            if done or stopped:
                run.reason, row.done = ("eos" if done else "stop"), True
    prefix.keep(model, cache, ids + runs[0].drawn if request.n == 1 else context)  # n > 1: the shared cache alone
    kv = model.cache_bytes(batch)
    ran_out: FinishReason = "context" if last < s.max_tokens else "length"
    for run in runs:
        reason = run.reason or ("cancelled" if len(run.drawn) < last else ran_out)
        yield from _steps(model, request, run, run.hold.finish(run.decoder.flush()), batch, texts)
        metrics = replace(run.clock.metrics(len(context), kv), reused_tokens=reused)
        run.trace.finish_reason, run.trace.metrics = reason, metrics
        yield Finished(request.id, reason, metrics, run.trace, run.id, run.sequence)


def _new_run(model: LoadedModel, request: Request, ids: list[int], text: str, seed: int, run_id: int,
             sequence: int, clock: Clock) -> _Run:
    """One sample's text side; a branch's starts with its inherited steps (their tokens primed the decoder)."""
    run = _Run(run_id, sequence, _new_trace(model, request, ids, text, seed, run_id), model.tokenizer.stream(),
               StopHold(request.settings.stop), _fork_clock(clock))
    run.trace.steps.extend(request.inherited)
    run.drawn = [st.token_id for st in request.inherited]
    for t in run.drawn:  # so that a character split across the branch point still decodes whole
        run.decoder.add(t)
    return run


def _new_row(model: LoadedModel, request: Request, run: _Run, context: list[int], vocab: int) -> Row:
    """One sample's draws: its seed's sequence advanced past the inherited steps, counts over its context."""
    rng = np.random.default_rng(run.trace.seed)
    rng.random(len(request.inherited))  # step k draws the seed's k-th uniform, as the parent's step k did
    history = None
    if request.settings.uses_penalties:
        k = len(request.inherited)
        history = History.start(model.ops, vocab, context[: len(context) - k], context[len(context) - k :])
    return Row(rng, history, force=request.force)


def _new_trace(model: LoadedModel, request: Request, ids: list[int], text: str, seed: int, run_id: int) -> RunTrace:
    trace = RunTrace(prompt_ids=ids, settings=request.settings, seed=seed, prompt_text=text)
    trace.run_id, trace.parent, trace.branch = run_id, request.parent, request.branch
    trace.model = {"name": model.info.name, "backend": model.info.backend, "source": request.model.source}
    return trace


def _fork_clock(clock: Clock) -> Clock:
    """A clock for one sample, started with the request (its TTFT includes the shared prefill)."""
    c = Clock(now=clock.now)
    c.start, c.prefilled_at = clock.start, clock.prefilled_at
    return c


def _steps(model: LoadedModel, request: Request, run: _Run, released: list, cache: Any,
           texts: dict[int, str]) -> Iterator[Step]:
    if not released:
        return
    kv = model.cache_bytes(cache)
    for piece, (step, out, seconds) in released:
        trace = None
        if isinstance(out, Sample):
            trace = StepTrace(step, out, piece, _texts(model.tokenizer, out.top_ids[: request.top_n], texts), seconds)
            run.trace.steps.append(trace)
        yield Step(request.id, step, token_of(out), piece, trace, kv, run.id, run.sequence)


def _texts(tok: Tokenizer, ids: Any, known: dict[int, str]) -> tuple[str, ...]:
    """Display texts of `ids`, one string object per token id for the whole request (not one per step)."""
    out = []
    for t in ids.tolist():
        text = known.get(t)
        if text is None:
            text = known[t] = tok.token_text(t)
        out.append(text)
    return tuple(out)
