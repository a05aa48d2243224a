"""The sampler pipeline: penalties, then small `logits -> logits` stages in the chosen order, then a draw.

Written once against `ArrayOps`, so the same definition runs on numpy (the reference), mlx and torch.
A stage cuts a token by setting its logit to -inf. The draw is an inverse CDF over the final distribution
with one uniform number from the run's seeded generator, so a seed gives the same tokens on every backend
and a recorded step can be re-drawn under other settings. `sample` also records, for the top-N raw
candidates, what each stage kept: the exact distribution the token was drawn from.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache, partial

import numpy as np

from app.core.settings import SamplerSettings, StageOrder
from backends.ops import NUMPY, Array, ArrayOps

NEG_INF = float("-inf")
LOGIT_LIMIT = 1e9  # raw logits are clipped here: NaN/-huge become -inf, +inf becomes this
SCALED_LIMIT = 1e30  # after temperature
U_MAX = 1 - 2**-23
RECORD_K = 256  # raw logits kept per step for re-sampling without the model

Stage = tuple[str, Callable[[ArrayOps, Array], Array]]


class NoValidTokenError(RuntimeError):
    """The model gave no finite logit (NaN/inf everywhere): nothing can be sampled."""


def apply_temperature(ops: ArrayOps, x: Array, t: float) -> Array:
    if t == 0:
        return apply_top_k(ops, x, 1)  # greedy: the top token, ties to the lowest id
    y = ops.minimum(ops.maximum(x / t, -SCALED_LIMIT), SCALED_LIMIT)
    return ops.where(ops.isfinite(x), y, NEG_INF)


def apply_top_k(ops: ArrayOps, x: Array, k: int) -> Array:
    """Keep exactly k tokens (fewer only if fewer are finite); ties at the k-th value go to lower ids."""
    return keep_first(ops, x, ops.max(x) if k == 1 else ops.kth_largest(x, k), k)


def apply_top_p(ops: ArrayOps, x: Array, p: float) -> Array:
    """Keep the smallest prefix of the most likely tokens whose mass reaches p (at least one token)."""
    sorted_x = ops.sort_desc(x)  # values only: the prefix is then cut by value, without an argsort + scatter
    e = ops.exp(sorted_x - sorted_x[0])  # the first is the largest
    sorted_p = e / ops.sum(e)
    before = ops.cumsum(sorted_p) - sorted_p  # mass strictly before each position
    n = ops.sum((before < max(p, 1e-30)) & ops.isfinite(sorted_x))
    return keep_first(ops, x, ops.take(sorted_x, ops.maximum(n - 1, 0)), n)


def keep_first(ops: ArrayOps, x: Array, kth: Array, n: Array | int) -> Array:
    """The first n tokens in descending order, ties broken by lower id, given the n-th value `kth`: all above
    it, then as many of those equal to it as there is room for. O(vocabulary), no sort."""
    above, tied = x > kth, x == kth
    room = n - ops.sum(above)
    return ops.where(above | (tied & (ops.count_cumsum(tied) <= room)), x, NEG_INF)


def apply_min_p(ops: ArrayOps, x: Array, m: float) -> Array:
    """Keep tokens whose probability is at least m times the top token's."""
    return ops.where(x >= ops.max(x) + math.log(m), x, NEG_INF)


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
    def start(cls, ops: ArrayOps, vocab: int, prompt_ids: Sequence[int]) -> History:
        ids = np.asarray([i for i in prompt_ids if 0 <= i < vocab], dtype=np.int64)
        return cls(ops.f32(np.bincount(ids, minlength=vocab)[:vocab]), ops.zeros(vocab))

    def add(self, ops: ArrayOps, token: Array) -> None:
        self.context, self.generated = bump(ops, self.context, token), bump(ops, self.generated, token)


def bump(ops: ArrayOps, counts: Array, token: Array) -> Array:
    """counts with one more of `token` (shape (1,)), as a new array."""
    return ops.scatter(counts, token, ops.take(counts, token) + 1)


