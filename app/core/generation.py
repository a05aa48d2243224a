"""The generation loop, in two layers.

`decode` is the token-level generator over a batch: forward, sample, record; no text. Beam search and speculative
decoding are other loops over the same `forward` / `trim` / `fork` and the same sampler.
`generate(model, request, cancel, prefix)` wraps it for one request: prompt -> prefill (only what the `Prefix`
cache does not already hold) -> decode of `request.n` samples in one batch -> events, one per token per sample.
It reads the model's `capabilities`: a model without a local forward pass (a server) samples by itself, and its
run is `remote_run`'s, with the same events.
It checks `cancel` before every step and between prefill chunks. Stops on EOS, stop strings (which may span
tokens and are never shown), max tokens, the context length, or cancel. Text is detokenized as a stream: no
half characters, no dropped bytes. It does not own threads or the model's lifetime: `model_thread` does.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from app.core.events import Event, Finished, FinishReason, Message, Prefilled, Request, Step
from app.core.metrics import Clock, Metrics
from app.core.pipeline import History
from app.core.prefill import chunks as prefill_chunks
from app.core.record import Sample
from app.core.remote_run import run_remote
from app.core.sampling import mu_after, start_sample
from app.core.settings import MAX_SEED, SamplerSettings
from app.core.stages import dry_breaker_ids
from app.core.stops import StopHold
from app.core.trace import RunTrace, StepTrace
from backends.base import LoadedModel, Model, StreamDecoder, Tokenizer
from backends.ops import ArrayOps
from backends.remote import RemoteModel


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
        if cache is None or n <= 0 or not model.capabilities.trim_fork:
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


def generate(model: Model, request: Request, cancel: threading.Event,
             prefix: Prefix | None = None) -> Iterator[Event]:
    """The events of one request, by what the model declares: a model with a local forward pass is prefilled and
    decoded here (reusing `prefix`'s cache); one that samples by itself (a server) streams what it reports.

    A branch (`request.inherited`) starts after its parent's first k steps: they are prefilled (mostly from the
    `Prefix` cache), taken into its trace and re-sent as its first Step events, and its draws continue the
    seed's sequence at step k (the same uniform per step as its parent); `request.force` is taken at step k."""
    if not model.capabilities.forward:
        return run_remote(cast(RemoteModel, model), request, cancel)
    return _generate(cast(LoadedModel, model), request, cancel, prefix if prefix is not None else Prefix())


def _generate(model: LoadedModel, request: Request, cancel: threading.Event, prefix: Prefix) -> Iterator[Event]:
    clock = Clock()
    ids, text, context = _checked_prompt(model, request)
    seed = _seed(request.settings)
    cache, reused = prefix.take(model, context)
    logits = _prefill(model, cache, context, reused, cancel)
    if logits is None:  # cancelled between chunks: the cache keeps what was computed
        prefix.keep(model, cache, context)
        yield from _cancelled_in_prefill(request, clock.metrics(len(context), 0), reused)
        return
    yield Prefilled(request.id, tuple(ids), text, seed, clock.prefilled(), reused)
    batch = _start_batch(model, request, ids, text, seed, cache, clock, context, int(logits.shape[-1]))
    yield from _replay(batch)
    last = _last_step(request.settings.max_tokens, len(ids), model.info.context_length)
    yield from _decode_all(batch, logits, last - len(request.inherited), cancel)
    prefix.keep(model, cache, ids + batch.runs[0].drawn if request.n == 1 else context)  # n > 1: the shared cache
    yield from _finish(batch, last, len(context), reused)


def _checked_prompt(model: LoadedModel, request: Request) -> tuple[list[int], str, list[int]]:
    """The prompt's ids and text, and the context the model sees before the first new step (the prompt and a
    branch's inherited tokens); a PromptError where they do not fit the model's context."""
    ids, text = build_prompt(model.tokenizer, request, model.info.context_length)
    context = ids + [st.token_id for st in request.inherited]
    ctx = model.info.context_length
    if ctx and len(context) >= ctx:
        raise PromptError(f"the prompt and the branch's first {len(request.inherited)} tokens are {len(context)} "
                          f"tokens; this model's context holds {ctx}")
    return ids, text, context


def _seed(settings: SamplerSettings) -> int:
    """The run's seed: the one set, else a new one (reported, so that the run can be repeated)."""
    return settings.seed if settings.seed is not None else secrets.randbelow(MAX_SEED + 1)


def _prefill(model: LoadedModel, cache: Any, context: list[int], reused: int, cancel: threading.Event) -> Any:
    """The last position's logits (1, V) once `context` after its first `reused` tokens is in `cache`, in chunks
    sized by time, so that a cancel waits at most ~one chunk; None if cancelled."""
    logits = None
    for i, j in prefill_chunks(reused, len(context)):
        if cancel.is_set():
            return None
        logits = model.forward([context[i:j]], cache)
        model.ops.sync([logits])  # computed now, not when a lazy framework (MLX) gets to it: timed, cancellable
    return logits


