"""The statistics the server probe (`probe.py`) judges by, on a server's own reported log-probabilities: a kept-set
test (how many draws show that a filter was applied, and what draws outside the set say), a sequential likelihood
ratio between two temperatures, the temperature draws suggest, and the chance that an unseeded run repeats another.
Each verdict's false-alarm rate is at most `alpha` by construction: an exact binomial tail, or Ville's inequality for
a likelihood ratio watched draw by draw. It holds the probe's default bounds too (alpha, budget, deadline). Pure
math on lists of floats: no I/O, no numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

VOCAB_BOUND = 2**18  # a vocabulary at most this large (only to guess how often a temperature draws a listed token)
# The probe's bounds, here (below everything, importing nothing) so that the command line reads them cheaply.
ALPHA = 1e-6  # the false-alarm bound of every statistical verdict
BUDGET = 150  # requests at most (a local tiny model answers them in seconds)
MIN_BUDGET = 20  # fewer leaves most checks without a request
DEADLINE_S = 60.0  # one request at most, from start to last byte


def probs(logprobs: Sequence[float]) -> list[float]:
    return [math.exp(lp) for lp in logprobs]


def conditional(logprobs: Sequence[float], t: float) -> list[float]:
    """The distribution over the listed tokens at temperature `t`, given that one of them is drawn (the unlisted
    rest does not enter: exact whatever the vocabulary holds)."""
    z = [lp / t for lp in logprobs]
    top = max(z)
    e = [math.exp(x - top) for x in z]
    total = sum(e)
    return [x / total for x in e]


def kl(q: Sequence[float], p: Sequence[float]) -> float:
    """D(q || p) in nats."""
    return sum(a * math.log(a / b) for a, b in zip(q, p, strict=True) if a > 0)


def draws_needed(p_kept: float, alpha: float) -> int | None:
    """The draws, all inside a kept set, that a server ignoring the filter (drawing inside with chance `p_kept`)
    shows with chance at most `alpha`; None when no number of draws can (the set holds everything)."""
    if p_kept >= 1.0:
        return None
    if p_kept <= 0.0:
        return 1
    return max(1, math.ceil(math.log(alpha) / math.log(p_kept)))


def binomial_cdf(k: int, n: int, q: float) -> float:
    """P(X <= k) for X ~ Binomial(n, q)."""
    return min(1.0, sum(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(k + 1)))


def kept_verdict(inside: int, outside: int, p_kept: float, alpha: float) -> str:
    """A filter's verdict from draws inside and outside the set it keeps: "honoured" when no draw left the set and
    a server ignoring it would have kept them all inside with chance <= alpha; "ignored" when some left it (a
    filter applied keeps none outside) as often as ignoring it makes likely; "differs" when fewer left it than
    ignoring it makes plausible (the binomial lower tail <= alpha: applied, with another rule); else
    "inconclusive"."""
    n = inside + outside
    if outside == 0:
        need = draws_needed(p_kept, alpha)
        return "honoured" if need is not None and n >= need else "inconclusive"
    return "differs" if binomial_cdf(outside, n, 1.0 - p_kept) <= alpha else "ignored"


class RatioTest:
    """Draw by draw, the log-likelihood ratio of hypothesis `a` over `b` (each a distribution over the listed
    tokens). Under `b` the ratio is a martingale of mean 1, so it ever reaches 1/alpha with chance <= alpha
    (Ville's inequality); the same holds the other way. `decided` names the hypothesis once either bound is hit."""

    def __init__(self, a: Sequence[float], b: Sequence[float], alpha: float) -> None:
        self.a, self.b, self.bound = list(a), list(b), math.log(1.0 / alpha)
        self.log_ratio = 0.0
        self.counts = [0] * len(self.a)

    def add(self, index: int) -> None:
        self.counts[index] += 1
        self.log_ratio += math.log(self.a[index] / self.b[index])

    @property
    def decided(self) -> str | None:
        if self.log_ratio >= self.bound:
            return "a"
        if self.log_ratio <= -self.bound:
            return "b"
        return None


def estimate_temperature(counts: Sequence[int], logprobs: Sequence[float]) -> float | None:
    """The temperature whose conditional distribution makes `counts` likeliest (a grid from 0.05 to 20); None
    without draws."""
    if not sum(counts):
        return None
    grid = [0.05 * 1.05**i for i in range(122)]
    return max(grid, key=lambda t: sum(c * math.log(max(q, 1e-300))
                                       for c, q in zip(counts, conditional(logprobs, t), strict=True)))


def listed_share(logprobs: Sequence[float], t: float) -> float:
    """A lower bound on how often temperature `t` draws one of the listed tokens: for t <= 1 their share at
    temperature 1 (cooling only moves mass to the likeliest); above 1, with the unlisted rest spread as flat as
    a VOCAB_BOUND vocabulary allows (Cauchy-Schwarz)."""
    p = probs(logprobs)
    rest = max(0.0, 1.0 - sum(p))
    if t <= 1.0:
        return sum(p)
    listed = sum(x ** (1 / t) for x in p)
    return listed / (listed + rest ** (1 / t) * VOCAB_BOUND ** (1 - 1 / t))


def temperature_draws(logprobs: Sequence[float], t: float, alpha: float) -> float:
    """The draws a ratio test between temperature `t` and 1 is expected to need (either way; infinite when the
    listed tokens cannot tell the two apart)."""
    q, p = conditional(logprobs, t), conditional(logprobs, 1.0)
    rate = min(kl(q, p) * listed_share(logprobs, t), kl(p, q) * sum(probs(logprobs)))
    return math.log(1.0 / alpha) / rate if rate > 1e-9 else math.inf


def chance_again(drawn: Sequence[float]) -> float:
    """The chance that a second run, drawn independently of the first (its seed ignored), draws the first's tokens
    again: the product of their probabilities (`drawn`: each step's log-probability, at temperature 1). Calling two
    equal runs "seeded" when this is <= alpha is wrong with chance <= alpha: sum over runs s with P(s) <= alpha
    of P(s)^2."""
    return math.exp(sum(drawn))
