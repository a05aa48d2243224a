"""What steering did at one step (`SteerStep`, a steered `Sample`'s `steer`): measured against the unsteered twin
row that decodes beside the steered one in the same batched forward, fed the same tokens. Plain data with its JSON
form (the trace file's "steer" key, the command line's --json), read back checked; `first_divergence` and
`perplexity` read a run's steps. Made by `decoding.steering`; knows nothing of models.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.core.files import is_a, read_field, read_number, whole


@dataclass(frozen=True, slots=True, eq=False)
class SteerStep:
    """`kl`: KL(steered ‖ unsteered) of the model's distributions over the whole vocabulary, in nats. `unsteered`:
    the unsteered distribution at the step's top-N candidates (the record's `top_ids[:N]`). `token_logprob`: the
    drawn token's log-probability under the unsteered model (a term of the text's perplexity there). `twin_token`:
    what the unsteered distribution would have drawn with the same uniform and sampler. `moved_ids` with `moved`
    (M, 2) (unsteered, steered) probabilities: the tokens whose probability steering raised most, then those it
    lowered most (`promoted`, `demoted`); `moved_texts` their display texts."""

    kl: float
    unsteered: np.ndarray  # (N,) float32
    token_logprob: float
    twin_token: int
    moved_ids: np.ndarray  # (M,) int32
    moved: np.ndarray  # (M, 2) float32
    moved_texts: tuple[str, ...]

    def __post_init__(self) -> None:
        for a in (self.unsteered, self.moved_ids, self.moved):
            a.flags.writeable = False

    @property
    def promoted(self) -> list[tuple[int, str, float, float]]:
        """(id, text, unsteered p, steered p) of the tokens it made more likely, most raised first."""
        return [m for m in self._rows() if m[3] > m[2]]

    @property
    def demoted(self) -> list[tuple[int, str, float, float]]:
        return [m for m in self._rows() if m[3] < m[2]]

    def _rows(self) -> list[tuple[int, str, float, float]]:
        return [(int(i), t, float(p[0]), float(p[1]))
                for i, t, p in zip(self.moved_ids, self.moved_texts, self.moved, strict=True)]

    def to_json(self) -> dict[str, Any]:
        return {"kl": _num(self.kl), "unsteered": [_num(p) for p in self.unsteered.tolist()],
                "token_logprob": _num(self.token_logprob), "twin_token": self.twin_token,
                "moved": [{"token_id": i, "text": t, "unsteered": u, "steered": s} for i, t, u, s in self._rows()]}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SteerStep):
            return NotImplemented
        return (self.twin_token == other.twin_token and self.moved_texts == other.moved_texts
                and np.array_equal([self.kl, self.token_logprob], [other.kl, other.token_logprob], equal_nan=True)
                and np.array_equal(self.unsteered, other.unsteered, equal_nan=True)
                and np.array_equal(self.moved_ids, other.moved_ids) and np.array_equal(self.moved, other.moved))

    __hash__ = None  # type: ignore[assignment]


def _num(v: float) -> float | str:
    return v if math.isfinite(v) else "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"


def read_steer(value: Any, n: int) -> SteerStep:
    """A step's "steer" object (`SteerStep.to_json`), for a record of `n` candidates; a ValueError names the field."""
    if not isinstance(value, dict):
        raise ValueError(f"steer must be an object, got {type(value).__name__}")
    number = lambda v: read_number(v) is not None  # a check, as read_field takes them
    unsteered = read_field(value, "unsteered", lambda v: isinstance(v, list) and all(number(x) for x in v),
                           "a list of numbers", where="steer.")
    if len(unsteered) != n:
        raise ValueError(f"steer.unsteered holds {len(unsteered)} numbers for {n} candidates")
    moved = read_field(value, "moved", lambda v: isinstance(v, list) and all(_moved_entry(m) for m in v),
                       "a list of {token_id, text, unsteered, steered}", where="steer.")
    return SteerStep(
        kl=read_number(read_field(value, "kl", number, "a number", where="steer.")),  # type: ignore[arg-type]
        unsteered=np.array([read_number(x) for x in unsteered], dtype=np.float32),
        token_logprob=read_number(read_field(value, "token_logprob", number, "a number", where="steer.")),  # type: ignore[arg-type]
        twin_token=read_field(value, "twin_token", whole, "a token id", where="steer."),
        moved_ids=np.array([m["token_id"] for m in moved], dtype=np.int32),
        moved=np.array([[read_number(m["unsteered"]), read_number(m["steered"])] for m in moved],
                       dtype=np.float32).reshape(-1, 2),
        moved_texts=tuple(m["text"] for m in moved))


def _moved_entry(m: Any) -> bool:
    return (isinstance(m, dict) and whole(m.get("token_id")) and is_a(str)(m.get("text"))
            and read_number(m.get("unsteered")) is not None and read_number(m.get("steered")) is not None)


def first_divergence(steps: Sequence[Any]) -> int | None:
    """The first step (its index in `steps`, StepTraces) whose steered draw differs from what the unsteered
    distribution would have drawn with the same uniform; None where none did (or nothing was steered)."""
    for i, st in enumerate(steps):
        steer = st.sample.steer
        if steer is not None and steer.twin_token != st.sample.token:
            return i
    return None


def perplexity(steps: Sequence[Any]) -> float | None:
    """The steered text's perplexity under the unsteered model: exp of minus its tokens' mean log-probability there
    (None without steered steps)."""
    lps = [st.sample.steer.token_logprob for st in steps if st.sample.steer is not None]
    return math.exp(-sum(lps) / len(lps)) if lps else None


def summary(steps: Sequence[Any]) -> dict[str, Any] | None:
    """A steered run in numbers (None where no step was steered): its steps' mean and largest KL from the unsteered
    model, the first step whose draw diverged from the twin's, and its text's perplexity under the unsteered model."""
    kls = [st.sample.steer.kl for st in steps if st.sample.steer is not None]
    if not kls:
        return None
    return {"mean_kl": sum(kls) / len(kls), "max_kl": max(kls), "first_divergence": first_divergence(steps),
            "perplexity_unsteered": perplexity(steps)}


def summary_line(steps: Sequence[Any]) -> str:
    """`summary` as the command line says it ("" where nothing was steered)."""
    s = summary(steps)
    if s is None:
        return ""
    at = s["first_divergence"]
    where = "never diverged from the unsteered draw" if at is None else f"first diverged at step {at}"
    return (f"steering: KL from the unsteered model {s['mean_kl']:.3g} nats a step (at most {s['max_kl']:.3g}), "
            f"{where}, perplexity under the unsteered model {s['perplexity_unsteered']:.4g}")