def _cancelled_in_prefill(request: Request, metrics: Metrics, reused: int) -> Iterator[Finished]:
    for rid in request.run_ids:
        yield Finished(request.id, "cancelled", replace(metrics, reused_tokens=reused), None, rid)


def _last_step(max_tokens: int, prompt_len: int, context_length: int) -> int:
    """How many steps a sample may take: max_tokens, unless the model's context fills up first."""
    return max(0, min(max_tokens, context_length - prompt_len) if context_length else max_tokens)


@dataclass
class _Batch:
    """A request's samples as they decode: each one's text side (`_Run`) and draws (`Row`), and their cache."""

    model: LoadedModel
    request: Request
    runs: list[_Run]
    rows: list[Row]
    cache: Any  # (n, positions): the prompt's cache forked into rows when n > 1
    eos: frozenset[int]
    texts: dict[int, str] = field(default_factory=dict)  # token id -> display text, shared by every step


def _start_batch(model: LoadedModel, request: Request, ids: list[int], text: str, seed: int, cache: Any,
                 clock: Clock, context: list[int], vocab: int) -> _Batch:
    """Sample i draws with seed + i; with n > 1 the prompt's cache is forked, and stays reusable itself."""
    runs = [_new_run(model, request, ids, text, (seed + i) % (MAX_SEED + 1), rid, i, clock)
            for i, rid in enumerate(request.run_ids)]
    batch = model.fork(cache, request.n) if request.n > 1 else cache
    rows = [_new_row(model, request, run, context, vocab) for run in runs]
    eos = frozenset() if request.ignore_eos else model.tokenizer.eos_ids
    return _Batch(model, request, runs, rows, batch, eos)


def _replay(b: _Batch) -> Iterator[Step]:
    """A branch's inherited steps, re-sent as each sample's first steps; one that ended in EOS ends the sample."""
    inherited = b.request.inherited
    for run, row in zip(b.runs, b.rows, strict=True):
        yield from (Step(b.request.id, st.step, st.token_id, st.text, st, 0, run.id, run.sequence) for st in inherited)
        if inherited and inherited[-1].token_id in b.eos:
            run.reason, row.done = "eos", True


def _decode_all(b: _Batch, logits: Any, steps: int, cancel: threading.Event) -> Iterator[Step]:
    """Up to `steps` draws per sample; a sample stops at EOS or a stop string, all of them on cancel."""
    request = b.request
    for outs in decode(b.model, logits, b.cache, request.settings, b.rows, steps=steps, top_n=request.top_n,
                       record=request.record, cancel=cancel):
        for run, row, out in zip(b.runs, b.rows, outs, strict=True):
            if out is not None:
                yield from _take(b, run, row, out)


def _take(b: _Batch, run: _Run, row: Row, out: Sample | int) -> Iterator[Step]:
    """One drawn token: its text (held back while it may start a stop string) and the steps now safe to show."""
    token = token_of(out)
    run.drawn.append(token)
    seconds = run.clock.token()
    done = token in b.eos
    piece = "" if done else run.decoder.add(token)
    released, stopped = run.hold.push(piece, (len(run.drawn) - 1, out, seconds), partial=not done and piece == "")
    yield from _steps(b, run, released)
    if done or stopped:
        run.reason, row.done = ("eos" if done else "stop"), True


def _finish(b: _Batch, last: int, context_len: int, reused: int) -> Iterator[Step | Finished]:
    """Each sample's held-back text, then its end: why it stopped, its metrics and its trace."""
    kv = b.model.cache_bytes(b.cache)
    ran_out: FinishReason = "context" if last < b.request.settings.max_tokens else "length"
    for run in b.runs:
        reason = run.reason or ("cancelled" if len(run.drawn) < last else ran_out)
        yield from _steps(b, run, run.hold.finish(run.decoder.flush()))
        metrics = replace(run.clock.metrics(context_len, kv), reused_tokens=reused)
        run.trace.finish_reason, run.trace.metrics = reason, metrics
        yield Finished(b.request.id, reason, metrics, run.trace, run.id, run.sequence)


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
    if request.settings.needs_history:
        k = len(request.inherited)
        s = request.settings  # DRY's breakers: the tokens whose text holds one (once per model and breakers)
        breakers = dry_breaker_ids(model.tokenizer.token_text, vocab, s.dry_breakers) if s.dry_multiplier else None
        history = History.start(model.ops, vocab, context[: len(context) - k], context[len(context) - k :],
                                breakers or frozenset())
        if s.mirostat_tau and request.inherited:  # a branch goes on with its parent's μ
            history.mu = mu_after(request.inherited[-1].sample, s)
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


def _steps(b: _Batch, run: _Run, released: list) -> Iterator[Step]:
    if not released:
        return
    kv = b.model.cache_bytes(b.cache)
    for piece, (step, out, seconds) in released:
        trace = None
        if isinstance(out, Sample):
            top = out.top_ids[: b.request.top_n]
            trace = StepTrace(step, out, piece, _texts(b.model.tokenizer, top, b.texts), seconds)
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
