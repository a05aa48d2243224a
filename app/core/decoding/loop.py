"""The token-level generator over a batch: forward, sample, record; no text, no events.

`decode` draws one token per row per step, each row with its own seeded uniforms, penalty counts and (where
set) its own sampler settings, so that rows of different requests share one forward. Beam search and
speculative decoding are other loops over the same `forward` / `trim` / `fork` and the same sampler.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from app.core.record.live_lens import LiveLens
from app.core.record.record import Sample
from app.core.sampler.batch_sampling import PendingRows, start_samples
from app.core.sampler.forcing import forced
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import PendingSample, pipeline_of
from app.core.sampler.think_budget import ThinkState, taken
from app.core.settings import SamplerSettings
from backends.base import LoadedModel
from backends.ops import ArrayOps


@dataclass
class Row:
    """One row of a batch as `decode` sees it: its own seeded draws and penalty counts. The caller sets `done`."""

    rng: np.random.Generator
    history: History | None = None
    done: bool = False
    force: int | None = None  # the token to take at the first step, whatever the draw (a fork)
    then: list[int] = field(default_factory=list)  # taken at the steps after `force`'s, one a step (a path)
    settings: SamplerSettings | None = None  # this row's sampler (None: the batch's, `decode`'s `settings`)
    think: ThinkState | None = None  # a thinking model's span and budget: each token is pushed, a due one forced
    end: tuple[str, str] | None = None  # set by `decode` where a constraint's grammar ended it: (reason, message)


def decode(model: LoadedModel, logits: Any, cache: Any, settings: SamplerSettings, rows: list[Row], *,
           steps: int, top_n: int = 20, record: bool = True, lens: int = 0,
           cancel: threading.Event | None = None) -> Iterator[list[Sample | int | None]]:
    """Draw up to `steps` tokens for each row; `logits` (B, V) or (1, V) (one prefill shared by every row).

    Yields, per step, one outcome per row (a `Sample`, or a token id when not recording; None for a row already
    done). Between steps the caller may mark rows done; decoding ends when all are, after `steps`, or on cancel.
    Where the device runs behind the host, step t+1's forward is queued before step t is read (as mlx-lm).
    A row's `force` replaces its first draw (the step is recorded as drawn, with the forced token taken), its `then`
    the draws after it, one each (a multiverse path), and so does the closing marker a hard think budget makes due
    (`Row.think`, which each row's token is pushed to).
    `lens` > 0 (the model's layers watched: `decoding.inside.watching`): each Sample gets its live lens, every
    layer's logits for the step's top-`lens` raw candidates, read from the forward that made the step's logits.
    """
    ops = model.ops
    for step in range(steps):
        if (cancel is not None and cancel.is_set()) or all(r.done for r in rows) or _grammars_end(ops, rows):
            return
        for r in rows:
            if r.think is not None and r.force is None and not r.done:
                r.force = r.think.due()
        seen = _start_lens(model, logits, lens) if lens and record else None  # (before the next forward)
        groups = start_rows(ops, logits, rows, settings, top_n, record)
        forcing = any(r.force is not None for r in rows)
        ahead = ops.overlap and step + 1 < steps and not forcing and not _rechecked(rows, settings)
        made = None
        if ahead:  # this step's draws and records first, so that reading them waits for them only
            ops.start([a for _, g in groups for a in g.outputs])
            logits = model.forward(_tokens(ops, groups, len(rows)), cache)
            made = _beside(ops, groups, len(rows)) if record else None
            ops.start([logits])
        outs = made.result() if made is not None else _results(groups, len(rows))
        if forcing:
            outs = [_forced(ops, r, o, logits, i) for i, (r, o) in enumerate(zip(rows, outs, strict=True))]
        for r, o in zip(rows, outs, strict=True):
            if r.think is not None and not r.done:
                r.think.push(token_of(o))
        if seen is not None:
            outs = _lensed(ops, seen, outs)
        yield [None if r.done else o for r, o in zip(rows, outs, strict=True)]
        if not ahead and step + 1 < steps and not all(r.done for r in rows):
            logits = model.forward([[token_of(o)] for o in outs], cache)


Group = tuple[list[int], PendingSample | PendingRows]  # the rows (their indices) sharing settings, and their step


def start_rows(ops: ArrayOps, logits: Any, rows: list[Row], settings: SamplerSettings, top_n: int,
               record: bool) -> list[Group]:
    """Start every row's draw: the rows whose settings shape the distribution alike (`SamplerSettings.pipeline`:
    their seeds, lengths and stop strings may differ) in one batched step (`start_samples`), each with its seed's
    next uniform and its penalty counts. The one place a step calls the sampler."""
    first = rows[0].settings or settings
    if all((r.settings or settings) is first for r in rows):  # (the usual batch: one settings object, no hashing)
        s = pipeline_of(first)
        return [(list(range(len(rows))), start_samples(ops, logits, s, [float(r.rng.random()) for r in rows],
                                                       histories=[r.history for r in rows], top_n=top_n,
                                                       record=record))]
    by_settings: dict[SamplerSettings, list[int]] = {}
    for i, r in enumerate(rows):
        by_settings.setdefault(r.settings or settings, []).append(i)
    groups: dict[SamplerSettings, list[int]] = {}
    for s, idx in by_settings.items():  # (`pipeline()` once per distinct settings, not per row and step)
        groups.setdefault(pipeline_of(s), []).extend(idx)
    groups = {s: sorted(idx) for s, idx in groups.items()}
    us = [float(r.rng.random()) for r in rows]
    return [(idx, start_samples(ops, _logits_of(ops, logits, idx, len(rows)), s, [us[i] for i in idx],
                                histories=[rows[i].history for i in idx], top_n=top_n, record=record))
            for s, idx in groups.items()]


def _logits_of(ops: ArrayOps, logits: Any, idx: list[int], n: int) -> Any:
    """The logits of the rows `idx`: all of them (one prefill shared by every row, or every row), else those rows."""
    return logits if logits.shape[0] == 1 or len(idx) == n else ops.stack([logits[i] for i in idx])


def _tokens(ops: ArrayOps, groups: list[Group], n: int) -> Any:
    """(n, 1) the drawn tokens in row order, on the device."""
    if len(groups) == 1:
        return groups[0][1].tokens
    by_row: list[Any] = [None] * n
    for idx, g in groups:
        tokens = g.tokens
        for j, i in enumerate(idx):
            by_row[i] = tokens[j]
    return ops.stack(by_row)


def _results(groups: list[Group], n: int) -> list[Sample | int]:
    """Every row's outcome, in row order (each group's arrays read once)."""
    outs: list[Any] = [None] * n
    for idx, g in groups:
        for i, out in zip(idx, g.results(), strict=True):
            outs[i] = out
    return outs


def _beside(ops: ArrayOps, groups: list[Group], n: int) -> Future[list[Sample | int]] | None:
    """Every row's outcome, made on the executor's helper thread (`ops.beside`: MLX's CPU build, whose queueing of
    the next forward blocks this thread until the device has nearly run it) from the arrays read here and now; None
    where the executor has no helper or a constraint's check may draw again on the device."""
    beside = getattr(ops, "beside", None)
    if beside is None or not all(g.host_only for _, g in groups):
        return None
    reads = [(idx, g.read()) for idx, g in groups]

    def outcomes() -> list[Sample | int]:
        outs: list[Any] = [None] * n
        for idx, make in reads:
            for i, out in zip(idx, make(), strict=True):
                outs[i] = out
        return outs

    return beside(outcomes)


