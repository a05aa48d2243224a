"""The token-level generator over a batch: forward, sample, record; no text, no events.

`decode` draws one token per row per step, each row with its own seeded uniforms, penalty counts and (where
set) its own sampler settings, so that rows of different requests share one forward. Beam search and
speculative decoding are other loops over the same `forward` / `trim` / `fork` and the same sampler.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.core.record.record import Sample
from app.core.sampler.batch_sampling import PendingRows, start_samples
from app.core.sampler.forcing import forced
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import PendingSample
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
    settings: SamplerSettings | None = None  # this row's sampler (None: the batch's, `decode`'s `settings`)


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
        groups = start_rows(ops, logits, rows, settings, top_n, record)
        forcing = any(r.force is not None for r in rows)
        ahead = ops.overlap and step + 1 < steps and not forcing
        if ahead:  # this step's draws and records first, so that reading them waits for them only
            ops.start([a for _, g in groups for a in g.outputs])
            logits = model.forward(_tokens(ops, groups, len(rows)), cache)
            ops.start([logits])
        outs = _results(groups, len(rows))
        if forcing:
            outs = [_forced(ops, r, o) for r, o in zip(rows, outs, strict=True)]
        yield [None if r.done else o for r, o in zip(rows, outs, strict=True)]
        if not ahead and step + 1 < steps and not all(r.done for r in rows):
            logits = model.forward([[token_of(o)] for o in outs], cache)


Group = tuple[list[int], PendingSample | PendingRows]  # the rows (their indices) sharing settings, and their step


def start_rows(ops: ArrayOps, logits: Any, rows: list[Row], settings: SamplerSettings, top_n: int,
               record: bool) -> list[Group]:
    """Start every row's draw: the rows whose settings shape the distribution alike (`SamplerSettings.pipeline`:
    their seeds, lengths and stop strings may differ) in one batched step (`start_samples`), each with its seed's
    next uniform and its penalty counts. The one place a step calls the sampler."""
    by_settings: dict[SamplerSettings, list[int]] = {}
    for i, r in enumerate(rows):
        by_settings.setdefault(r.settings or settings, []).append(i)
    groups: dict[SamplerSettings, list[int]] = {}
    for s, idx in by_settings.items():  # (`pipeline()` once per distinct settings, not per row and step)
        groups.setdefault(s.pipeline(), []).extend(idx)
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


def _forced(ops: ArrayOps, row: Row, out: Sample | int) -> Sample | int:
    """`out` with the row's forced token taken instead of the drawn one; its penalty counts follow."""
    if row.force is None:
        return out
    token, row.force = row.force, None
    if row.history is not None:
        row.history.swap(ops, token_of(out), token)
    return forced(out, token) if isinstance(out, Sample) else token


def token_of(out: Sample | int) -> int:
    return out.token if isinstance(out, Sample) else out
