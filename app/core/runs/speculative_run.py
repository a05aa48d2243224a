"""A speculative request's events: `speculate`'s rounds (speculative.py) as a run the views already know.

Prefilled, then per round a `Drafted` (the round's draft/accept record and the totals) and a `Step` per token
kept (the target's step record, re-drawing that token: the output, charts and timeline show it like any run),
then `Speculated` (totals, speed, and plain decoding of as many tokens timed right after, when asked) and
`Finished`. Text is detokenized as a stream; EOS, stop strings, max tokens and cancel end the run. It owns no
thread and no model: the `speculative` runner (`runners`) loads the draft beside the target and calls it.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from app.core.decoding.generation import build_prompt, generate
from app.core.decoding.speculative.pace import Pace
from app.core.decoding.speculative.rounds import (
    ADAPTIVE,
    Speculation,
    Turn,
    check_pair,
    check_settings,
    prefill,
    speculate,
)
from app.core.decoding.stops import StopHold
from app.core.events import Drafted, Event, Finished, FinishReason, Prefilled, Request, Speculated, Step
from app.core.metrics import Clock
from app.core.record.spec_record import K_MAX, SpecStats, SpecSummary
from app.core.record.trace import RunTrace, StepTrace
from app.core.sampler.constraint import matcher_for
from app.core.settings import MAX_SEED, SettingsError
from backends.base import LoadedModel, StreamDecoder, Tokenizer


def check_request(request: Request) -> None:
    """A `SettingsError` for what a speculative run cannot do: a k out of range, several samples, a branch."""
    if not (request.draft_k == ADAPTIVE or 1 <= request.draft_k <= K_MAX):
        raise SettingsError(f"draft length k must be 1-{K_MAX}, or 0 for adaptive; got {request.draft_k}")
    if request.n != 1 or request.inherited or request.force is not None:
        raise SettingsError("speculative decoding draws one sample from the prompt: no n > 1, no branch")
    check_settings(request.settings)


@dataclass
class _Text:
    """The run's text side: trace, detokenizer, stop strings, clock."""

    trace: RunTrace
    request: Request
    hold: StopHold
    clock: Clock
    tokenizer: Tokenizer
    decoder: StreamDecoder = field(init=False)
    drawn: list[int] = field(default_factory=list)
    reason: FinishReason | None = None

    def __post_init__(self) -> None:
        self.decoder = self.tokenizer.stream()


def run_speculative(target: LoadedModel, draft: LoadedModel, request: Request,
                    cancel: threading.Event) -> Iterator[Event]:
    """The events of one speculative request (see the module's docstring)."""
    check_request(request)
    check_pair(target, draft)
    clock = Clock()
    ids, text = build_prompt(target.tokenizer, request, target.info.context_length)
    seed = request.settings.seed if request.settings.seed is not None else secrets.randbelow(MAX_SEED + 1)
    lanes = prefill(target, draft, ids, cancel)
    if lanes is None:
        yield Finished(request.id, "cancelled", clock.metrics(len(ids), 0), None)
        return
    yield Prefilled(request.id, tuple(ids), text, seed, clock.prefilled())
    run = _Text(_trace(target, request, ids, text, seed), request, StopHold(request.settings.stop), clock,
                target.tokenizer)
    c = request.settings.constraint
    grammar = None if c is None else matcher_for(c, target.tokenizer, target.info.vocab_size, len(ids))
    spec = Speculation(*lanes, request.settings, np.random.default_rng(seed), list(ids), len(ids),
                       k=request.draft_k, pace=Pace() if request.draft_k == ADAPTIVE else None, grammar=grammar)
    steps = _steps_allowed(request.settings.max_tokens, len(ids), target.info.context_length)
    eos = frozenset() if request.ignore_eos else target.tokenizer.eos_ids
    stats, busy = SpecStats(), [0.0, 0.0]  # busy: the run's own wall and CPU seconds after the prefill
    turns = speculate(spec, steps=steps, eos=eos, top_n=request.top_n, record=request.record, cancel=cancel)
    while run.reason is None:
        t, cpu = time.perf_counter(), time.thread_time()
        if (turn := next(turns, None)) is None:
            break
        stats = stats.add(turn.round, turn.draft_forwards)
        events = [Drafted(request.id, turn.round, stats, request.id),
                  *_take(run, turn, eos, target.cache_bytes(spec.target.cache))]
        busy[0] += time.perf_counter() - t
        busy[1] += time.thread_time() - cpu
        yield from events  # (the time the events wait for their reader is not the run's)
    yield from _finish(target, run, spec, stats, steps, (busy[0], busy[1]), cancel)


