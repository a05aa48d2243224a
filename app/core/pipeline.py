"""The sampler pipeline: penalties, then small stages in the chosen order (what `sampling.py` runs and draws from).

Written once against `ArrayOps`, so the same definition runs on numpy (the reference), mlx and torch.
A stage takes logits and returns a `Cut`: the logits it left (a cut token's logit is -inf) and where it cut.
`History` holds the token counts the penalties need; `Dist` is the softmax the draw and the record read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import NamedTuple

import numpy as np

from app.core.settings import SamplerSettings, StageOrder
from backends.ops import Array, ArrayOps

NEG_INF = float("-inf")
LOGIT_LIMIT = 1e9  # raw logits are clipped here: NaN/-huge become -inf, +inf becomes this
SCALED_LIMIT = 1e30  # after temperature


class Cut(NamedTuple):
    """What a stage left, and where it cut for the record (`_threshold` in sampling.py puts it in probability space)."""

    x: Array  # (V,) logits; a cut token's is -inf
    line: Array | None = None  # top-k, min-p: the lowest logit kept, in the stage's input
    mass: float | None = None  # top-p: the cumulative probability it cut at
    order: tuple[Array, Array] | None = None  # top-p: its input sorted descending and the running mass (V,)


Stage = tuple[str, Callable[[ArrayOps, Array], Cut]]


def apply_temperature(ops: ArrayOps, x: Array, t: float) -> Cut:
    if t == 0:
        return Cut(apply_top_k(ops, x, 1).x)  # greedy: the top token, ties to the lowest id
    y = ops.minimum(ops.maximum(x / t, -SCALED_LIMIT), SCALED_LIMIT)
    return Cut(ops.where(ops.isfinite(x), y, NEG_INF))


def apply_top_k(ops: ArrayOps, x: Array, k: int) -> Cut:
    """Keep exactly k tokens (fewer only if fewer are finite); ties at the k-th value go to lower ids."""
    kth = ops.max(x) if k == 1 else ops.kth_largest(x, k)
    return Cut(keep_first(ops, x, kth, k), line=kth)


def apply_top_p(ops: ArrayOps, x: Array, p: float) -> Cut:
    """Keep the smallest prefix of the most likely tokens whose mass reaches p (at least one token)."""
    sorted_x = ops.sort_desc(x)  # values only: the prefix is then cut by value, without an argsort + scatter
    e = ops.exp(sorted_x - sorted_x[0])  # the first is the largest
    sorted_p = e / ops.sum(e)
    cdf = ops.cumsum(sorted_p)
    n = ops.sum((cdf - sorted_p < max(p, 1e-30)) & ops.isfinite(sorted_x))  # by the mass strictly before each
    return Cut(keep_first(ops, x, ops.take(sorted_x, ops.maximum(n - 1, 0)), n), mass=p, order=(sorted_x, cdf))


def keep_first(ops: ArrayOps, x: Array, kth: Array, n: Array | int) -> Array:
    """The first n tokens in descending order, ties broken by lower id, given the n-th value `kth`: all above
    it, then as many of those equal to it as there is room for. O(vocabulary), no sort."""
    above, tied = x > kth, x == kth
    room = n - ops.sum(above)
    return ops.where(above | (tied & (ops.count_cumsum(tied) <= room)), x, NEG_INF)


def apply_min_p(ops: ArrayOps, x: Array, m: float) -> Cut:
    """Keep tokens whose probability is at least m times the top token's."""
    line = ops.max(x) + math.log(m)
    return Cut(ops.where(x >= line, x, NEG_INF), line=line)


def make_stages(s: SamplerSettings, vocab: int) -> list[Stage]:
    """The enabled stages in order; filters always run top-k, top-p, min-p."""
    filters: list[Stage] = []
    if 0 < s.top_k < vocab:
        filters.append(("top_k", partial(apply_top_k, k=s.top_k)))
    if s.top_p < 1:
        filters.append(("top_p", partial(apply_top_p, p=s.top_p)))
    if s.min_p > 0:
        filters.append(("min_p", partial(apply_min_p, m=s.min_p)))
    temp: Stage = ("greedy" if s.greedy else "temperature", partial(apply_temperature, t=s.temperature))
    return [temp, *filters] if s.order == StageOrder.TEMPERATURE_FIRST else [*filters, temp]


