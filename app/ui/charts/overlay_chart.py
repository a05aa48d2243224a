"""The side-by-side chart: one step of every column, bars side by side per candidate token, one colour per column.

It draws an `side_by_side.Overlay` as it is: a bar's height is the probability the column's record holds (none
where the record holds none: no bar), the drawn token outlined. Its items are made once and updated in place.
The overlay's rows may be some of the columns only (those on one model): each keeps its column's colour and name.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QWidget

from app.core.compare.side_by_side import MAX_COLUMNS, Overlay
from app.ui.charts.shared import DRAWN, ThemedPlot
from app.ui.formatting import visible

COLUMN_COLORS = (QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44), QColor(148, 103, 189))
NAMES = "ABCD"
GROUP = 0.8  # the width of one candidate's group of bars
MAX_LABEL = 8
DRAWN_PEN = pg.mkPen(DRAWN, width=2)
NO_PEN = pg.mkPen(None)


def label(text: str) -> str:
    t = visible(text)
    return t if len(t) <= MAX_LABEL else t[: MAX_LABEL - 1] + "…"


class OverlayChart(ThemedPlot):
    """Bars per candidate and column; `drawn` holds what the last draw showed, for tests and tooltips."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bars = [pg.BarGraphItem(x=[], height=[], width=0.1, brush=c, pen=NO_PEN) for c in COLUMN_COLORS]
        self.legend = self.addLegend(offset=(-10, 10), colCount=MAX_COLUMNS)
        for bar in self.bars:
            self.addItem(bar)
        self.setLabel("left", "probability")
        self.getPlotItem().getAxis("left").enableAutoSIPrefix(False)  # (else 0.9 reads "900 (x0.001)")
        self.setMouseEnabled(x=False, y=False)
        self.drawn: Overlay | None = None
        self.columns: list[int] = []  # the columns drawn, row by row of the overlay
        self.show_overlay(None, 2)

    def show_overlay(self, o: Overlay | None, columns: int | Sequence[int]) -> None:
        """Draw `o` (None: empty axes) for `columns` columns, or for these columns (row r of `o` is column
        `columns[r]`, in its colour)."""
        self.drawn = o
        self.columns = list(range(columns)) if isinstance(columns, int) else list(columns)
        k = len(o.candidates) if o is not None else 0
        width = GROUP / max(len(self.columns), 1)
        for c, bar in enumerate(self.bars):
            if c not in self.columns or o is None:
                bar.setOpts(x=[], height=[], pens=None)
                bar.setVisible(c in self.columns)
                continue
            r = self.columns.index(c)
            heights = o.probs[r]
            shown = np.flatnonzero(np.isfinite(heights))  # no bar where the record holds no probability
            x = shown - GROUP / 2 + width * (r + 0.5)
            pens = [DRAWN_PEN if o.drawn[r] == i else NO_PEN for i in shown] or None  # (pyqtgraph: no [])
            bar.setOpts(x=x, height=heights[shown], width=width * 0.92, pens=pens)
            bar.setVisible(True)
        self._legend()
        axis = self.getPlotItem().getAxis("bottom")
        axis.setTicks([[(i, label(t)) for i, t in enumerate(o.texts)]] if o is not None else [[]])
        top = np.nanmax(o.probs) if o is not None and np.isfinite(o.probs).any() else 1.0
        self.setYRange(0, max(float(top), 0.05) * 1.08, padding=0)
        self.setXRange(-0.6, max(k, 5) - 0.4, padding=0)
        which = "sampled from" if o is None or o.distribution == "final" else "the model's"
        self.setLabel("bottom", f"step {o.step if o else '—'}: candidates ({which}; drawn: outlined)")

    def _legend(self) -> None:
        self.legend.clear()
        for c in self.columns:
            self.legend.addItem(self.bars[c], NAMES[c])

    def heights(self, column: int) -> dict[int, float]:
        """What column's bars show now: candidate index → height (read back from the drawn items)."""
        bar = self.bars[column]
        x, h = bar.opts["x"], bar.opts["height"]
        if self.drawn is None or len(x) == 0 or column not in self.columns:
            return {}
        width, r = GROUP / len(self.columns), self.columns.index(column)
        return {round(float(xi) + GROUP / 2 - width * (r + 0.5)): float(hi) for xi, hi in zip(x, h, strict=True)}
