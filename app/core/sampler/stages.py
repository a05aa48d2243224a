"""The sampler stages, each one small function `(ops, x, ...) -> Cut`: temperature, top-k, top-p, min-p, typical-p,
top-n-sigma, epsilon and eta cutoffs, XTC, dynamic temperature, mirostat v2, DRY, logit bias and a constraint's
grammar (its mask made on the host, `constraint.py`); and `BUILDERS`,
which makes each stage of the table (`app.core.stage_table`, same names) from the settings.

Written once against `ArrayOps` (numpy is the reference; mlx and torch run the same code; on numpy, top-p and
`keep_first` after a cut work on its few survivors alone, `ArrayOps.survivors`, to the bit). A stage records where it
cut in its input's probability space (`Cut.prob`) or as a logit line (`Cut.line`); the dynamic temperature records
the temperature it applied. XTC's coin is the step's second uniform (`xtc_uniform`), made from the run's own draw,
so a seed replays it and the trace's `u` records it. DRY's penalties come from the token sequence, on the host
(`dry_penalties`); the device stage subtracts them. Which stages run, and in what order: `pipeline.make_stages`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from app.core.stage_table import record_name
from backends.ops import Array, ArrayOps

if TYPE_CHECKING:
    from app.core.settings import SamplerSettings

NEG_INF = float("-inf")
NAN = float("nan")
SCALED_LIMIT = 1e30  # logits after a temperature are clipped here
MIN_DYNATEMP = 1e-6  # a dynamic temperature of 0 (range reaching 0, a certain step) divides by this instead
LN2 = math.log(2.0)
XTC_BITS = 2**24  # the draw reads u as float32 (24 bits); XTC's coin is the bits below them


class Cut(NamedTuple):
    """What a stage left, and where it cut for the record (`sampling._threshold` puts it in probability space)."""

    x: Array  # (V,) logits; a cut token's is -inf
    line: Array | None = None  # top-k, min-p, top-n-sigma: the lowest logit kept, in the stage's input
    mass: float | None = None  # top-p: the cumulative probability it cut at
    order: tuple[Array, Array] | None = None  # top-p: its input sorted descending and the running mass (V,)
    prob: Array | float | None = None  # a threshold already in the record's terms (a probability; dynatemp: its T)


def xtc_uniform(u: float) -> float:
    """XTC's uniform number for a step drawn with `u` (a float64 from the run's generator): its bits below the
    float32 the draw reads, as a number in [0, 1). Reproducible from the recorded `u`, independent of the draw."""
    return (u * XTC_BITS) % 1.0


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
    few = ops.survivors(x)
    if few is not None:  # (numpy, after a cut: the same numbers from its survivors alone)
        return _top_p_of_few(x, p, *few)
    sorted_x = ops.sort_desc(x)  # values only: the prefix is then cut by value, without an argsort + scatter
    e = ops.exp(sorted_x - sorted_x[0])  # the first is the largest
    sorted_p = e / ops.sum(e)
    cdf = ops.cumsum(sorted_p)
    n = ops.sum((cdf - sorted_p < max(p, 1e-30)) & ops.isfinite(sorted_x))  # by the mass strictly before each
    return Cut(keep_first(ops, x, ops.take(sorted_x, ops.maximum(n - 1, 0)), n), mass=p, order=(sorted_x, cdf))


def _top_p_of_few(x: np.ndarray, p: float, ids: np.ndarray, v: np.ndarray) -> Cut:
    """`apply_top_p` on numpy from the few finite logits alone (`ArrayOps.survivors`: ids ascending, values), each
    number the whole vector's: its sorted input and running mass are those of the survivors, then -inf and the whole
    mass; the one sum over the vocabulary is taken over the same (V,) vector (numpy's sums go pairwise: a shorter
    vector could round otherwise). The same tokens kept, ties to lower ids."""
    n, k = x.shape[0], v.shape[0]
    top = -np.sort(-v)  # (k,) descending
    e = np.exp(top - top[0])
    whole = np.zeros(n, dtype=np.float32)
    whole[:k] = e
    sorted_p = e / np.add.reduce(whole)
    cdf = np.cumsum(sorted_p, dtype=np.float32)
    keep = np.count_nonzero(cdf - sorted_p < max(p, 1e-30))  # by the mass strictly before each
    sorted_x, mass = np.full(n, NEG_INF, dtype=np.float32), np.full(n, cdf[-1], dtype=np.float32)
    sorted_x[:k], mass[:k] = top, cdf
    return Cut(_keep_first_of_few(n, top[max(keep - 1, 0)], keep, ids, v), mass=p, order=(sorted_x, mass))


def keep_first(ops: ArrayOps, x: Array, kth: Array, n: Array | int) -> Array:
    """The first n tokens in descending order, ties broken by lower id, given the n-th value `kth`: all above
    it, then as many of those equal to it as there is room for. O(vocabulary), no sort."""
    few = ops.survivors(x, kth)  # (numpy: the few at or above the n-th value, all it can keep, worked on alone)
    if few is not None:
        return _keep_first_of_few(x.shape[0], kth, n, *few)
    above, tied = x > kth, x == kth
    room = n - ops.sum(above)
    return ops.where(above | (tied & (ops.count_cumsum(tied) <= room)), x, NEG_INF)


def _keep_first_of_few(size: int, kth: np.ndarray, n: int, ids: np.ndarray, v: np.ndarray) -> np.ndarray:
    """`keep_first` over the candidates alone (`ids` ascending, values `v`: every one at or above `kth`), as a
    (size,) vector: -inf but where they are kept."""
    above, tied = v > kth, v == kth
    kept = above | (tied & (np.cumsum(tied, dtype=np.int32) <= n - np.count_nonzero(above)))
    out = np.full(size, NEG_INF, dtype=np.float32)
    out[ids[kept]] = v[kept]
    return out


def apply_min_p(ops: ArrayOps, x: Array, m: float) -> Cut:
    """Keep tokens whose probability is at least m times the top token's."""
    line = ops.max(x) + math.log(m)
    return Cut(ops.where(x >= line, x, NEG_INF), line=line)


