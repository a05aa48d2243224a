"""The sampler pipeline: penalties, then the stages the settings turn on, in their order (what `sampling.py` runs
and draws from). Written once against `ArrayOps`, so the same definition runs on numpy (the reference), mlx and torch.
A stage (`stages.py`) takes logits and returns a `Cut`: the logits it left (a cut token's logit is -inf) and where
it cut. `History` holds the token counts the penalties need; `Dist` is the softmax the draw and the record read
(`Dist.of`: on numpy, from a cut distribution's few finite logits alone, with the same numbers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

import numpy as np

from app.core.sampler.stages import BUILDERS, NEG_INF, Cut, Given, Stage
from app.core.settings import SamplerSettings
from backends.ops import Array, ArrayOps

if TYPE_CHECKING:
    from app.core.sampler.constraint import GrammarEnded
    from app.core.sampler.grammar_step import Allowed
    from app.core.sampler.think_budget import ThinkState

LOGIT_LIMIT = 1e9  # raw logits are clipped here: NaN/-huge become -inf, +inf becomes this
U_MAX = 1 - 2**-23  # the draw's uniform is capped one float32 step below 1


def make_stages(s: SamplerSettings, vocab: int) -> list[Stage]:
    """The enabled stages (`SamplerSettings.enabled_stages`), in the settings' order; a constraint's grammar before
    them where it is placed first (`grammar_first`)."""
    head = [BUILDERS["grammar"](s, vocab)] if grammar_first(s) else []
    return head + [BUILDERS[name](s, vocab) for name in s.enabled_stages(vocab)]


def grammar_first(s: SamplerSettings) -> bool:
    """A constraint whose grammar runs as the first stage (every other sees only the tokens it allows); one placed
    "on_reject" runs after the draw instead (`constraint.py`), and first only to draw a refused step again."""
    return s.constraint is not None and s.constraint.place == "first"


class Grammar(Protocol):
    """What a step asks of a row's constraint (`constraint.Matcher`): the mask (V,) of the tokens it allows after the
    row's context `ids` (1 allowed, 0 not), followed there first; then what it allowed, for the step's record."""

    def mask(self, ids: Sequence[int]) -> np.ndarray: ...
    def end(self, ids: Sequence[int]) -> GrammarEnded | None: ...  # why it can go no further (None: it can)
    def allowed(self, ops: ArrayOps, logits: Array) -> Allowed: ...


@dataclass
class History:
    """What a run carries from step to step: the token counts the penalties need (the whole context and the
    generated part) and mirostat's μ, on the device; the context's tokens and DRY's breakers, on the host."""

    context: Array  # (V,) float counts of prompt + generated tokens
    generated: Array  # (V,) float counts of generated tokens
    mu: Array | None = None  # mirostat's running μ (None: not started, 2τ)
    ids: list[int] = field(default_factory=list)  # the context's tokens on the host (DRY reads them)
    pending: Array | None = None  # the last drawn token, still on the device: appended to `ids` when next read
    breakers: frozenset[int] = frozenset()  # DRY's breaker tokens (`stages.dry_breaker_ids`)
    dry: np.ndarray | None = None  # DRY's penalties given for the next step (a re-sample's), instead of from `ids`
    grammar: Grammar | None = None  # a constraint's matcher, following `ids` (`constraint.Matcher`)
    think: ThinkState | None = None  # the think span and its budget (`think_budget.ThinkState`), fed by the decoder

    @classmethod
    def start(cls, ops: ArrayOps, vocab: int, prompt_ids: Sequence[int], generated: Sequence[int] = (),
              breakers: frozenset[int] = frozenset()) -> History:
        """Counts for a run about to draw after `prompt_ids` and the tokens it has already `generated`."""
        return cls(ops.f32(_counts([*prompt_ids, *generated], vocab)), ops.f32(_counts(generated, vocab)),
                   ids=[int(t) for t in (*prompt_ids, *generated)], breakers=breakers)

    def host_ids(self, ops: ArrayOps) -> list[int]:
        """The context's tokens, the last drawn one read from the device if it was still there."""
        if self.pending is not None:
            self.ids.append(int(ops.numpy(self.pending).reshape(-1)[0]))
            self.pending = None
        return self.ids

    def add(self, ops: ArrayOps, token: Array) -> None:
        self.context, self.generated = bump(ops, self.context, token), bump(ops, self.generated, token)

    def swap(self, ops: ArrayOps, drawn: int, taken: int) -> None:
        """The counts as if `taken` had been drawn instead of `drawn` (a forced token; once per fork)."""
        if self.pending is not None:  # DRY follows the tokens: the drawn one is the last
            self.host_ids(ops)[-1] = taken
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

    def draw(self, u: Array) -> Array:
        """(1,) the token the uniform `u` draws from the distribution (the last row's): the first whose running mass
        passes u × the whole. u is capped one float32 step below 1 so that u * total < total survives rounding: that
        token always exists and always has p > 0."""
        ops = self.ops
        cdf = ops.cumsum(self.p if self.x.ndim == 1 else self.e[-1] / self.z[-1])
        return ops.stack([ops.minimum(ops.sum(cdf <= ops.minimum(u, U_MAX) * cdf[-1]), self.x.shape[-1] - 1)])

    @staticmethod
    def of(ops: ArrayOps, x: Array) -> Dist:
        """The Dist of one distribution (V,), with the same numbers: where the executor finds its few finite logits
        (numpy, after a cut: `ArrayOps.survivors`), made from those alone. (Rows stay one (R, V) Dist: numpy's
        vector calls over them cost less than finding each row's few.)"""
        few = ops.survivors(x)
        return Dist(ops, x) if few is None else _Few(ops, x, *few)

    def entropy(self, rows: slice | None = None) -> Array:
        """log z - Σ e (x - m) / z over the tokens with e > 0, of each row (or of the `rows` a slice picks, a view).
        A cut token's x - m is -inf: it is zeroed before the product (0 × -inf is NaN, and slow to make)."""
        e, xm, z, log_z = (self.e, self.xm, self.z, self.log_z) if rows is None else (
            self.e[rows], self.xm[rows], self.z[rows], self.log_z[rows])
        return log_z - self.ops.sum(e * self.ops.where(e > 0, xm, 0.0), axis=-1) / z


