"""The sampler pipeline: penalties, then small stages in the chosen order, then a draw.

Written once against `ArrayOps`, so the same definition runs on numpy (the reference), mlx and torch.
A stage takes logits and returns a `Cut`: the logits it left (a cut token's logit is -inf) and where it cut.
The draw is an inverse CDF over the final distribution with one uniform number from the run's seeded
generator, so a seed gives the same tokens on every backend and a recorded step can be re-drawn under other
settings. `sample` also records what every stage received, left, kept and cut at, for the top-N raw
candidates (a `Sample`, defined in trace.py): views draw that record and compute no stage themselves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache, partial
from typing import NamedTuple

import numpy as np

from app.core.settings import SamplerSettings, StageOrder
from app.core.trace import Sample
from backends.ops import NUMPY, Array, ArrayOps

NEG_INF = float("-inf")
NAN = float("nan")
LOGIT_LIMIT = 1e9  # raw logits are clipped here: NaN/-huge become -inf, +inf becomes this
SCALED_LIMIT = 1e30  # after temperature
U_MAX = 1 - 2**-23
RECORD_K = 256  # raw logits kept per step for re-sampling without the model


class Cut(NamedTuple):
    """What a stage left, and where it cut for the record (`_threshold` puts it in probability space)."""

    x: Array  # (V,) logits; a cut token's is -inf
    line: Array | None = None  # top-k, min-p: the lowest logit kept, in the stage's input
    mass: float | None = None  # top-p: the cumulative probability it cut at
    order: tuple[Array, Array] | None = None  # top-p: its input sorted descending and the running mass (V,)


Stage = tuple[str, Callable[[ArrayOps, Array], Cut]]


class NoValidTokenError(RuntimeError):
    """The model gave no finite logit (NaN/inf everywhere): nothing can be sampled."""


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


def sample(
    ops: ArrayOps,
    logits: Array,
    settings: SamplerSettings,
    u: float,
    *,
    history: History | None = None,
    top_n: int = 20,
    record: bool = True,
) -> Sample | int:
    """Run the pipeline on one step's logits (V,) and draw with `u` in [0, 1).

    Returns a `Sample` (one host transfer per step), or just the token id when `record` is False. The device
    part is one pure function per (settings, vocabulary, top-N), which an executor may compile (MLX does).
    """
    return start_sample(ops, logits, settings, u, history=history, top_n=top_n, record=record).result()


@dataclass
class PendingSample:
    """A drawn token still on the device: feed `token` to the next forward, then read `result()`, so the
    device computes step t+1 while the host turns step t into a trace (as mlx-lm's generate_step does)."""

    ops: ArrayOps
    outputs: tuple
    stage_names: tuple[str, ...]
    u: float
    host_record: Callable[..., tuple] | None = None  # the record on numpy, from the step's host outputs

    @property
    def token(self) -> Array:  # (1,) int, on the device
        return self.outputs[0]

    def result(self) -> Sample | int:
        self.ops.sync(list(self.outputs))
        host = [self.ops.numpy(a) for a in self.outputs]
        if not math.isfinite(float(host[1][-1])):
            raise NoValidTokenError("the model produced no finite logits (NaN or infinity): try float32")
        token = int(host[0][0])
        if self.host_record is not None:
            host = list(self.host_record(*host))
        if len(host) == 2:
            return token
        _, sc, counts, ids, vals, probs, kept, lines, *cumulative = host
        return Sample.record(
            token=token, rank=int(sc[3]), u=self.u, stage_names=self.stage_names, top_ids=ids, top_logits=vals,
            probs=probs, kept=kept, thresholds=lines, kept_counts=counts,
            top_p_cumulative=cumulative[0] if cumulative else None, prob=sc[1], raw_logprob=sc[2],
            entropy=max(0.0, float(sc[4])), final_entropy=max(0.0, float(sc[5])), raw_lse=sc[6],
        )


def start_sample(
    ops: ArrayOps,
    logits: Array,
    settings: SamplerSettings,
    u: float,
    *,
    history: History | None = None,
    top_n: int = 20,
    record: bool = True,
) -> PendingSample:
    """`sample`, without waiting for the device: the history is updated, the host transfer is deferred.

    Where the executor says `host_record` (MLX on a CPU), the device runs the pipeline and draws, and the record
    is made on numpy from the stages' logits it hands over, once the token is read: numpy's vector maths is many
    times faster there, and the record's small ops would otherwise each queue behind the next forward.
    """
    vocab = int(logits.shape[0])
    top_n = min(top_n, vocab)
    penalties = history is not None and settings.uses_penalties
    mode = (HOST if ops.host_record else RECORD) if record else DRAW
    step, names = _step_function(ops, _pipeline(settings), vocab, top_n, mode, penalties)
    hist = (history.context, history.generated) if penalties else ()
    # -inf arithmetic is intended (masks); a step with no finite logit is caught in `result`.
    with np.errstate(all="ignore"):
        out = step(logits, ops.f32(u), *hist)
    if penalties:
        *out, history.context, history.generated = out
    later = partial(_host_record, len(names), top_n) if mode == HOST else None
    return PendingSample(ops, tuple(out), names, u, later)


DRAW, RECORD, HOST = "draw", "record", "host"  # the device step draws; draws and records; draws for a host record


@lru_cache(maxsize=64)
def _pipeline(settings: SamplerSettings) -> SamplerSettings:
    """`settings.pipeline()`, cached: the step function's key, computed once per run rather than every step."""
    return settings.pipeline()


@lru_cache(maxsize=64)
def _step_function(ops: ArrayOps, settings: SamplerSettings, vocab: int, top_n: int, mode: str,
                   penalties: bool) -> tuple[Callable[..., tuple], tuple[str, ...]]:
    """The device step, compiled where the executor can (its stages made once per settings, not per step), and
    the names of its stages (penalties first when they apply)."""
    stages = make_stages(settings, vocab)

    def step(logits: Array, u: Array, *hist: Array) -> tuple:
        return _device_step(ops, stages, settings, top_n, mode, logits, u, *hist)

    names = ("penalties",) * penalties + tuple(name for name, _ in stages)
    return ops.compile(step), names


def _device_step(ops, stages, s, top_n, mode, logits, u, *hist) -> tuple:  # noqa: ANN001
    """Everything on the device and nothing on the host: pipeline, draw, history update, and the record (RECORD)
    or what the host makes it from (HOST)."""
    raw = sanitize(ops, logits)
    cuts = _run_stages(ops, stages, s, raw, *hist)
    rows = _rows(ops, raw, cuts) if mode == RECORD else Dist(ops, cuts[-1].x)
    cdf = ops.cumsum(rows.e[-1] / rows.z[-1] if mode == RECORD else rows.p)  # the final distribution
    # u is capped one float32 step below 1 so that u * total < total survives rounding: the first index where
    # the CDF passes u * total always exists and always has p > 0.
    token = ops.minimum(ops.sum(cdf <= ops.minimum(u, U_MAX) * cdf[-1]), raw.shape[0] - 1)
    tok = ops.stack([token])  # (1,)
    bumped = tuple(bump(ops, h, tok) for h in hist)
    if mode == RECORD:
        return (*_record(ops, raw, cuts, rows, tok, top_n), *bumped)
    if mode == HOST:
        return (tok, *_cut_arrays(ops, raw, cuts, rows.lse), *bumped)
    return (tok, ops.stack([rows.lse]), *bumped)  # lse (1,): `result` checks it is finite


def _cut_arrays(ops: ArrayOps, raw: Array, cuts: list[Cut], lse: Array) -> tuple:
    """What the host's record needs of the pipeline, which it then does not run again: (2S+1,) each stage's line
    and mass (NaN: none) and the final lse; (S+1, V) the sanitized logits and each stage's output; top-p's order
    as (2, V). A handful of arrays the device has computed anyway, read in one transfer each."""
    small = ops.stack([*(NAN if c.line is None else c.line for c in cuts),
                       *(NAN if c.mass is None else c.mass for c in cuts), lse])
    orders = tuple(ops.stack(list(c.order)) for c in cuts if c.order is not None)
    return (small, ops.stack([raw, *(c.x for c in cuts)]), *orders)


def _host_record(stages: int, top_n: int, tok: np.ndarray, small: np.ndarray, x: np.ndarray,
                 *orders: np.ndarray) -> tuple:
    """`_device_step`'s record on numpy, from the `_cut_arrays` of the step that drew `tok`."""
    values, orders = small.tolist(), iter(orders)  # Python floats: cheaper to test than numpy scalars
    lines, masses = values[:stages], values[stages:-1]
    cuts = [Cut(x[i + 1], line=None if math.isnan(line) else np.float32(line),
                mass=None if math.isnan(mass) else mass, order=None if math.isnan(mass) else tuple(next(orders)))
            for i, (line, mass) in enumerate(zip(lines, masses, strict=True))]
    with np.errstate(all="ignore"):
        return _record(NUMPY, x[0], cuts, Dist(NUMPY, x), tok.astype(np.int64), top_n)


def _run_stages(ops, stages, s, raw, *hist) -> list[Cut]:  # noqa: ANN001
    """Each stage's cut of the sanitized logits `raw`, in order (the penalties' first when `hist` is given)."""
    cuts = [Cut(apply_penalties(ops, raw, s, *hist))] if hist else []
    for _, fn in stages:
        cuts.append(fn(ops, cuts[-1].x if cuts else raw))
    return cuts


def _rows(ops: ArrayOps, raw: Array, cuts: list[Cut]) -> Dist:
    """The distributions the record reads, as rows of one (S+1, V) array: row s is stage s's input, the last
    row the final distribution (which the token is drawn from)."""
    return Dist(ops, ops.stack([raw, *(c.x for c in cuts)]))


def _record(ops, raw, cuts, rows, tok, top_n) -> tuple:  # noqa: ANN001
    """What the trace keeps of one step: the drawn token's numbers, the top-K raw logits and, over the top-N raw
    candidates, each stage's input and output probabilities, what it kept and its threshold."""
    vocab, last = raw.shape[0], len(cuts)
    top_vals, top_ids = ops.topk(raw, min(RECORD_K, vocab))
    ids = top_ids[:top_n]
    probs = rows.at(ids)  # (S+1, N)
    finite = ops.isfinite(rows.x[1:])  # (S, V): what each stage left
    kept = finite[:, ids]  # (S, N)
    counts = ops.sum(finite, axis=-1)  # (S,)
    lines = ops.stack([_threshold(ops, c, rows, i) for i, c in enumerate(cuts)])  # (S,)
    cumulative = [_cumulative(ops, c, rows.x[i], ids) for i, c in enumerate(cuts) if c.order is not None]
    raw_tok = ops.take(raw, tok)
    rank = ops.sum(raw > raw_tok) + ops.sum((raw == raw_tok) & (ops.arange(vocab) < tok))
    logp = rows.xm[:, tok][:, 0] - rows.log_z  # (S+1,) the token's log-probability in each row
    entropy, lse = rows.entropy(slice(None, None, last)), rows.lse  # rows 0 and S (raw, final) only: a view
    scalars = ops.stack([ops.f32(tok[0]), ops.exp(logp[last]), logp[0], ops.f32(rank), entropy[0], entropy[1],
                         lse[0], lse[last]])
    return (tok, scalars, counts, top_ids, top_vals, probs, kept, lines, *cumulative)


def _threshold(ops: ArrayOps, cut: Cut, rows: Dist, i: int) -> Array | float:
    """Where stage i cut, in the probability space of its input (row i of `rows`); NaN for a stage that cuts
    nothing. A logit line maps through the input's own softmax: top-k's is then exactly its k-th token's
    probability, min-p's min_p × the top probability."""
    if cut.mass is not None:
        return cut.mass
    if cut.line is not None:
        return ops.exp(cut.line - rows.m[i]) / rows.z[i]
    return NAN


def _cumulative(ops: ArrayOps, cut: Cut, x: Array, ids: Array) -> Array:
    """(N,) the running mass top-p computed at each candidate `ids` of its input `x`, in its own order (value
    descending, ties to lower ids): at the position after every larger value and the tied candidates before.
    (A token outside the top-N tied with a candidate, at a lower id, would be ahead of it too: only penalties
    can make one, and only by an exact float tie; it is not counted.)"""
    sorted_x, cdf = cut.order
    v = ops.take(x, ids)
    ahead = ops.sum((v[None, :] == v[:, None]) & (ids[None, :] < ids[:, None]), axis=-1)  # tied, lower id
    return ops.take(cdf, ops.minimum(ops.count_above(sorted_x, v) + ahead, sorted_x.shape[0] - 1))


def resample(
    top_ids: np.ndarray,
    top_logits: np.ndarray,
    settings: SamplerSettings,
    u: float,
    *,
    context_ids: Sequence[int] = (),
    generated_ids: Sequence[int] = (),
    top_n: int = 20,
    recorded: Sample | None = None,
) -> Sample:
    """Re-apply `settings` to a recorded step without the model, over its top-`RECORD_K` raw logits.

    Exact whenever every token the new settings keep is among the recorded ones and the cut does not depend
    on the unrecorded tail: greedy, top-k ≤ RECORD_K (then any top-p / min-p / penalties), min-p alone; a
    stage's row before such a cut is over the recorded logits. Ranks and token ids are those of the full
    vocabulary, and so are the raw numbers when the `recorded` step is given (its raw row, entropy, lse).
    """
    by_id = np.argsort(top_ids, kind="stable")  # id order, so ties and the CDF walk match the full vocabulary
    ids, sub = top_ids[by_id], np.asarray(top_logits, dtype=np.float32)[by_id]
    remap = {int(t): i for i, t in enumerate(ids)}
    hist = None
    if settings.uses_penalties:
        local = lambda seq: [remap[int(t)] for t in seq if int(t) in remap]
        hist = History.start(NUMPY, len(ids), local([*context_ids, *generated_ids]))
        gen = np.bincount(np.asarray(local(generated_ids), dtype=np.int64), minlength=len(ids))
        hist.generated = gen.astype(np.float32)
    s = sample(NUMPY, sub, settings, u, history=hist, top_n=top_n)
    assert isinstance(s, Sample)
    s = replace(s, token=int(ids[s.token]), top_ids=ids[s.top_ids])
    return s if recorded is None else _with_raw_of(s, recorded)


def _with_raw_of(s: Sample, recorded: Sample) -> Sample:
    """`s` with the raw distribution's numbers of the step it re-samples, which saw the whole vocabulary."""
    n = s.top_n
    if recorded.top_n < n or not np.array_equal(recorded.top_ids[:n], s.top_ids[:n]):
        return s
    at = int(np.flatnonzero(recorded.top_ids == s.token)[0])
    return s.with_raw(recorded.probs[0, :n], float(recorded.top_logits[at]) - recorded.raw_lse, recorded.entropy,
                      recorded.raw_lse)