def _log_softmax(ops: ArrayOps, x: Array) -> tuple[Array, Array]:
    """(log-probabilities, probabilities) of `x` (V,); a cut token's log-probability is -inf, its probability 0."""
    m = ops.max(x)
    logp = x - m - ops.log(ops.sum(ops.exp(x - m)))
    return logp, ops.exp(logp)


def _entropy(ops: ArrayOps, logp: Array, p: Array) -> Array:
    return -ops.sum(p * ops.where(p > 0, logp, 0.0))  # a cut token: 0 × 0, not 0 × -inf


def apply_typical_p(ops: ArrayOps, x: Array, mass: float) -> Cut:
    """Locally typical sampling: keep the tokens whose surprise is closest to the entropy until their mass reaches
    `mass` (transformers' TypicalLogitsWarper; at least one token)."""
    logp, p = _log_softmax(ops, x)
    shifted = abs(-logp - _entropy(ops, logp, p))  # (V,) inf for a cut token
    neg_sorted, idx = ops.topk(-shifted, x.shape[0])  # ascending distance from the entropy
    cdf = ops.cumsum(ops.take(p, idx))
    last = ops.minimum(ops.sum(cdf < mass), x.shape[0] - 1)
    line = -ops.take(neg_sorted, last)
    return Cut(ops.where(shifted <= line, x, NEG_INF), prob=mass)


def apply_top_n_sigma(ops: ArrayOps, x: Array, n: float) -> Cut:
    """Keep tokens whose logit is within n standard deviations of the top one (over the finite logits; llama.cpp's
    top-n-sigma)."""
    finite = ops.isfinite(x)
    count = ops.f32(ops.sum(finite))
    mean = ops.sum(ops.where(finite, x, 0.0)) / count
    d = ops.where(finite, x - mean, 0.0)
    line = ops.max(x) - n * (ops.sum(d * d) / count) ** 0.5
    return Cut(ops.where(x >= line, x, NEG_INF), line=line)


def _cut_below(ops: ArrayOps, x: Array, p: Array, line: Array | float) -> Cut:
    """Drop tokens less likely than `line` (a probability), keeping the top token (min_tokens_to_keep = 1)."""
    return Cut(ops.where((p >= line) | (x >= ops.max(x)), x, NEG_INF), prob=line)


def apply_epsilon_cutoff(ops: ArrayOps, x: Array, epsilon: float) -> Cut:
    """Drop tokens less likely than `epsilon` (transformers' EpsilonLogitsWarper)."""
    return _cut_below(ops, x, _log_softmax(ops, x)[1], epsilon)


def apply_eta_cutoff(ops: ArrayOps, x: Array, epsilon: float) -> Cut:
    """Drop tokens less likely than η = min(ε, √ε · e^-entropy) (transformers' EtaLogitsWarper)."""
    logp, p = _log_softmax(ops, x)
    eta = ops.minimum(math.sqrt(epsilon) * ops.exp(-_entropy(ops, logp, p)), epsilon)
    return _cut_below(ops, x, p, eta)


def apply_xtc(ops: ArrayOps, x: Array, r: Array, threshold: float, probability: float) -> Cut:
    """Exclude top choices: with chance `probability` (when the uniform `r` ≤ it), drop every token more likely
    than the least likely one above `threshold` (mlx-lm's apply_xtc). Records that token's probability as its
    line, NaN when the coin said no or fewer than two tokens were above the threshold."""
    p = _log_softmax(ops, x)[1]
    low = -ops.max(ops.where(p > threshold, -p, NEG_INF))  # inf when none is above the threshold
    fire = r <= probability
    cut = fire & (p > low)
    fired = fire & (ops.sum(cut) > 0)
    return Cut(ops.where(cut, NEG_INF, x), prob=ops.where(fired, low, NAN))


