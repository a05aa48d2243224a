"""The sweep's grid: one cell per pair of the two axes' values, showing a finished cell's chosen statistic, coloured
from red (the lowest value shown) to green (the highest); a cell stopped before its samples ended says so. Every
number is the cell's `compare` statistics' (app/core/compare/statistics.py): the grid only colours and writes them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QTableWidget, QTableWidgetItem, QWidget

from app.core.compare.job_plan import CellRun
from app.core.compare.statistics import Axis
from app.core.record.export import shade_rgba

SHADES = 20


class SweepGrid(QTableWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, 0, parent, editTriggers=QTableWidget.EditTrigger.NoEditTriggers)

    def make(self, axes: tuple[Axis, Axis], cells: Sequence[CellRun]) -> None:
        """A grid of `axes` (rows, columns), every cell of `cells` waiting ("…")."""
        rows, cols = axes
        self.clear()
        self.setRowCount(len(rows.values))
        self.setColumnCount(len(cols.values))
        self.setVerticalHeaderLabels([f"{rows.name} {v:g}" for v in rows.values])
        self.setHorizontalHeaderLabels([f"{cols.name} {v:g}" for v in cols.values])
        for cr in cells:
            item = QTableWidgetItem("…")
            item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
            self.setItem(cr.cell.row, cr.cell.col, item)
        self.horizontalHeader().setSectionResizeMode(self.horizontalHeader().ResizeMode.Stretch)
        self.verticalHeader().setSectionResizeMode(self.verticalHeader().ResizeMode.Stretch)

    def forget(self) -> None:
        self.setRowCount(0)
        self.setColumnCount(0)

    def mark_stopped(self, cr: CellRun) -> None:
        item = self.item(cr.cell.row, cr.cell.col)
        if item is not None:
            item.setText("stopped")
            item.setToolTip("Stopped (or failed) before its samples ended: not scored")

    def draw(self, cells: Sequence[CellRun], statistic: str) -> None:
        """Each finished cell's `statistic`, coloured between the lowest and the highest value shown."""
        values = [v for v in (shown_value(cr, statistic) for cr in cells) if v is not None]
        lo, hi = (min(values), max(values)) if values else (0.0, 0.0)
        for cr in cells:
            item = self.item(cr.cell.row, cr.cell.col)
            v = shown_value(cr, statistic)
            if item is None or cr.result is None:
                continue
            item.setText("—" if v is None else f"{v:.3g}")
            level = None if v is None else round((v - lo) / (hi - lo) * (SHADES - 1)) if hi > lo else SHADES // 2
            item.setBackground(QColor(*shade_rgba(level)) if level is not None else QColor(0, 0, 0, 0))
            item.setToolTip(f"{statistic} = {v}; {cr.result.stats.unique} unique of {cr.result.stats.n}")

    def current(self, cells: Sequence[CellRun]) -> CellRun | None:
        """The cell of `cells` selected in the grid (the one last clicked), if any."""
        return at(cells, self.currentRow(), self.currentColumn())


def at(cells: Sequence[CellRun], row: int, col: int) -> CellRun | None:
    return next((cr for cr in cells if (cr.cell.row, cr.cell.col) == (row, col)), None)


def shown_value(cr: CellRun, statistic: str) -> float | None:
    """A finished cell's `statistic` (what its text and colour show); None before it finished, or not finite."""
    if cr.result is None:
        return None
    v = getattr(cr.result.stats, statistic)
    return None if v is None or not math.isfinite(v) else float(v)