class _Few(Dist):
    """A Dist (V,) made on numpy from its few finite logits (`ids` ascending, `v`), bit for bit the whole vector's: the
    same max, exponentials and probabilities at those ids (0 elsewhere), and the sum over the vocabulary taken over the
    same (V,) vector of exponentials (numpy's sums go pairwise: a shorter vector could round otherwise)."""

    def __init__(self, ops: ArrayOps, x: np.ndarray, ids: np.ndarray, v: np.ndarray) -> None:
        self.ops, self.x, self.ids, self.m = ops, x, ids, ops.max(v)
        self.few = ops.exp(v - self.m)  # (k,)
        self.z = ops.sum(self._whole(self.few), axis=-1)
        self.log_z = ops.log(self.z)

    def _whole(self, values: np.ndarray) -> np.ndarray:
        out = np.zeros(self.x.shape[0], dtype=np.float32)
        out[self.ids] = values
        return out

    @cached_property
    def e(self) -> np.ndarray:  # type: ignore[override]
        return self._whole(self.few)

    @cached_property
    def xm(self) -> np.ndarray:  # type: ignore[override]
        return self.x - self.m

    @cached_property
    def p(self) -> np.ndarray:
        return self._whole(self.few / self.z)

    def draw(self, u: Array) -> Array:
        """Dist.draw over the few: the whole running mass holds each of theirs from its id to the next one's."""
        cdf = np.cumsum(self.few / self.z, dtype=np.float32)
        passed = self.ops.sum(cdf <= self.ops.minimum(u, U_MAX) * cdf[-1])  # the survivors at or below u × the whole
        return self.ops.stack([self.ids[passed] if passed < self.ids.shape[0] else np.intp(self.x.shape[0] - 1)])


def run_stages(ops: ArrayOps, stages: Sequence[Stage], s: SamplerSettings, raw: Array, u: Array,
               *hist: Array, dry: Array | None = None, mask: Array | None = None,
               think: Array | None = None) -> list[Cut]:
    """Each stage's cut of the sanitized logits `raw`, in order (the penalties' first when `hist` is given); `u`
    (2,) or (3,) is the step's numbers: the draw's uniform, XTC's (`stages.xtc_uniform`), then mirostat's μ; `dry`
    DRY's penalties (V,) for this step (None: DRY subtracts nothing), `mask` the grammar's (None: it cuts nothing),
    `think` a soft think budget's raise (None: it adds nothing)."""
    given = Given(dry, mask, think)
    cuts = [Cut(apply_penalties(ops, raw, s, *hist))] if hist else []
    for _, fn in stages:
        cuts.append(fn(ops, cuts[-1].x if cuts else raw, u, given))
    return cuts