@dataclass
class History:
    """Token counts the penalties need, kept on the device: the whole context and the generated part."""

    context: Array  # (V,) float counts of prompt + generated tokens
    generated: Array  # (V,) float counts of generated tokens

    @classmethod
    def start(cls, ops: ArrayOps, vocab: int, prompt_ids: Sequence[int], generated: Sequence[int] = ()) -> History:
        """Counts for a run about to draw after `prompt_ids` and the tokens it has already `generated`."""
        return cls(ops.f32(_counts([*prompt_ids, *generated], vocab)), ops.f32(_counts(generated, vocab)))

    def add(self, ops: ArrayOps, token: Array) -> None:
        self.context, self.generated = bump(ops, self.context, token), bump(ops, self.generated, token)

    def swap(self, ops: ArrayOps, drawn: int, taken: int) -> None:
        """The counts as if `taken` had been drawn instead of `drawn` (a forced token; once per fork)."""
        for name in ("context", "generated"):
            counts = ops.numpy(getattr(self, name)).astype(np.float32)
            counts[drawn] -= 1
            counts[taken] += 1
            setattr(self, name, ops.f32(counts))


def _counts(ids: Sequence[int], vocab: int) -> np.ndarray:
    ids = np.asarray([i for i in ids if 0 <= i < vocab], dtype=np.int64)
    return np.bincount(ids, minlength=vocab)[:vocab].astype(np.float32)


def bump(ops: ArrayOps, counts: Array, token: Array) -> Array:
    """counts with one more of `token` (shape (1,)), as a new array."""
    return ops.scatter(counts, token, ops.take(counts, token) + 1)


def apply_penalties(ops: ArrayOps, x: Array, s: SamplerSettings, context: Array, generated: Array) -> Array:
    """Repetition (over prompt + output) then frequency and presence (over the output only)."""
    if s.repetition_penalty != 1:
        r = s.repetition_penalty
        x = ops.where(context > 0, ops.where(x > 0, x / r, x * r), x)
    if s.frequency_penalty != 0 or s.presence_penalty != 0:
        # the mask as float32: numpy would make bool × float a float64 and the rest of the step with it
        x = x - generated * s.frequency_penalty - ops.f32(generated > 0) * s.presence_penalty
    return x


def sanitize(ops: ArrayOps, logits: Array) -> Array:
    x = ops.f32(logits)
    return ops.minimum(ops.where(x > -LOGIT_LIMIT, x, NEG_INF), LOGIT_LIMIT)


class Dist:
    """softmax over the last axis, computed stably: shifted by the max, normalized by the sum (exact even for huge
    logits). One distribution (V,), or one per row (R, V) with every quantity per row: the record stacks each
    stage's input and the final logits and normalizes them all in one pass (a handful of vector calls per step
    instead of a handful per stage). `p` over the whole vocabulary is made only when asked for; `at` gives the
    same values at a few ids."""

    def __init__(self, ops: ArrayOps, x: Array) -> None:
        self.ops, self.x, self.m = ops, x, ops.max(x, axis=-1)  # m: () or (R,)
        self.xm = x - self.m[..., None]
        self.e = ops.exp(self.xm)
        self.z = ops.sum(self.e, axis=-1)
        self.log_z = ops.log(self.z)

    @cached_property
    def p(self) -> Array:
        return self.e / self.z[..., None]

    def at(self, idx: Array) -> Array:
        """(N,) or (R, N): the probabilities at the ids `idx`."""
        return self.e[..., idx] / self.z[..., None]

    @property
    def lse(self) -> Array:
        return self.m + self.log_z

    def entropy(self, rows: slice | None = None) -> Array:
        """log z - Σ e (x - m) / z over the tokens with e > 0, of each row (or of the `rows` a slice picks, a view).
        A cut token's x - m is -inf: it is zeroed before the product (0 × -inf is NaN, and slow to make)."""
        e, xm, z, log_z = (self.e, self.xm, self.z, self.log_z) if rows is None else (
            self.e[rows], self.xm[rows], self.z[rows], self.log_z[rows])
        return log_z - self.ops.sum(e * self.ops.where(e > 0, xm, 0.0), axis=-1) / z


def run_stages(ops: ArrayOps, stages: Sequence[Stage], s: SamplerSettings, raw: Array, *hist: Array) -> list[Cut]:
    """Each stage's cut of the sanitized logits `raw`, in order (the penalties' first when `hist` is given)."""
    cuts = [Cut(apply_penalties(ops, raw, s, *hist))] if hist else []
    for _, fn in stages:
        cuts.append(fn(ops, cuts[-1].x if cuts else raw))
    return cuts