def apply_penalties(ops: ArrayOps, x: Array, s: SamplerSettings, context: Array, generated: Array) -> Array:
    """Repetition (over prompt + output) then frequency and presence (over the output only)."""
    if s.repetition_penalty != 1:
        r = s.repetition_penalty
        x = ops.where(context > 0, ops.where(x > 0, x / r, x * r), x)
    if s.frequency_penalty != 0 or s.presence_penalty != 0:
        x = x - generated * s.frequency_penalty - (generated > 0) * s.presence_penalty
    return x


def sanitize(ops: ArrayOps, logits: Array) -> Array:
    x = ops.f32(logits)
    return ops.minimum(ops.where(x > -LOGIT_LIMIT, x, NEG_INF), LOGIT_LIMIT)


class Dist:
    """softmax(x) computed stably: shifted by the max, normalized by the sum (exact even for huge logits)."""

    def __init__(self, ops: ArrayOps, x: Array) -> None:
        self.ops, self.m = ops, ops.max(x)
        self.xm = x - self.m
        e = ops.exp(self.xm)
        z = ops.sum(e)
        self.log_z = ops.log(z)
        self.p = e / z

    def logprob(self, idx: Array) -> Array:
        return self.ops.take(self.xm, idx) - self.log_z

    @property
    def lse(self) -> Array:
        return self.m + self.log_z

    def entropy(self) -> Array:
        return self.log_z - self.ops.sum(self.p * self.ops.where(self.p > 0, self.xm, 0.0))


