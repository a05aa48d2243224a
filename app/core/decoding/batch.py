"""A request's samples as they decode, on the text side: each one's trace, streaming detokenizer, held-back
stop-string text and clock, its draws (`Row`), and the events they make.

`start_batch` sets a request's samples up over a prompt already in the cache; `decode_batches` decodes one or
several batches in one forward per step (one cache: the requests share the model and the prompt) and turns
each drawn token into the `Step` events now safe to show; a batch's `Finished` events come as soon as all its
samples have ended. No prompt building, no prefill: `generation` and `together` do those.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from app.core.decoding.loop import Row, decode, token_of
from app.core.decoding.stops import StopHold
from app.core.events import Finished, FinishReason, Request, Step, Stuck
from app.core.metrics import Clock
from app.core.record.record import Sample
from app.core.record.spans import find_markers
from app.core.record.trace import RunTrace, StepTrace
from app.core.sampler.constraint import matcher_for
from app.core.sampler.grammar_step import stuck
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import mu_after
from app.core.sampler.stages import dry_breaker_ids
from app.core.sampler.think_budget import ThinkState
from app.core.settings import MAX_SEED
from backends.base import LoadedModel, StreamDecoder, Tokenizer


@dataclass(frozen=True)
class PromptTokens:
    """A request's prompt as the model sees it: its ids and text, and the context before the first new step
    (the prompt and a branch's inherited tokens)."""

    ids: list[int]
    text: str
    context: list[int]


@dataclass
class SampleRun:
    """The text side of one sample: its trace, detokenizer, held-back stop-string text and clock."""

    id: int
    sequence: int
    trace: RunTrace
    decoder: StreamDecoder
    hold: StopHold
    clock: Clock
    drawn: list[int] = field(default_factory=list)
    reason: FinishReason | None = None
    pieces: list[str] | None = None  # a constrained sample's text per token, watched for being stuck (None: not)


@dataclass
class Batch:
    """A request's samples as they decode: each one's text side (`SampleRun`) and draws (`Row`), their cache."""

    model: LoadedModel
    request: Request
    runs: list[SampleRun]
    rows: list[Row]
    cache: Any  # the rows' cache: the prompt's forked into rows (with other requests' rows when decoded together)
    eos: frozenset[int]
    last: int  # steps a sample may take (max_tokens, unless the context fills up first)
    context_len: int
    reused: int  # prompt tokens an earlier run's cache held
    cache_rows: int = 0  # rows in `cache` (0: this batch's own); its KV bytes are its rows' share
    texts: dict[int, str] = field(default_factory=dict)  # token id -> display text, shared by every step

    def kv_bytes(self) -> int:
        return self.model.cache_bytes(self.cache) * len(self.rows) // (self.cache_rows or len(self.rows))


def last_step(max_tokens: int, prompt_len: int, context_length: int) -> int:
    """How many steps a sample may take: max_tokens, unless the model's context fills up first."""
    return max(0, min(max_tokens, context_length - prompt_len) if context_length else max_tokens)


def start_batch(model: LoadedModel, request: Request, prompt: PromptTokens, seed: int, cache: Any, clock: Clock,
                vocab: int, *, reused: int, cache_rows: int = 0) -> Batch:
    """Sample i draws with seed + i, with the request's settings; `cache` holds its rows (or more: `cache_rows`)."""
    runs = [_new_run(model, request, prompt, (seed + i) % (MAX_SEED + 1), rid, i, clock)
            for i, rid in enumerate(request.run_ids)]
    rows = [_new_row(model, request, run, prompt.context, vocab) for run in runs]
    eos = frozenset() if request.ignore_eos else model.tokenizer.eos_ids
    last = last_step(request.settings.max_tokens, len(prompt.ids), model.info.context_length)
    return Batch(model, request, runs, rows, cache, eos, last, len(prompt.context), reused, cache_rows)


def replay(b: Batch) -> Iterator[Step]:
    """A branch's inherited steps, re-sent as each sample's first steps; one that ended in EOS ends the sample."""
    inherited = b.request.inherited
    for run, row in zip(b.runs, b.rows, strict=True):
        yield from (Step(b.request.id, st.step, st.token_id, st.text, st, 0, run.id, run.sequence) for st in inherited)
        if inherited and inherited[-1].token_id in b.eos:
            run.reason, row.done = "eos", True


def decode_batches(batches: Sequence[Batch], logits: Any, cancel: threading.Event,
                   draws: Callable[..., Iterator[list[Sample | int | None]]] = decode,
                   ) -> Iterator[Step | Stuck | Finished]:
    """The batches' samples decoded together over `batches[0].cache` (rows in batch order; they share top_n and
    record), each with its own settings and seeds, up to its own last step; a sample stops at EOS or a stop
    string, all of them on cancel. A batch's Finished events come once all its samples have ended. `draws` is the
    token loop, `decode`'s arguments and outcomes (a steered run's: `steering.twinned`)."""
    first = batches[0]
    rows = [row for b in batches for row in b.rows]
    steps = max(b.last - len(b.request.inherited) for b in batches)
    running = list(batches)
    for outs in draws(first.model, logits, first.cache, first.request.settings, rows, steps=steps,
                      top_n=first.request.top_n, record=first.request.record, cancel=cancel,
                      **({"lens": first.request.lens} if first.request.lens and draws is decode else {})):
        # (the live lens: `decode`'s; a steered run's twinned loop records none)
        at = 0
        for b in batches:
            yield from _take_all(b, outs[at: at + len(b.rows)])
            at += len(b.rows)
        for b in [b for b in running if all(r.done for r in b.rows)]:
            running.remove(b)
            yield from finish(b)
    for b in running:
        yield from finish(b)


def _take_all(b: Batch, outs: Sequence[Sample | int | None]) -> Iterator[Step | Stuck]:
    for run, row, out in zip(b.runs, b.rows, outs, strict=True):
        if out is not None:
            yield from _take(b, run, row, out)
            row.done |= len(run.drawn) >= b.last  # its last step (a request decoded beside longer ones)


def _take(b: Batch, run: SampleRun, row: Row, out: Sample | int) -> Iterator[Step | Stuck]:
    """One drawn token: its text (held back while it may start a stop string) and the steps now safe to show."""
    token = token_of(out)
    run.drawn.append(token)
    seconds = run.clock.token()
    done = token in b.eos
    piece = "" if done else run.decoder.add(token)
    think = row.think
    span = ("", "") if think is None else (think.tracker.label, "budget" if think.forced else "")
    released, stopped = run.hold.push(piece, (len(run.drawn) - 1, out, seconds, span), partial=not done and piece == "")
    yield from _steps(b, run, released)
    if run.pieces is not None:
        yield from _stuck(b, run, piece)
    if done or stopped:
        run.reason, row.done = ("eos" if done else "stop"), True


def _stuck(b: Batch, run: SampleRun, piece: str) -> Iterator[Stuck]:
    """A constrained sample's `Stuck`, once, when its last tokens are only whitespace or one repeated pattern."""
    assert run.pieces is not None
    run.pieces.append(piece)
    if (why := stuck(run.pieces, run.drawn)) is not None:
        run.pieces = None  # (said once)
        yield Stuck(b.request.id, len(run.drawn) - 1, f"the constrained output looks stuck: {why}", run.id,
                    run.sequence)


def finish(b: Batch) -> Iterator[Step | Finished]:
    """Each sample's held-back text, then its end: why it stopped, its metrics and its trace."""
    kv = b.kv_bytes()
    ran_out: FinishReason = "context" if b.last < b.request.settings.max_tokens else "length"
    for run, row in zip(b.runs, b.rows, strict=True):
        end: tuple[Any, str] = row.end if run.reason is None and row.end is not None else (run.reason, "")
        reason = end[0] or ("cancelled" if len(run.drawn) < b.last else ran_out)
        yield from _steps(b, run, run.hold.finish(run.decoder.flush()))
        metrics = replace(run.clock.metrics(b.context_len, kv), reused_tokens=b.reused)
        run.trace.finish_reason, run.trace.metrics, run.trace.finish_message = reason, metrics, end[1]
        yield Finished(b.request.id, reason, metrics, run.trace, run.id, run.sequence, end[1])


def _new_run(model: LoadedModel, request: Request, prompt: PromptTokens, seed: int, run_id: int, sequence: int,
             clock: Clock) -> SampleRun:
    """One sample's text side; a branch's starts with its inherited steps (their tokens primed the decoder)."""
    run = SampleRun(run_id, sequence, _new_trace(model, request, prompt, seed, run_id), model.tokenizer.stream(),
                    StopHold(request.settings.stop), _fork_clock(clock))
    run.trace.steps.extend(request.inherited)
    run.drawn = [st.token_id for st in request.inherited]
    for t in run.drawn:  # so that a character split across the branch point still decodes whole
        run.decoder.add(t)
    if request.settings.constraint is not None:
        run.pieces = [st.text for st in request.inherited]
    return run


def _new_row(model: LoadedModel, request: Request, run: SampleRun, context: list[int], vocab: int) -> Row:
    """One sample's draws: its seed's sequence advanced past the inherited steps, counts over its context."""
    rng = np.random.default_rng(run.trace.seed)
    rng.random(len(request.inherited))  # step k draws the seed's k-th uniform, as the parent's step k did
    history = None
    s = request.settings
    markers = find_markers(model.tokenizer, s.think_markers)
    k = len(request.inherited)
    think = None if markers is None else ThinkState.start(markers, context[: len(context) - k],
                                                           context[len(context) - k:], s)
    if s.needs_history:
        # DRY's breakers: the tokens whose text holds one (once per model and breakers)
        breakers = dry_breaker_ids(model.tokenizer.token_text, vocab, s.dry_breakers) if s.dry_multiplier else None
        history = History.start(model.ops, vocab, context[: len(context) - k], context[len(context) - k :],
                                breakers or frozenset())
        if s.mirostat_tau and request.inherited:  # a branch goes on with its parent's μ
            history.mu = mu_after(request.inherited[-1].sample, s)
        history.think = think
        if s.constraint is not None:  # one matcher per row, following its generated tokens (the inherited first)
            history.grammar = matcher_for(s.constraint, model.tokenizer, vocab, len(context) - k)
    return Row(rng, history, force=request.force, then=list(request.force_after), settings=s, think=think)


def _new_trace(model: LoadedModel, request: Request, prompt: PromptTokens, seed: int, run_id: int) -> RunTrace:
    trace = RunTrace(prompt_ids=prompt.ids, settings=request.settings, seed=seed, prompt_text=prompt.text)
    trace.run_id, trace.parent, trace.branch = run_id, request.parent, request.branch
    trace.model = {"name": model.info.name, "backend": model.info.backend, "source": request.model.source}
    return trace


def _fork_clock(clock: Clock) -> Clock:
    """A clock for one sample, started with the request (its TTFT includes the shared prefill)."""
    c = Clock(now=clock.now)
    c.start, c.prefilled_at = clock.start, clock.prefilled_at
    return c


def _steps(b: Batch, run: SampleRun, released: list) -> Iterator[Step]:
    if not released:
        return
    kv = b.kv_bytes()
    for piece, (step, out, seconds, span) in released:
        trace = None
        if isinstance(out, Sample):
            top = out.top_ids[: b.request.top_n]
            trace = StepTrace(step, out, piece, _texts(b.model.tokenizer, top, b.texts), seconds, *span)
            run.trace.steps.append(trace)
        yield Step(b.request.id, step, token_of(out), piece, trace, kv, run.id, run.sequence)


def _texts(tok: Tokenizer, ids: Any, known: dict[int, str]) -> tuple[str, ...]:
    """Display texts of `ids`, one string object per token id for the whole request (not one per step)."""
    out = []
    for t in ids.tolist():
        text = known.get(t)
        if text is None:
            text = known[t] = tok.token_text(t)
        out.append(text)
    return tuple(out)
