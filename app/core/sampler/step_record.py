"""A sampler step's record, made from what the pipeline computed: on the device with the draw (`make_record`, a
`Recorded`), or on the host from the stages' rows the device hands over (`cut_rows`, then `host_record`: MLX on a
CPU). Each stage's input and output over the top-N raw candidates, what it kept, where it cut, the drawn token's
numbers, and the probability a constraint's grammar removed. Runs no stage and draws nothing (`sampling.py` does).
"""

from __future__ import annotations

import math

import numpy as np

from app.core.sampler.pipeline import Cut, Dist
from app.core.sampler.step_output import CutRows, Recorded, StepScalars
from backends.ops import NUMPY, Array, ArrayOps

NAN = float("nan")
RECORD_K = 256  # raw logits kept per step for re-sampling without the model


def cut_rows(ops: ArrayOps, raw: Array, cuts: list[Cut], lse: Array, tok: Array) -> CutRows:
    """What the host's record needs of the pipeline, which it then does not run again. A handful of arrays the
    device has computed anyway, read in one transfer each."""
    cut_at = ops.stack([*(NAN if c.line is None else c.line for c in cuts), *(_own(c) for c in cuts), lse])
    orders = tuple(ops.stack(list(c.order)) for c in cuts if c.order is not None)
    return CutRows(tok, cut_at, ops.stack([raw, *(c.x for c in cuts)]), orders)


def _own(c: Cut) -> Array | float:
    """A stage's threshold in its own terms (top-p's mass, another's `prob`); NaN for none."""
    return c.mass if c.mass is not None else NAN if c.prob is None else c.prob


def host_record(host: CutRows, names: tuple[str, ...], top_n: int) -> Recorded:
    """`_device_step`'s record on numpy, from the `CutRows` of a step with the stages `names`."""
    values, orders, x = host.cut_at.tolist(), iter(host.orders), host.rows  # floats: cheaper to test than numpy's
    stages = len(names)
    lines, owns = values[:stages], values[stages:-1]
    cuts = [Cut(x[i + 1], line=None if math.isnan(line) else np.float32(line),
                prob=None if math.isnan(own) else own, order=tuple(next(orders)) if name == "top_p" else None)
            for i, (name, line, own) in enumerate(zip(names, lines, owns, strict=True))]
    at = names.index("grammar") if "grammar" in names else None
    with np.errstate(all="ignore"):
        return make_record(NUMPY, x[0], cuts, HostRows(NUMPY, x), host.token.astype(np.int64), top_n, at)


class HostRows(Dist):
    """The record's rows on numpy: `Dist`, with the entropies taken row by row (the raw row's, where nothing is cut,
    then reads its x - m itself rather than a copy): the same numbers."""

    def entropy(self, rows: slice | None = None) -> np.ndarray:
        picked = range(self.x.shape[0])[rows or slice(None)]
        return np.array([self.log_z[i] - np.add.reduce(self.e[i] * NUMPY.where(self.e[i] > 0, self.xm[i], 0.0))
                         / self.z[i] for i in picked])


def stage_rows(ops: ArrayOps, raw: Array, cuts: list[Cut]) -> Dist:
    """The distributions the record reads, as rows of one (S+1, V) array: row s is stage s's input, the last
    row the final distribution (which the token is drawn from)."""
    return Dist(ops, ops.stack([raw, *(c.x for c in cuts)]))


def make_record(ops: ArrayOps, raw: Array, cuts: list[Cut], rows: Dist, tok: Array, top_n: int,
                grammar_at: int | None = None) -> Recorded:
    """What the trace keeps of one step: the drawn token's numbers, the top-K raw logits and, over the top-N raw
    candidates, each stage's input and output probabilities, what it kept and its threshold; `grammar_at` the grammar
    stage's place among the cuts, whose removed probability is one minus its output's mass in its input."""
    vocab, last = raw.shape[0], len(cuts)
    top_vals, top_ids = ops.topk(raw, min(RECORD_K, vocab))
    ids = top_ids[:top_n]
    finite = ops.isfinite(rows.x[1:])  # (S, V): what each stage left
    cumulative = [_cumulative(ops, c, rows.x[i], ids) for i, c in enumerate(cuts) if c.order is not None]
    raw_tok = ops.take(raw, tok)
    rank = ops.sum(raw > raw_tok) + ops.take(ops.count_cumsum(raw == raw_tok), tok)[0] - 1  # (ties: lower ids first)
    logp = rows.xm[:, tok][:, 0] - rows.log_z  # (S+1,) the token's log-probability in each row
    entropy, lse = rows.entropy(slice(None, None, last)), rows.lse  # rows 0 and S (raw, final) only: a view
    scalars = StepScalars(token=ops.f32(tok[0]), prob=ops.exp(logp[last]), raw_logprob=logp[0], rank=ops.f32(rank),
                          entropy=entropy[0], final_entropy=entropy[1], raw_lse=lse[0], final_lse=lse[last],
                          removed=NAN if grammar_at is None else 1 - ops.exp(lse[grammar_at + 1] - lse[grammar_at]))
    return Recorded(
        token=tok, scalars=ops.stack(list(scalars)), kept_counts=ops.sum(finite, axis=-1), top_ids=top_ids,
        top_logits=top_vals, probs=rows.at(ids), kept=finite[:, ids],
        thresholds=ops.stack([_threshold(ops, c, rows, i) for i, c in enumerate(cuts)]),
        top_p_cumulative=cumulative[0] if cumulative else None,
    )


def _threshold(ops: ArrayOps, cut: Cut, rows: Dist, i: int) -> Array | float:
    """Where stage i cut, in the probability space of its input (row i of `rows`); NaN for a stage that cuts
    nothing. A logit line maps through the input's own softmax: top-k's is then exactly its k-th token's
    probability, min-p's min_p × the top probability."""
    if cut.mass is not None:
        return cut.mass
    if cut.prob is not None:
        return cut.prob
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
