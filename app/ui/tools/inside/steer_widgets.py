"""The steering dock's two widgets: the table of contrastive prompt pairs, and the KL per step drawn from a steered
run's record (with where its draw first left the unsteered twin's). They draw what they are given; no model here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHeaderView, QTableWidget, QTableWidgetItem, QWidget

from app.ui.charts.shared import DRAWN, STAGES, ThemedPlot

if TYPE_CHECKING:
    from app.core.record.trace import RunTrace

PAIRS = (("I feel wonderful and happy today.", "I feel terrible and sad today."),
         ("What a joyful, delightful surprise!", "What a miserable, depressing surprise."),
         ("Love and laughter fill the room.", "Grief and tears fill the room."))
COLOR = STAGES["steering"].color


class PairsEditor(QTableWidget):
    """Contrastive pairs: a row each, the positive prompt and its negative."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, 2, parent)
        self.setHorizontalHeaderLabels(["Toward (positive)", "Away from (negative)"])
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.verticalHeader().setVisible(False)
        for pos, neg in PAIRS:
            self.add_pair(pos, neg)

    def add_pair(self, positive: str = "", negative: str = "") -> None:
        row = self.rowCount()
        self.insertRow(row)
        self.setItem(row, 0, QTableWidgetItem(positive))
        self.setItem(row, 1, QTableWidgetItem(negative))

    def remove_pair(self) -> None:
        if self.rowCount():
            self.removeRow(self.currentRow() if self.currentRow() >= 0 else self.rowCount() - 1)

    def pairs(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The rows with both prompts typed (positive, negative)."""
        rows = [(self._text(r, 0), self._text(r, 1)) for r in range(self.rowCount())]
        rows = [(a, b) for a, b in rows if a and b]
        return tuple(a for a, _ in rows), tuple(b for _, b in rows)

    def _text(self, row: int, col: int) -> str:
        item = self.item(row, col)
        return item.text().strip() if item is not None else ""


class KlCurve(ThemedPlot):
    """KL(steered ‖ unsteered) per step, from the record; a mark where the steered draw differed from what the twin
    would have drawn, a line at the first such step. A click selects a step (`step_clicked`)."""

    step_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.curve = self.plot([], [], pen=pg.mkPen(COLOR, width=2), symbol="o", symbolSize=5, symbolBrush=COLOR)
        self.marks = pg.ScatterPlotItem(symbol="x", size=10, pen=pg.mkPen(DRAWN, width=2), brush=None)
        self.first = pg.InfiniteLine(angle=90, pen=pg.mkPen(DRAWN, style=Qt.PenStyle.DashLine))
        self.chosen = pg.InfiniteLine(angle=90, pen=pg.mkPen(COLOR, width=1))
        for item in (self.marks, self.first, self.chosen):
            self.addItem(item)
        self.first.hide()
        self.chosen.hide()
        plot = self.getPlotItem()
        plot.setLabel("left", "KL from unsteered (nats)")
        plot.setLabel("bottom", "step")
        plot.getAxis("left").enableAutoSIPrefix(False)
        plot.setXRange(0, 10, padding=0.02)
        plot.showGrid(y=True, alpha=0.2)
        self.scene().sigMouseClicked.connect(self._clicked)
        self.steps = 0

    def show_trace(self, trace: RunTrace) -> None:
        steered = [st for st in trace.steps if st.sample.steer is not None]
        x = np.array([st.step for st in steered], dtype=float)
        kl = np.array([st.sample.steer.kl for st in steered], dtype=float)
        self.curve.setData(x, kl)
        off = [st for st in steered if st.sample.steer.twin_token != st.token_id]
        self.marks.setData(x=[st.step for st in off], y=[st.sample.steer.kl for st in off])
        self.first.setVisible(bool(off))
        if off:
            self.first.setValue(off[0].step)
        self.steps = len(trace.steps)
        self.getPlotItem().enableAutoRange()

    def select(self, step: int) -> None:
        self.chosen.setValue(step)
        self.chosen.show()

    def _clicked(self, ev: object) -> None:
        x = self.getPlotItem().vb.mapSceneToView(ev.scenePos()).x()  # type: ignore[attr-defined]
        if self.steps and 0 <= round(x) < self.steps:
            self.step_clicked.emit(round(x))
