"""One step's record: the `Sample` the sampler pipeline makes of a drawn token (`sampler.sampling`) and the
`StepTrace` around it (the text and time of the step); a `RunTrace` holds them (`trace.py`), a trace file's line
is `trace_file.py`'s. Plain data: every stage exactly as it ran, so views draw it without redoing any maths; what a
backend could not observe (a server reports only its top log-probabilities) is absent (None), never invented. No
stage runs here: a record with another token is `sampler.forcing`'s, a re-sample `sampler.step_view`'s.
Knows nothing of models, runs, files or Qt.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from app.core.record.live_lens import LiveLens
    from app.core.record.steer_record import SteerStep

Reported = Literal["raw", "final"]  # which distribution a partial record's probabilities are
SCALARS = ("prob", "raw_logprob", "entropy", "final_entropy", "raw_lse")


class _Scalar:
    """One of the record's SCALARS, read from its packed buffer: None where it was not observed (NaN there)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.index = SCALARS.index(name)

    def __get__(self, obj: Sample | None, owner: type | None = None) -> float | None:
        if obj is None:
            return self  # type: ignore[return-value]
        v = float(obj.values[self.index])
        return None if math.isnan(v) else v


@dataclass(frozen=True, slots=True)
class GrammarStep:
    """What a constraint's grammar did at a step (`sampler.constraint` makes it): how many tokens of the vocabulary it
    allowed, the share of the probability it removed, the model's favourite (its raw top token) and whether the
    grammar allowed it, the most probable token it allowed and the log-probability between them. `place` is where it
    ran: "first" (its stage before every other) or "on_reject" (llama.cpp's way: the chain ran unconstrained; only
    when the grammar refused the drawn token, `rejected`, was the step drawn again with the grammar first). `legal_top`
    says which of the step's top-K raw candidates (`Sample.top_ids`) were allowed, so that a re-sample can apply it."""

    place: str
    legal: int  # tokens of the vocabulary it allowed
    removed: float | None  # of its input's probability, on the tokens it cut (None: its mask was not applied)
    favourite: int  # the model's most probable token
    best: int  # the most probable token it allowed (the favourite when allowed)
    margin: float  # raw log-probability of the favourite minus the best allowed's (0: the favourite was allowed)
    legal_top: np.ndarray  # (K,) bool, over Sample.top_ids
    rejected: int | None = None  # on_reject: the token the chain drew that the grammar refused

    def __post_init__(self) -> None:
        self.legal_top.flags.writeable = False

    @property
    def forced(self) -> bool:
        """Exactly one token was allowed: the grammar chose it, not the sampler."""
        return self.legal == 1

    @property
    def favourite_kept(self) -> bool:
        return self.best == self.favourite

    def to_dict(self) -> dict[str, Any]:
        """The step's grammar as a trace line holds it (`legal_top`: its bits packed, as hex)."""
        return {"place": self.place, "legal": self.legal, "removed": self.removed, "favourite": self.favourite,
                "best": self.best, "margin": self.margin, "rejected": self.rejected,
                "legal_top": np.packbits(self.legal_top).tobytes().hex()}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GrammarStep):
            return NotImplemented
        return self.to_dict() == other.to_dict()


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Sample:
    """One step's record. Over the top-N candidates by raw probability (N = kept.shape[1]) and the S stages that
    ran, in order (penalties when active, temperature or greedy, top_k, top_p, min_p):

        probs            (S+1, N) float32  row 0 the raw distribution, row s+1 after stage s (its input: row s)
        kept             (S, N) bool       stage s kept candidate i
        thresholds       (S,) float32      where stage s cut, in its input's probability space: top-k the k-th
                                           kept token's probability, top-p the mass p, min-p min_p × the top
                                           probability; NaN for a stage without one (temperature, penalties)
        kept_counts      (S,)              tokens of the whole vocabulary each stage kept
        top_p_cumulative (N,) or None      the running mass top-p computed at each candidate, in its own order
        top_ids, top_logits (K,)           the top-K raw logits (int32 ids), for re-sampling without the model

    The float arrays and the scalars share one packed float32 buffer (`values`), read through the properties:
    a step costs three arrays rather than ten. A partial record (`partial`) has no stages; its one row of
    `probs` holds the probabilities a server reported, of the distribution `reported` names.
    """

    token: int
    rank: int | None  # 0-based, in the raw distribution
    u: float | None  # the uniform number the token was drawn with (None: drawn elsewhere, or taken by a search)
    stage_names: tuple[str, ...]
    top_ids: np.ndarray  # (K,) int32, by raw probability descending (partial: the reported ids)
    kept: np.ndarray  # (S, N) bool
    values: np.ndarray  # float32: SCALARS, top_logits, probs, thresholds, kept_counts, top_p_cumulative
    reported: Reported | None = None  # None: a full record
    grammar: GrammarStep | None = None  # what a constraint's grammar did here (None: no constraint ran)
    steer: SteerStep | None = None  # what steering did here (`steer_record`; None: not steered)
    lens: LiveLens | None = None  # each layer's logits for the top candidates (`live_lens`; None: the lens was off)

    def __post_init__(self) -> None:
        for a in (self.top_ids, self.kept, self.values):  # a record is read by several threads: never written
            a.flags.writeable = False

    @classmethod
    def record(cls, *, token: int, rank: int, u: float | None, stage_names: Sequence[str], top_ids: np.ndarray,
               top_logits: np.ndarray, probs: np.ndarray, kept: np.ndarray, thresholds: np.ndarray,
               kept_counts: np.ndarray, top_p_cumulative: np.ndarray | None, prob: float, raw_logprob: float,
               entropy: float, final_entropy: float, raw_lse: float) -> Sample:
        """A full record, from the pipeline's arrays (copied into the compact layout)."""
        s, n = len(stage_names), np.shape(kept)[-1]
        if np.shape(probs) != (s + 1, n) or np.shape(thresholds) != (s,) or np.shape(kept_counts) != (s,):
            raise ValueError(f"record shapes disagree: {s} stages, probs {np.shape(probs)}, kept {np.shape(kept)}")
        if (top_p_cumulative is not None) != ("top_p" in stage_names):
            raise ValueError("top_p_cumulative is recorded exactly when top-p ran")
        parts = [(prob, raw_logprob, entropy, final_entropy, raw_lse), top_logits, probs, thresholds, kept_counts]
        if top_p_cumulative is not None:
            parts.append(top_p_cumulative)
        values = np.concatenate([np.asarray(p, dtype=np.float32).ravel() for p in parts])
        return cls(int(token), int(rank), None if u is None else float(u), tuple(stage_names),
                   np.array(top_ids, dtype=np.int32), np.array(kept, dtype=bool).reshape(s, n), values)

    @classmethod
    def partial(cls, token: int, logprob: float | None, top_ids: Sequence[int], top_logprobs: Sequence[float],
                reported: Reported = "final") -> Sample:
        """What an OpenAI-compatible server reports: the drawn token's log-probability and the top-k
        log-probabilities, of the `reported` distribution (after its own processing: stages not observed)."""
        ids = np.array(top_ids, dtype=np.int32)
        lp = math.nan if logprob is None else logprob
        with np.errstate(over="ignore"):  # whatever a server sent is kept: a log-probability above ~709 as infinity
            probs = np.exp(np.asarray(top_logprobs, dtype=np.float64))
            drawn = float(np.exp(np.float64(lp)))
        prob, raw_logprob = (drawn, math.nan) if reported == "final" else (math.nan, lp)
        where = np.flatnonzero(ids == token)
        rank = int(where[0]) if reported == "raw" and where.size else None  # a rank is of the raw distribution
        return cls._reported(token, rank, ids, probs, prob, raw_logprob, reported)

    @classmethod
    def _reported(cls, token: int, rank: int | None, top_ids: np.ndarray, probs: np.ndarray, prob: float,
                      raw_logprob: float, reported: Reported) -> Sample:
        """A partial record from its parts (NaN: not reported)."""
        if reported not in ("raw", "final"):
            raise ValueError(f"reported must be 'raw' or 'final', got {reported!r}")
        ids = np.array(top_ids, dtype=np.int32).reshape(-1)
        if np.shape(probs) not in ((len(ids),), (1, len(ids))):
            raise ValueError(f"{np.size(probs)} probabilities for {len(ids)} reported tokens")
        head = [prob, raw_logprob, math.nan, math.nan, math.nan]
        with np.errstate(over="ignore"):  # a number past float32 is kept as infinity (as the trace reader reads it)
            values = np.concatenate([np.array(head, dtype=np.float32), np.asarray(probs, dtype=np.float32).ravel()])
        return cls(int(token), None if rank is None else int(rank), None, (), ids,
                   np.zeros((0, len(ids)), dtype=bool), values, reported)

    # the packed layout ------------------------------------------------------------------------------------
    def _span(self, part: str) -> slice:
        s, n = self.kept.shape
        k = 0 if self.is_partial else len(self.top_ids)
        sizes = {"scalars": len(SCALARS), "top_logits": k, "probs": (s + 1) * n, "thresholds": s, "kept_counts": s,
                 "top_p_cumulative": n if "top_p" in self.stage_names else 0}
        start = 0
        for name, size in sizes.items():
            if name == part:
                return slice(start, start + size)
            start += size
        raise KeyError(part)

    @property
    def is_partial(self) -> bool:
        """Only what a server reported: no stages, no raw logits, no random number."""
        return self.reported is not None

    @property
    def top_n(self) -> int:
        return self.kept.shape[1]

    @property
    def probs(self) -> np.ndarray:  # (S+1, N)
        return self.values[self._span("probs")].reshape(len(self.stage_names) + 1, self.top_n)

    @property
    def raw_probs(self) -> np.ndarray | None:  # (N,): row 0
        return None if self.reported == "final" else self.probs[0]

    @property
    def final_probs(self) -> np.ndarray | None:  # (N,): the distribution the token was drawn from, the last row
        return None if self.reported == "raw" else self.probs[-1]

    @property
    def thresholds(self) -> np.ndarray:  # (S,)
        return self.values[self._span("thresholds")]

    @property
    def kept_counts(self) -> np.ndarray:  # (S,)
        return self.values[self._span("kept_counts")].astype(np.int64)

    @property
    def top_p_cumulative(self) -> np.ndarray | None:  # (N,)
        return self.values[self._span("top_p_cumulative")] if "top_p" in self.stage_names else None

    @property
    def top_logits(self) -> np.ndarray | None:  # (K,)
        return None if self.is_partial else self.values[self._span("top_logits")]

    prob = _Scalar()  # of the drawn token, in the final distribution
    raw_logprob = _Scalar()
    entropy = _Scalar()  # of the raw distribution (nats)
    final_entropy = _Scalar()
    raw_lse = _Scalar()  # logsumexp of all raw logits

    @property
    def is_taken(self) -> bool:
        """A token a search took (`sampler.forcing.taken`), not one a sampler drew: nothing to re-sample."""
        return not self.is_partial and self.u is None and not self.stage_names

    def with_values(self, raw_probs: np.ndarray | None = None, **scalars: float) -> Sample:
        """This record with other numbers, as the caller read them (`sampler.forcing`, a re-sample): any of `SCALARS`
        by name (NaN: not known) and row 0 of `probs` (`raw_probs`); the rest as it was."""
        values = self.values.copy()
        for name, v in scalars.items():
            values[SCALARS.index(name)] = v
        if raw_probs is not None:
            values[self._span("probs")][: self.top_n] = raw_probs
        return replace(self, values=values)

    def stage_index(self, name: str) -> int | None:
        return self.stage_names.index(name) if name in self.stage_names else None

    def cut_by(self, i: int) -> str | None:
        """The first stage that cut top candidate i, or None if it was kept (or no stage was observed)."""
        for name, kept in zip(self.stage_names, self.kept[:, i], strict=True):
            if not kept:
                return name
        return None

    def __repr__(self) -> str:
        kind = f"reported {self.reported}" if self.is_partial else f"u={self.u}"
        return (f"Sample(token={self.token}, prob={self.prob}, rank={self.rank}, stages={self.stage_names}, "
                f"top_n={self.top_n}, {kind})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sample):
            return NotImplemented
        return ((self.token, self.rank, self.u, self.stage_names, self.reported, self.grammar, self.steer, self.lens)
                == (other.token, other.rank, other.u, other.stage_names, other.reported, other.grammar, other.steer,
                    other.lens)
                and np.array_equal(self.top_ids, other.top_ids) and np.array_equal(self.kept, other.kept)
                and np.array_equal(self.values, other.values, equal_nan=True))


@dataclass(frozen=True, slots=True)
class StepTrace:
    step: int
    sample: Sample
    text: str  # the visible text this token added (after stop-string trimming)
    top_texts: tuple[str, ...]  # display text of each top-N candidate
    seconds: float  # wall time of this step (forward + sampling)
    span: str = ""  # "think", "answer" or "tool" (`spans.SpanTracker`); "" for a model without reasoning markers
    forced: str = ""  # why the token was taken rather than drawn: "budget" (the think budget closed the span)

    @property
    def token_id(self) -> int:
        return self.sample.token

    @property
    def prob(self) -> float | None:
        return self.sample.prob

    @property
    def raw_prob(self) -> float | None:
        lp = self.sample.raw_logprob
        return None if lp is None else math.exp(min(lp, 0.0))  # (a damaged file's log-probability above 0: 1)

    @property
    def drawn_prob(self) -> tuple[float | None, Literal["sampled", "model"] | None]:
        """The best known probability of the drawn token, and which one it is: in the distribution it was drawn
        from ("sampled") where that was recorded, else under the model ("model": a server that reports the model's
        log-probabilities samples by itself, unobserved); (None, None) where neither was reported."""
        if (p := self.prob) is not None:
            return p, "sampled"
        if (p := self.raw_prob) is not None:
            return p, "model"
        return None, None

    @property
    def top_n(self) -> int:
        return len(self.top_texts)

    def raw_top_probs(self, n: int | None = None) -> list[float]:
        """The model's probabilities of the top candidates (empty when a server reported only its final ones)."""
        raw = self.sample.raw_probs
        return [] if raw is None else raw[: self.top_n if n is None else n].tolist()

    def cut_by(self, i: int) -> str | None:
        return self.sample.cut_by(i)

    def to_json(self) -> dict[str, Any]:
        """The step as the command line's --json prints it."""
        s = self.sample
        raw, final = s.raw_probs, s.final_probs
        top = [{"token_id": model_id(s.top_ids[i]), "text": text, "raw_prob": _num(raw, i), "prob": _num(final, i),
                "cut_by": self.cut_by(i)} for i, text in enumerate(self.top_texts)]
        prob = s.prob
        return {
            "step": self.step, "token_id": model_id(s.token), "text": self.text, "prob": prob,
            "logprob": None if prob is None else math.log(prob) if prob > 0 else float("-inf"),
            "raw_prob": self.raw_prob, "raw_logprob": s.raw_logprob, "rank": s.rank, "entropy": s.entropy,
            "final_entropy": s.final_entropy, "stages": list(s.stage_names),
            "kept_counts": s.kept_counts.tolist(), "thresholds": json_floats(s.thresholds, none_for_nan=True),
            "reported": s.reported, "u": s.u, "seconds": self.seconds, "top": top,
            "span": self.span or None, "forced": self.forced or None,
            "grammar": None if s.grammar is None else {
                **{k: v for k, v in s.grammar.to_dict().items() if k != "legal_top"},
                "favourite_kept": s.grammar.favourite_kept, "forced": s.grammar.forced},
            **({"steering": s.steer.to_json()} if s.steer is not None else {}),
            **({"lens": s.lens.to_json()} if s.lens is not None else {}),
        }


def model_id(token: Any) -> int | None:
    """A token's id as the user sees it: None where the model's id is not known (a server that names tokens only by
    their text, for a model whose tokenizer is not here: a negative id in the record)."""
    return int(token) if token >= 0 else None


def _num(a: np.ndarray | None, i: int) -> float | None:
    return None if a is None else float(a[i])


def json_floats(a: np.ndarray, none_for_nan: bool = False) -> list[Any]:
    """A float array as JSON holds it: a non-finite value as None (`none_for_nan`, NaN only) or as its string."""
    out = a.tolist()
    if np.isfinite(a).all():
        return out
    if none_for_nan:
        return [None if math.isnan(v) else v for v in out]
    return [v if math.isfinite(v) else "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity" for v in out]
