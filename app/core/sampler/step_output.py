"""What one sampler step hands the host, by what the host asked for: a token alone (`Drawn`), the record
(`Recorded`), or the pipeline's own arrays, from which the host makes the record on numpy (`CutRows`). The type is
the step's mode (`sampling.py` runs the step). A compiled step returns flat arrays (`arrays`, `from_arrays`): the
executors' compilers take no records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from app.core.record.record import Sample
from backends.ops import Array


class Drawn(NamedTuple):
    """A step that only draws: its token, and whether there was anything to draw from."""

    token: Array  # (1,) int
    lse: Array  # (1,) the final distribution's logsumexp: not finite when no logit was

    @property
    def final_lse(self) -> float:
        return float(self.lse[0])

    def arrays(self) -> tuple[Array, ...]:
        return tuple(self)

    @classmethod
    def from_arrays(cls, arrays: Sequence[Array]) -> Drawn:
        return cls(*arrays)


class StepScalars(NamedTuple):
    """The drawn token's numbers: stacked in this order into one float32 vector on the device (one transfer),
    read back by name on the host."""

    token: Array
    prob: Array  # in the final distribution
    raw_logprob: Array
    rank: Array  # 0-based, in the raw distribution
    entropy: Array  # of the raw distribution (nats)
    final_entropy: Array
    raw_lse: Array
    final_lse: Array  # not finite: no finite logit to draw from
    removed: Array  # the probability a constraint's grammar stage removed from its input (NaN: none ran)


_FINAL_LSE = StepScalars._fields.index("final_lse")
_REMOVED = StepScalars._fields.index("removed")


class Recorded(NamedTuple):
    """A step that records: its token and what a `Sample` keeps, over the top-N raw candidates and the S stages."""

    token: Array  # (1,) int
    scalars: Array  # (9,) float32: a `StepScalars`, stacked
    kept_counts: Array  # (S,) tokens of the whole vocabulary each stage kept
    top_ids: Array  # (K,) the top-K raw logits' ids, descending (K = RECORD_K or the vocabulary)
    top_logits: Array  # (K,)
    probs: Array  # (S+1, N) row 0 the raw distribution, row s+1 after stage s
    kept: Array  # (S, N) bool
    thresholds: Array  # (S,) where each stage cut, in its input's probability space (NaN: nowhere)
    top_p_cumulative: Array | None  # (N,) top-p's running mass at each candidate; None: top-p did not run

    @property
    def final_lse(self) -> float:
        return float(self.scalars[_FINAL_LSE])

    @property
    def removed(self) -> float | None:
        """The probability the grammar stage removed (None: no grammar stage ran)."""
        v = float(self.scalars[_REMOVED])
        return None if v != v else v

    def arrays(self) -> tuple[Array, ...]:
        return tuple(self) if self.top_p_cumulative is not None else tuple(self)[:-1]

    @classmethod
    def from_arrays(cls, arrays: Sequence[Array]) -> Recorded:
        return cls(*arrays) if len(arrays) == len(cls._fields) else cls(*arrays, None)

    def sample(self, stage_names: tuple[str, ...], u: float) -> Sample:
        """The trace's record of this step (on the host)."""
        sc = StepScalars._make(self.scalars.tolist())  # Python floats: float32 values, exactly
        return Sample.record(
            token=int(self.token[0]), rank=int(sc.rank), u=u, stage_names=stage_names, top_ids=self.top_ids,
            top_logits=self.top_logits, probs=self.probs, kept=self.kept, thresholds=self.thresholds,
            kept_counts=self.kept_counts, top_p_cumulative=self.top_p_cumulative, prob=sc.prob,
            raw_logprob=sc.raw_logprob, entropy=max(0.0, sc.entropy), final_entropy=max(0.0, sc.final_entropy),
            raw_lse=sc.raw_lse,
        )


class CutRows(NamedTuple):
    """A step whose record the host makes (`_host_record`): its token and what the pipeline computed anyway."""

    token: Array  # (1,) int
    cut_at: Array  # (2S+1,) each stage's logit line, then its threshold in its own terms (NaN: none), the final lse
    rows: Array  # (S+1, V) the sanitized logits and each stage's output
    orders: tuple[Array, ...]  # top-p's sorted input and running mass (2, V), where it ran

    @property
    def final_lse(self) -> float:
        return float(self.cut_at[-1])

    def arrays(self) -> tuple[Array, ...]:
        return (self.token, self.cut_at, self.rows, *self.orders)

    @classmethod
    def from_arrays(cls, arrays: Sequence[Array]) -> CutRows:
        return cls(arrays[0], arrays[1], arrays[2], tuple(arrays[3:]))


StepOutput = Drawn | Recorded | CutRows
Mode = type[Drawn] | type[Recorded] | type[CutRows]