@dataclass(frozen=True)
class Sample:
    """One step's outcome on the host. Arrays over the top-N raw candidates are (N,) or (stages, N)."""

    token: int
    prob: float  # in the final distribution
    raw_logprob: float
    rank: int  # 0-based, in the raw distribution
    entropy: float  # of the raw distribution (nats)
    final_entropy: float
    stage_names: tuple[str, ...]
    kept_counts: np.ndarray  # (stages,)
    top_ids: np.ndarray  # (RECORD_K,) raw order, descending
    top_logits: np.ndarray  # (RECORD_K,) sanitized raw logits
    raw_lse: float  # logsumexp of all raw logits
    final_probs: np.ndarray  # (N,)
    kept: np.ndarray  # (stages, N) bool
    u: float

    def cut_by(self, i: int) -> str | None:
        """The first stage that cut top candidate i, or None if it was kept."""
        for name, kept in zip(self.stage_names, self.kept[:, i], strict=True):
            if not kept:
                return name
        return None


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
    host_record: Callable[[np.ndarray], tuple] | None = None  # the record, made on numpy around the token

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
            host = list(self.host_record(host[0]))
        if len(host) == 2:
            return token
        _, sc, counts, ids, vals, final, kept = host
        return Sample(
            token=token, prob=float(sc[1]), raw_logprob=float(sc[2]), rank=int(sc[3]),
            entropy=max(0.0, float(sc[4])), final_entropy=max(0.0, float(sc[5])),
            stage_names=self.stage_names,
            kept_counts=counts.astype(np.int64), top_ids=ids.astype(np.int64), top_logits=vals.astype(np.float32),
            raw_lse=float(sc[6]), final_probs=final.astype(np.float32), kept=kept.astype(bool), u=self.u,
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

    Where the executor says `host_record` (MLX on a CPU), the device only draws and the record is made on
    numpy from the same logits once the token is read: numpy's vector maths is many times faster there, and
    the record's ~50 small ops would otherwise each queue behind the next forward.
    """
    vocab = int(logits.shape[0])
    top_n = min(top_n, vocab)
    penalties = history is not None and settings.uses_penalties
    on_host = record and ops.host_record
    step, names, stages = _step_function(ops, _pipeline(settings), vocab, top_n, record and not on_host, penalties)
    hist = (history.context, history.generated) if penalties else ()
    # -inf arithmetic is intended (masks); a step with no finite logit is caught in `result`.
    with np.errstate(all="ignore"):
        out = step(logits, ops.f32(u), *hist)
    if penalties:
        *out, history.context, history.generated = out
    later = partial(_host_record, ops, stages, settings, top_n, logits, hist) if on_host else None
    return PendingSample(ops, tuple(out), names, u, later)


@lru_cache(maxsize=64)
def _pipeline(settings: SamplerSettings) -> SamplerSettings:
    """`settings.pipeline()`, cached: the step function's key, computed once per run rather than every step."""
    return settings.pipeline()


@lru_cache(maxsize=64)
def _step_function(ops: ArrayOps, settings: SamplerSettings, vocab: int, top_n: int, record: bool,
                   penalties: bool) -> tuple[Callable[..., tuple], tuple[str, ...], list[Stage]]:
    """The device step, compiled where the executor can, the names of its stages and the stages (made once
    per settings, not per step)."""
    stages = make_stages(settings, vocab)

    def step(logits: Array, u: Array, *hist: Array) -> tuple:
        return _device_step(ops, stages, settings, top_n, record, logits, u, *hist)

    return ops.compile(step), tuple(name for name, _ in stages), stages


def _device_step(ops, stages, s, top_n, record, logits, u, *hist) -> tuple:  # noqa: ANN001
    """Everything on the device and nothing on the host: pipeline, draw, history update, the record."""
    raw, outs, final = _run_pipeline(ops, stages, s, logits, *hist)
    cdf = ops.cumsum(final.p)
    # u is capped one float32 step below 1 so that u * total < total survives rounding: the first index where
    # the CDF passes u * total always exists and always has p > 0.
    token = ops.minimum(ops.sum(cdf <= ops.minimum(u, U_MAX) * cdf[-1]), raw.shape[0] - 1)
    tok = ops.stack([token])  # (1,)
    bumped = tuple(bump(ops, h, tok) for h in hist)
    if not record:
        return (tok, ops.stack([final.lse]), *bumped)
    return (*_record(ops, raw, outs, final, tok, top_n), *bumped)


def _host_record(ops, stages, s, top_n, logits, hist, tok) -> tuple:  # noqa: ANN001
    """`_device_step`'s record on numpy, around the token the device drew."""
    host = [NUMPY.f32(ops.numpy(a)) for a in (logits, *hist)]
    with np.errstate(all="ignore"):
        raw, outs, final = _run_pipeline(NUMPY, stages, s, *host)
        return _record(NUMPY, raw, outs, final, tok.astype(np.int64), top_n)


def _run_pipeline(ops, stages, s, logits, *hist) -> tuple:  # noqa: ANN001
    raw = sanitize(ops, logits)
    x = apply_penalties(ops, raw, s, *hist) if hist else raw
    outs = []
    for _, fn in stages:
        x = fn(ops, x)
        outs.append(x)
    return raw, outs, Dist(ops, x)


def _record(ops, raw, outs, final, tok, top_n) -> tuple:  # noqa: ANN001
    """What the trace keeps of one step: top candidates, what each stage kept, the drawn token's numbers."""
    vocab = raw.shape[0]
    rd = Dist(ops, raw)
    top_vals, top_ids = ops.topk(raw, min(RECORD_K, vocab))
    ids_n = top_ids[:top_n]
    kept = ops.stack([ops.isfinite(ops.take(o, ids_n)) for o in outs])
    counts = ops.stack([ops.sum(ops.isfinite(o)) for o in outs])
    raw_tok = ops.take(raw, tok)
    rank = ops.sum(raw > raw_tok) + ops.sum((raw == raw_tok) & (ops.arange(vocab) < tok))
    scalars = ops.stack([
        ops.f32(tok[0]), ops.take(final.p, tok)[0], rd.logprob(tok)[0], ops.f32(rank),
        rd.entropy(), final.entropy(), rd.lse, final.lse,
    ])
    return (tok, scalars, counts, top_ids, top_vals, ops.take(final.p, ids_n), kept)


def resample(
    top_ids: np.ndarray,
    top_logits: np.ndarray,
    settings: SamplerSettings,
    u: float,
    *,
    context_ids: Sequence[int] = (),
    generated_ids: Sequence[int] = (),
    top_n: int = 20,
) -> Sample:
    """Re-apply `settings` to a recorded step without the model, over its top-`RECORD_K` raw logits.

    Exact whenever every token the new settings keep is among the recorded ones and the cut does not depend
    on the unrecorded tail: greedy, top-k ≤ RECORD_K (then any top-p / min-p / penalties), min-p alone.
    Ranks and token ids are those of the full vocabulary.
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
    return _to_full_vocab(s, ids)


def _to_full_vocab(s: Sample, ids: np.ndarray) -> Sample:
    return replace(s, token=int(ids[s.token]), top_ids=ids[s.top_ids])