def _forced(ops: ArrayOps, row: Row, out: Sample | int, logits: Any, i: int) -> Sample | int:
    """`out` with the row's forced token taken instead of the drawn one; its penalty counts follow. A think budget's
    closing marker may lie outside the record's candidates: its numbers are then read from the step's `logits`."""
    if row.force is None:
        return out
    token, row.force = row.force, (row.then.pop(0) if row.then else None)
    if row.history is not None:
        row.history.swap(ops, token_of(out), token)
    if not isinstance(out, Sample):
        return token
    if row.think is not None and token == row.think.asked:
        return taken(ops, out, token, logits[min(i, logits.shape[0] - 1)])
    return forced(out, token)


def _start_lens(model: LoadedModel, logits: Any, k: int) -> tuple[Any, Any] | None:
    """Each layer's logits for each logits row's top-k raw candidates, at the position the last forward read
    (queued, not read: a lazy framework computes them beside the next forward); None when no layer was watched."""
    states = model.layer_states()  # type: ignore[attr-defined]  # (a `Layers` model: decoding.inside.watching)
    if states is None:
        return None
    ops = model.ops
    ids = ops.stack([ops.topk(ops.f32(logits[i]), k)[1] for i in range(logits.shape[0])])  # (B or 1, k)
    lensed = model.layer_logits(states, ids)  # type: ignore[attr-defined]  # (B or 1, L+1, k)
    ops.start([ids, lensed])
    return ids, lensed


def _lensed(ops: ArrayOps, seen: tuple[Any, Any], outs: list[Sample | int]) -> list[Sample | int]:
    """Each row's Sample with its `LiveLens` (one logits row shared by every row: its lens too)."""
    ids, lensed = (ops.numpy(a) for a in seen)
    last = len(ids) - 1
    return [replace(o, lens=LiveLens(ids[min(i, last)].astype(np.int32), lensed[min(i, last)].astype(np.float32)))
            if isinstance(o, Sample) else o for i, o in enumerate(outs)]


def _grammars_end(ops: ArrayOps, rows: list[Row]) -> bool:
    """End the rows whose constraint's grammar can go no further (complete, or allowing no token: `Row.end` says
    which); whether every row is done now."""
    for r in rows:
        grammar = None if r.done or r.history is None else r.history.grammar
        if grammar is not None and (e := grammar.end(r.history.host_ids(ops))) is not None:  # type: ignore[union-attr]
            r.done, r.end = True, (e.reason, e.message)
    return all(r.done for r in rows)


def _rechecked(rows: list[Row], settings: SamplerSettings) -> bool:
    """A row's constraint checks the drawn token after the draw ("on_reject"): its token is known only when read."""
    return any((c := (r.settings or settings).constraint) is not None and c.place == "on_reject" for r in rows)


def token_of(out: Sample | int) -> int:
    return out.token if isinstance(out, Sample) else out
