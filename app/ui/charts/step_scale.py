"""The step chart's probability axis: linear 0–1, or logarithmic down to a floor below the smallest value drawn, so
the tail and the cut lines that top-k, min-p and temperature move are read rather than sat on the axis.

A `Scale` only places recorded numbers on the screen (`y`); it computes no probability.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

LOWEST = -8.0  # log10: a floor never below 1e-8
HIGHEST_FLOOR = -2.0  # and never above 0.01: at least two decades are shown
LINEAR_GRID = (0.2, 0.4, 0.6, 0.8, 1.0)


def decade_label(k: int) -> str:
    """10**k as the log axis writes it: 1, 0.1, 0.01, 1e-3 …"""
    return f"{10.0 ** k:g}" if k >= -2 else f"1e{k}"


class Scale:
    """Where a probability sits on the step chart's y axis: itself (linear), or its log10 (log), clipped at the
    floor (a bar of probability 0 stands at the floor with no height)."""

    def __init__(self, log: bool = True) -> None:
        self.log = log
        self.floor = HIGHEST_FLOOR  # log10 of the axis's bottom, in log mode

    def fit(self, values: Iterable[np.ndarray | float]) -> None:
        """Set the floor under the smallest positive finite value among `values` (the rows and lines drawn)."""
        flat = np.concatenate([np.ravel(np.asarray(v, dtype=np.float64)) for v in values] or [np.zeros(0)])
        flat = flat[np.isfinite(flat) & (flat > 0)]
        low = math.log10(float(flat.min())) if flat.size else HIGHEST_FLOOR
        self.floor = max(LOWEST, min(HIGHEST_FLOOR, math.floor(low - 0.25)))  # the least bar keeps a quarter decade

    @property
    def base(self) -> float:
        """The y of probability 0 (where bars stand)."""
        return self.floor if self.log else 0.0

    @property
    def top(self) -> float:
        """The y of probability 1."""
        return 0.0 if self.log else 1.0

    def y(self, p: np.ndarray | float) -> np.ndarray:
        """Probabilities → y (NaN and ±inf shown at the floor: pyqtgraph blanks on them)."""
        p = np.asarray(p, dtype=np.float64)
        p = np.where(np.isfinite(p), p, 0.0)
        if not self.log:
            return p
        with np.errstate(divide="ignore"):
            return np.maximum(np.log10(np.maximum(p, 0.0)), self.floor)

    def prob(self, y: float) -> float:
        """The probability at height y (the inverse of `y` above the floor)."""
        return 10.0 ** y if self.log else y

    def grid(self) -> list[float]:
        return [float(k) for k in range(int(self.floor), 1)] if self.log else list(LINEAR_GRID)

    def ticks(self) -> list[tuple[float, str]]:
        """The left axis's ticks: every decade (log), or tenths (linear)."""
        if self.log:
            return [(float(k), decade_label(k)) for k in range(int(self.floor), 1)]
        return [(v / 10, f"{v / 10:g}") for v in range(0, 11, 2)]