def apply_dynatemp(ops: ArrayOps, x: Array, t: float, spread: float, exponent: float) -> Cut:
    """Dynamic temperature (llama.cpp's temp_ext): from max(0, t - spread) at zero entropy to t + spread at the
    most, by the normalized entropy to the power `exponent`. Records the temperature it applied."""
    lo, hi = max(0.0, t - spread), t + spread
    logp, p = _log_softmax(ops, x)
    n = ops.f32(ops.sum(ops.isfinite(x)))
    top = ops.log(ops.maximum(n, 2.0))  # the most entropy n tokens can have (one token: normalized entropy 0)
    dyn = ops.maximum(lo + (hi - lo) * (ops.maximum(_entropy(ops, logp, p), 0.0) / top) ** exponent, MIN_DYNATEMP)
    y = ops.minimum(ops.maximum(x / dyn, -SCALED_LIMIT), SCALED_LIMIT)
    return Cut(ops.where(ops.isfinite(x), y, NEG_INF), prob=dyn)


def apply_mirostat(ops: ArrayOps, x: Array, mu: Array) -> Cut:
    """Mirostat v2 (llama.cpp's): drop the tokens whose surprise -log2 p exceeds μ, keeping the top one. Records its
    line 2^-μ (a probability, so μ = -log2 of the record's threshold); μ itself moves after the draw (`next_mu`)."""
    p = _log_softmax(ops, x)[1]
    line = ops.exp(-mu * LN2)
    return Cut(ops.where((p >= line) | (x >= ops.max(x)), x, NEG_INF), prob=line)


def next_mu(ops: ArrayOps, mu: Array, p_drawn: Array, tau: float, eta: float) -> Array:
    """Mirostat's μ after a draw with probability `p_drawn` in the final distribution: μ - η (surprise - τ)."""
    return ops.f32(mu - eta * (-ops.log(p_drawn) / LN2 - tau))  # an array, never a numpy scalar


def apply_logit_bias(ops: ArrayOps, x: Array, bias: Array) -> Cut:
    """Add a fixed value to chosen tokens' logits (`bias`, (V,), 0 elsewhere); a cut token stays cut."""
    return Cut(x + bias)



def apply_grammar(ops: ArrayOps, x: Array, mask: Array | None) -> Cut:
    """A constraint's grammar: cut every token it does not allow next (`mask` (V,): 1 allowed, 0 not; made on the host
    by `constraint.Matcher`); None (no matcher: a step without a history) cuts nothing."""
    return Cut(x if mask is None else ops.where(mask > 0, x, NEG_INF))


def apply_dry(ops: ArrayOps, x: Array, penalty: Array | None) -> Cut:
    """DRY: subtract each token's repetition penalty (`dry_penalties`, as a (V,) vector); none without a history."""
    return Cut(x if penalty is None else x - penalty)


def apply_think_budget(ops: ArrayOps, x: Array, bias: Array | None) -> Cut:
    """A soft think budget: add what the host made of it (`think_budget.bias_vector`, (V,): the closing marker's
    raise, 0 elsewhere; None without a history adds nothing). Records the raise as its threshold, in nats."""
    if bias is None:
        return Cut(x, prob=0.0)
    return Cut(x + bias, prob=ops.max(bias))


FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT_MAX_LOG = 88.7228391  # base ** exponent stays finite in float32 below this exponent × log(base)


def dry_penalties(ids: Sequence[int], multiplier: float, base: float, allowed: int,
                  breakers: frozenset[int] = frozenset()) -> dict[int, float]:
    """DRY, "don't repeat yourself" (llama.cpp's): a token that would extend a repeat of the context's last L ≥
    `allowed` tokens (the L tokens before an earlier occurrence of it equal the last L) is penalized by multiplier ×
    base^(L - allowed), L its longest such repeat. A repeat never reaches back past the last breaker token, and a
    breaker token is never penalized. Returns {token id: penalty}."""
    ctx = np.asarray(ids, dtype=np.int64)
    n = len(ctx)
    after = [i for i in range(n) if int(ctx[n - 1 - i]) in breakers]
    limit = after[0] if after else n  # tokens since the last breaker
    if multiplier <= 0 or n < 2 or limit < allowed:
        return {}
    best: dict[int, int] = {}
    for p in np.flatnonzero(ctx[:-1] == ctx[-1]).tolist():  # an earlier position that ends like the context
        length = 1
        while length < limit and p - length >= 0 and ctx[p - length] == ctx[n - 1 - length]:
            length += 1
        nxt = int(ctx[p + 1])
        if length >= allowed and nxt not in breakers and best.get(nxt, 0) < length:
            best[nxt] = length
    top = FLOAT_MAX_LOG / math.log(base) if base > 1.000001 else math.inf
    return {t: multiplier * base ** min(length - allowed, top) for t, length in best.items()}


