"""Figures per step and per span, read from the record (the views draw them, never compute them): DeepConf's token
confidence (the negative mean of the top-k log-probabilities, k recorded with it; high is confident), the varentropy
(the variance of the surprise, beside the entropy) and each span's means. Both come from the model's distribution
(the raw one) where the record holds it, else from what a server reported. Varentropy is over the record's top-K
candidates (256 raw logits): exact where they hold the whole vocabulary, else a slight under-estimate (the tail's
terms, each ≥ 0, are left out).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.core.record.record import Sample, StepTrace
from app.core.record.spans import spans

CONFIDENCE_K = 20  # DeepConf's k (its vLLM example asks for 20 log-probabilities a token)


def _logprobs(s: Sample) -> np.ndarray | None:
    """The record's top log-probabilities, descending: the raw logits' (full record), else what was reported."""
    if not s.is_partial:
        return np.asarray(s.top_logits, dtype=np.float64) - float(s.raw_lse or 0.0)
    with np.errstate(divide="ignore"):
        lp = np.log(np.asarray(s.probs[0], dtype=np.float64))
    lp = lp[np.isfinite(lp)]
    return np.sort(lp)[::-1] if lp.size else None


def confidence(s: Sample, k: int = CONFIDENCE_K) -> tuple[float, int] | None:
    """DeepConf's token confidence -1/k Σ log p over the top k candidates, and the k used (fewer where fewer were
    recorded or reported); None where the record holds none."""
    lp = _logprobs(s)
    if lp is None or lp.size == 0:
        return None
    top = lp[: min(k, lp.size)]
    return float(-top.mean()), int(top.size)


def varentropy(s: Sample) -> float | None:
    """Σ p (-log p - H)² over the recorded candidates, H the record's entropy (computed over them when a server
    reported no entropy); None where nothing was recorded."""
    lp = _logprobs(s)
    if lp is None or lp.size == 0:
        return None
    lp = lp[np.isfinite(lp)]  # (a candidate of probability 0, banned or cut to -inf, adds nothing)
    p = np.exp(lp)
    h = s.entropy if s.entropy is not None else float(-(p * lp).sum())
    return float((p * (-lp - h) ** 2).sum())


@dataclass(frozen=True)
class SpanStats:
    """One span's means over its steps (None where no step recorded the figure) and the k of its confidence."""

    kind: str
    start: int
    end: int
    entropy: float | None
    varentropy: float | None
    confidence: float | None
    k: int


def span_stats(steps: Sequence[StepTrace], k: int = CONFIDENCE_K) -> list[SpanStats]:
    """Each span's figures (the steps' `span` labels grouped), in order."""
    conf, var = step_series(steps, k)
    entropy = np.array([np.nan if st.sample.entropy is None else st.sample.entropy for st in steps])
    ks = [c[1] if (c := confidence(st.sample, k)) else 0 for st in steps]
    return span_means([st.span for st in steps], entropy, var, conf, ks)


def span_means(labels: Sequence[str], entropy: np.ndarray, var: np.ndarray, conf: np.ndarray,
               ks: Sequence[int]) -> list[SpanStats]:
    """Each span's means of per-step figures already read from the record (`step_series`, the entropies; NaN: not
    recorded), and the largest k its confidences used: what a view that keeps the figures as steps stream asks."""
    return [SpanStats(sp.kind, sp.start, sp.end, _nanmean(entropy[sp.start: sp.end]), _nanmean(var[sp.start: sp.end]),
                      _nanmean(conf[sp.start: sp.end]), max(ks[sp.start: sp.end], default=0))
            for sp in spans(labels)]


def _nanmean(v: np.ndarray) -> float | None:
    known = v[np.isfinite(v)]
    return float(known.mean()) if known.size else None


def step_series(steps: Sequence[StepTrace], k: int = CONFIDENCE_K) -> tuple[np.ndarray, np.ndarray]:
    """(confidence, varentropy) per step, float64, NaN where a step records neither: what the timeline draws."""
    conf = np.full(len(steps), np.nan)
    var = np.full(len(steps), np.nan)
    for i, st in enumerate(steps):
        if (c := confidence(st.sample, k)) is not None:
            conf[i] = c[0]
        if (v := varentropy(st.sample)) is not None:
            var[i] = v
    return conf, var