def _take(run: _Text, turn: Turn, eos: frozenset[int], kv: int) -> Iterator[Step]:
    for token, sample in zip(turn.tokens, turn.samples, strict=True):
        step, seconds = len(run.drawn), run.clock.token()
        run.drawn.append(token)
        done = token in eos
        piece = "" if done else run.decoder.add(token)
        released, stopped = run.hold.push(piece, (step, token, sample, seconds), partial=not done and piece == "")
        yield from _steps(run, released, kv)
        if done or stopped:
            run.reason = "eos" if done else "stop"
            return


def _steps(run: _Text, released: list, kv: int) -> Iterator[Step]:
    rid, text = run.request.id, run.tokenizer.token_text
    for piece, (step, token, sample, seconds) in released:
        trace = None
        if sample is not None:
            top = tuple(text(t) for t in sample.top_ids[: run.request.top_n].tolist())
            trace = StepTrace(step, sample, piece, top, seconds)
            run.trace.steps.append(trace)
        yield Step(rid, step, token, piece, trace, kv, rid)


def _finish(target: LoadedModel, run: _Text, spec: Speculation, stats: SpecStats, steps: int,
            busy: tuple[float, float], cancel: threading.Event) -> Iterator[Event]:
    kv = target.cache_bytes(spec.target.cache)
    yield from _steps(run, run.hold.finish(run.decoder.flush()), kv)
    summary = SpecSummary(stats, run.request.draft_k, busy[0], decode_cpu_s=busy[1])
    if run.request.compare_plain and stats.tokens and not cancel.is_set():
        n, seconds, cpu = time_plain(target, spec.ids[: spec.prompt_len], run.request, run.trace.seed, stats.tokens,
                                     cancel)
        summary = SpecSummary(stats, run.request.draft_k, busy[0], n, seconds, busy[1], cpu)
    yield Speculated(run.request.id, summary, run.request.id)
    ended = spec.ended if run.reason is None else None  # (a grammar that ended the run: complete, or stuck)
    reason: FinishReason = run.reason or (  # type: ignore[assignment]
        ended.reason if ended is not None else "cancelled" if cancel.is_set() else
        "context" if steps < run.request.settings.max_tokens else "length")
    metrics = run.clock.metrics(spec.prompt_len, kv)
    message = "" if ended is None else ended.message
    run.trace.finish_reason, run.trace.metrics, run.trace.finish_message = reason, metrics, message
    yield Finished(run.request.id, reason, metrics, run.trace, message=message)


def time_plain(target: LoadedModel, ids: list[int], request: Request, seed: int, tokens: int,
               cancel: threading.Event | None = None) -> tuple[int, float, float]:
    """Plain decoding of `tokens` tokens by the target alone (same prompt, settings and seed, EOS ignored) on a plain
    run's own path (`generate`: the token loop, then each token's text, step record and event, as the speculative
    run's rounds pay theirs): the tokens drawn, and the wall and CPU seconds after its prefill. Its events are read
    here, at once: the speculative run's seconds leave out the time its events wait for their reader alike."""
    plain = Request(prompt_ids=tuple(ids), settings=request.settings.with_(max_tokens=tokens, seed=seed),
                    top_n=request.top_n, record=request.record, ignore_eos=True)
    n, start = 0, None
    for ev in generate(target, plain, cancel or threading.Event()):
        if isinstance(ev, Prefilled):
            start = time.perf_counter(), time.thread_time()
        n += isinstance(ev, Step)
    if start is None:
        return n, 0.0, 0.0
    return n, time.perf_counter() - start[0], time.thread_time() - start[1]


def _steps_allowed(max_tokens: int, prompt_len: int, context_length: int) -> int:
    return max(0, min(max_tokens, context_length - prompt_len) if context_length else max_tokens)


def _trace(model: LoadedModel, request: Request, ids: list[int], text: str, seed: int) -> RunTrace:
    trace = RunTrace(prompt_ids=ids, settings=request.settings, seed=seed, prompt_text=text)
    trace.run_id = request.id
    trace.model = {"name": model.info.name, "backend": model.info.backend, "source": request.model.source}
    return trace