def dry_vector(penalties: dict[int, float], vocab: int) -> np.ndarray:
    """(V,) float32: the penalties at their ids, 0 elsewhere (ids past the vocabulary left out); a penalty past
    float32's range is held at its largest value (the token is then as good as cut, without an overflow)."""
    vec = np.zeros(vocab, dtype=np.float32)
    for tid, value in penalties.items():
        if 0 <= tid < vocab:
            vec[tid] = min(value, FLOAT32_MAX)
    return vec


@lru_cache(maxsize=4)
def dry_breaker_ids(token_text: Callable[[int], str], vocab: int, breakers: tuple[str, ...]) -> frozenset[int]:
    """The tokens that break a DRY repeat: those whose text holds one of the `breakers` strings."""
    if not breakers:
        return frozenset()
    return frozenset(i for i in range(vocab) if any(b in token_text(i) for b in breakers))


# the stages as the pipeline runs them ---------------------------------------------------------------------------
class Given(NamedTuple):
    """What the host hands a step's stages beyond the logits and the step's numbers: DRY's penalties (V,) and the
    grammar's mask (V,) (`apply_grammar`); None where off."""

    dry: Array | None = None
    mask: Array | None = None
    think: Array | None = None  # a soft think budget's raise (V,) (`think_budget.bias_vector`)


# A stage: its name in the record, and its function of (ops, logits (V,), the step's numbers (2,) or (3,), what the
# host gave).
Stage = tuple[str, Callable[[ArrayOps, Array, Array, Given], Cut]]


def _plain(name: str, fn: Callable[..., Cut], **kw: Any) -> Stage:
    """A stage that does not read the step's uniforms."""
    return name, lambda ops, x, u, given: fn(ops, x, **kw)


def _temperature(s: SamplerSettings, vocab: int) -> Stage:
    name = record_name(s, "temperature")  # greedy at 0, dynatemp with a range
    if name == "dynatemp":
        return _plain(name, apply_dynatemp, t=s.temperature, spread=s.dynatemp_range, exponent=s.dynatemp_exponent)
    return _plain(name, apply_temperature, t=s.temperature)


def _logit_bias(s: SamplerSettings, vocab: int) -> Stage:
    bias = np.zeros(vocab, dtype=np.float32)
    for tid, value in s.logit_bias:
        if tid < vocab:
            bias[tid] = value
    return "logit_bias", lambda ops, x, u, dry, b=bias: apply_logit_bias(ops, x, ops.f32(b))


# stage name (a row of the stage table) -> (settings, vocabulary size) -> the stage
BUILDERS: dict[str, Callable[[SamplerSettings, int], Stage]] = {
    "logit_bias": _logit_bias,
    "temperature": _temperature,
    "top_k": lambda s, v: _plain("top_k", apply_top_k, k=s.top_k),
    "top_p": lambda s, v: _plain("top_p", apply_top_p, p=s.top_p),
    "min_p": lambda s, v: _plain("min_p", apply_min_p, m=s.min_p),
    "typical_p": lambda s, v: _plain("typical_p", apply_typical_p, mass=s.typical_p),
    "top_n_sigma": lambda s, v: _plain("top_n_sigma", apply_top_n_sigma, n=s.top_n_sigma),
    "epsilon_cutoff": lambda s, v: _plain("epsilon_cutoff", apply_epsilon_cutoff, epsilon=s.epsilon_cutoff),
    "eta_cutoff": lambda s, v: _plain("eta_cutoff", apply_eta_cutoff, epsilon=s.eta_cutoff),
    "xtc": lambda s, v: ("xtc", lambda ops, x, u, given: apply_xtc(ops, x, u[1], s.xtc_threshold,
                                                                    s.xtc_probability)),
    "dry": lambda s, v: ("dry", lambda ops, x, u, given: apply_dry(ops, x, given.dry)),
    "think_budget": lambda s, v: ("think_budget", lambda ops, x, u, given: apply_think_budget(ops, x, given.think)),
    # μ is the step's third number; a caller that hands only two (no run state) gets the starting μ, 2τ
    "mirostat": lambda s, v: ("mirostat", lambda ops, x, u, given: apply_mirostat(
        ops, x, u[2] if u.shape[0] > 2 else ops.f32(2 * s.mirostat_tau))),
    "grammar": lambda s, v: ("grammar", lambda ops, x, u, given: apply_grammar(ops, x, given.mask)),
}
