"""A step's record with a token the sampler did not draw: `forced` (a fork, a forced token, a speculative round's
token: the same distribution and stages) and `taken` (a search's token, a beam's: the model's raw distribution, no
stage ran). Their probabilities are read from the record (a log-softmax of its raw logits), never recomputed from
a model; the record type itself stays plain data (`record.Sample`).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from app.core.record.record import Sample


def forced(s: Sample, token: int) -> Sample:
    """`s` with `token` taken instead of the drawn one: the same distribution and stages, the token's rank,
    probability and log-probability read from the record (NaN where it holds none)."""
    i = _candidate(s, token)
    if i is None:
        raise ValueError(f"token {token} is not among this step's recorded candidates")
    row = s.probs[-1]
    prob = float(row[i]) if i < row.size and (not s.is_partial or s.reported == "final") else math.nan
    raw = math.nan if s.is_partial else float(s.top_logits[i]) - s.raw_lse
    rank = i if not s.is_partial or s.reported == "raw" else None
    return replace(s.with_values(prob=prob, raw_logprob=raw), token=int(token), rank=rank)


def taken(s: Sample, token: int) -> Sample:
    """`s`'s raw distribution with `token` taken by a search (a beam's) rather than drawn: no sampler stage ran and
    no random number was drawn (u None), so the token's probability is the model's (`Sample.is_taken`)."""
    i = None if s.is_partial else _candidate(s, token)
    if i is None:
        raise ValueError(f"token {token} is not among this step's recorded raw candidates")
    n = s.top_n
    logprob = float(s.top_logits[i]) - s.raw_lse
    return Sample.record(token=token, rank=i, u=None, stage_names=(), top_ids=s.top_ids, top_logits=s.top_logits,
                         probs=s.probs[:1], kept=np.zeros((0, n), dtype=bool), thresholds=np.zeros(0),
                         kept_counts=np.zeros(0), top_p_cumulative=None, prob=math.exp(min(logprob, 0.0)),
                         raw_logprob=logprob, entropy=s.entropy, final_entropy=s.entropy, raw_lse=s.raw_lse)


def _candidate(s: Sample, token: int) -> int | None:
    """Where `token` is among the record's candidates, or None."""
    at = np.flatnonzero(s.top_ids == token)
    return int(at[0]) if at.size else None
