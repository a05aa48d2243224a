"""The live logit lens of one step (`LiveLens`, a `Sample`'s `lens`): each layer's logits for the step's top-K raw
candidates only (row 0 the embeddings, row i layer i's output, the last row the model's own logits), recorded while
a run decodes with the lens on (`decoding.inside.live_lens`). Plain data with its JSON form (the trace file's "lens"
key, the command line's --json), read back checked. Only K logits a layer: a layer's probabilities over the whole
vocabulary are the full lens's (`decoding.inside.LensGrid`); here `shares` are within the K. Knows nothing of models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from app.core.files import brief, read_field, read_number

MAX_ID = 2**31 - 1


@dataclass(frozen=True, slots=True, eq=False)
class LiveLens:
    ids: np.ndarray  # (K,) int32: the step's top-K raw candidates, most probable first
    logits: np.ndarray  # (L+1, K) float32: each layer's logits for them

    def __post_init__(self) -> None:
        if self.logits.ndim != 2 or self.logits.shape[1] != len(self.ids):
            raise ValueError(f"a live lens needs a row of {len(self.ids)} logits per layer, got {self.logits.shape}")
        for a in (self.ids, self.logits):
            a.flags.writeable = False

    @property
    def layers(self) -> int:
        """Rows: the embeddings and each layer."""
        return self.logits.shape[0]

    def shares(self) -> np.ndarray:
        """(L+1, K) each layer's softmax over the K candidates only (each row sums to 1): how the layer ranks them
        among themselves, not their probability over the vocabulary."""
        z = self.logits.astype(np.float64)
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return (z / z.sum(axis=1, keepdims=True)).astype(np.float32)

    def leaders(self) -> np.ndarray:
        """(L+1,) the index (into `ids`) each layer puts first among the K."""
        return np.argmax(self.logits, axis=1)

    def to_json(self) -> dict[str, Any]:
        return {"ids": self.ids.tolist(), "logits": [[_num(v) for v in row] for row in self.logits.tolist()]}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LiveLens):
            return NotImplemented
        return np.array_equal(self.ids, other.ids) and np.array_equal(self.logits, other.logits, equal_nan=True)


def read_live_lens(obj: Any) -> LiveLens:
    """A step's "lens" (`LiveLens.to_json`), checked: ids are token ids, logits a row of numbers per layer."""
    if not isinstance(obj, dict):
        raise ValueError(f"lens must be an object, got {brief(obj)}")
    ids = read_field(obj, "ids", lambda v: isinstance(v, list) and all(type(x) is int and 0 <= x <= MAX_ID for x in v),
                     "a list of token ids", where="lens.")
    rows = read_field(obj, "logits", lambda v: isinstance(v, list) and bool(v) and all(
        isinstance(r, list) and len(r) == len(ids) and all(read_number(x) is not None for x in r) for r in v),
        f"a list of rows of {len(ids)} numbers", where="lens.")
    with np.errstate(over="ignore"):
        logits = np.array([[read_number(x) for x in r] for r in rows], dtype=np.float32)
    return LiveLens(np.array(ids, dtype=np.int32), logits)


def _num(v: float) -> float | str:
    return v if np.isfinite(v) else "NaN" if np.isnan(v) else "Infinity" if v > 0 else "-Infinity"
