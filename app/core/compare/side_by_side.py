"""Side by side: runs of one prompt under different settings (the columns), compared step by step.

`first_divergence` finds the first step where the columns' drawn tokens differ (a column that ended while another
went on differs there too); while columns still stream, it answers for what is known so far and says so.
`overlay` lays the recorded distributions of every column at one step over one set of candidate tokens, for a
chart to draw as is: it only looks numbers up in each step's record (`Sample`), it computes no probability. Columns
may run on different models: `model_groups` says which columns share one (only those are overlaid: token ids are a
model's own), and `step_keys` what the divergence compares (ids on one model, the tokens' texts across models).
Knows nothing of Qt.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from app.core.record.record import StepTrace

MAX_COLUMNS = 4
MIN_COLUMNS = 2
Distribution = Literal["final", "raw"]  # the one each column sampled from, or the model's


@dataclass(frozen=True)
class Divergence:
    """The first step where the columns disagree, and each column's token there (None: it had ended, or, while
    not `settled`, has not reached it yet)."""

    step: int  # counted from 0, as every view and the CLI count steps
    tokens: tuple[int | str | None, ...]  # (texts where the columns run on different models: `step_keys`)
    settled: bool = True  # False: a column still running has not reached this step, and may differ sooner


@dataclass(frozen=True)
class Overlay:
    """One step of every column over shared candidates: `probs[c, i]` is column c's recorded probability of
    candidate i (NaN where c's record holds none: a step it did not reach, a token outside its top-N)."""

    step: int
    distribution: Distribution
    candidates: tuple[int, ...]  # token ids, by their highest recorded probability over the columns
    texts: tuple[str, ...]  # each candidate's display text, as a column's record has it
    probs: np.ndarray  # (columns, candidates) float64
    drawn: tuple[int | None, ...]  # per column, the index in `candidates` of the token it drew (None: not shown)


def model_groups(models: Sequence[Hashable]) -> list[tuple[int, ...]]:
    """The columns (indexes) by model, each group in column order, the groups in order of their first column."""
    groups: dict[Hashable, list[int]] = {}
    for c, m in enumerate(models):
        groups.setdefault(m, []).append(c)
    return [tuple(g) for g in groups.values()]


def step_keys(columns: Sequence[Sequence[StepTrace]], one_model: bool) -> list[list[int | str]]:
    """What `first_divergence` compares, per column and step: the drawn token ids where every column runs one
    model, else the tokens' texts (two models' ids need not name the same token)."""
    return [[st.token_id if one_model else st.text for st in col] for col in columns]


def first_divergence(columns: Sequence[Sequence[Hashable]], done: Sequence[bool] | None = None) -> Divergence | None:
    """The first step at which the token sequences differ, as far as they are known: `done[c]` False means column
    c may still grow, so its end is no divergence, and steps it has not reached are compared without it (the
    answer is then not `settled`). None while the columns agree."""
    done = [True] * len(columns) if done is None else list(done)
    for k in range(max((len(c) for c in columns), default=0)):
        known = [c[k] if len(c) > k else None for c, d in zip(columns, done, strict=True) if len(c) > k or d]
        if len(set(known)) > 1:
            settled = len(known) == len(columns)
            return Divergence(k, tuple(c[k] if len(c) > k else None for c in columns), settled)
    return None


def overlay(steps: Sequence[StepTrace | None], step: int, distribution: Distribution = "final",
            top: int = 10) -> Overlay:
    """Step `step` of each column (None: that column has no such step) over the `top` candidates most probable in
    any column's record, plus every drawn token its record holds."""
    rows = [_row(st, distribution) for st in steps]
    best: dict[int, float] = {}
    texts: dict[int, str] = {}
    for row in rows:
        for tok, p, text in row:
            best[tok] = max(best.get(tok, -math.inf), p)
            texts.setdefault(tok, text)
    ranked = sorted(best, key=lambda t: (-best[t], t))
    drawn_ids = {st.token_id for st in steps if st is not None and st.token_id in best}
    chosen = ranked[:top] + [t for t in ranked[top:] if t in drawn_ids]
    index = {t: i for i, t in enumerate(chosen)}
    probs = np.full((len(steps), len(chosen)), np.nan)
    for c, row in enumerate(rows):
        for tok, p, _text in row:
            if tok in index:
                probs[c, index[tok]] = p
    drawn = tuple(None if st is None else index.get(st.token_id) for st in steps)
    return Overlay(step, distribution, tuple(chosen), tuple(texts[t] for t in chosen), probs, drawn)


def _row(st: StepTrace | None, distribution: Distribution) -> list[tuple[int, float, str]]:
    """(token id, recorded probability, text) of each top-N candidate of a step's record, in its order."""
    if st is None:
        return []
    s = st.sample
    probs = s.final_probs if distribution == "final" else s.raw_probs
    if probs is None:  # a server reported the other distribution only
        return []
    n = min(len(probs), len(st.top_texts), len(s.top_ids))
    return [(int(s.top_ids[i]), float(probs[i]), st.top_texts[i]) for i in range(n) if math.isfinite(probs[i])]
