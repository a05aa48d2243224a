"""The side-by-side output: one row per step, one column per run, each cell the token that column drew there.

Rows are named by step, counted from 0 as every view and the CLI count. Filled as steps arrive (only what is new is
appended), the first divergence's row shaded and its header marked `◆`, a column that had ended there says
"(ended)", and a column whose run failed says why in its first cell. It draws what the runs recorded and what
`side_by_side.first_divergence` found; it decides nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QHeaderView, QTableWidget, QTableWidgetItem, QWidget

from app.ui.formatting import DIVERGED, format_prob, visible

if TYPE_CHECKING:
    from app.core.compare.side_by_side import Divergence
    from app.core.record.record import StepTrace

MARK = QColor(DIVERGED.red(), DIVERGED.green(), DIVERGED.blue(), 70)  # the first divergence's row
FAILED = QColor(DIVERGED.red(), DIVERGED.green(), DIVERGED.blue(), 35)


class AlignedTable(QTableWidget):
    """Rows are steps, columns runs; `filled[c]` is how many of column c's steps it shows."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, 2, parent, editTriggers=QTableWidget.EditTrigger.NoEditTriggers,
                         selectionBehavior=QTableWidget.SelectionBehavior.SelectRows,
                         selectionMode=QTableWidget.SelectionMode.SingleSelection)
        self.verticalHeader().setDefaultSectionSize(22)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.filled: list[int] = []
        self.divergence: Divergence | None = None

    def reset(self, headers: Sequence[str], tips: Sequence[str] = ()) -> None:
        """Empty, with these columns."""
        self.setRowCount(0)
        self.setColumnCount(len(headers))
        self.setHorizontalHeaderLabels(list(headers))
        for c, tip in enumerate(tips):
            self.horizontalHeaderItem(c).setToolTip(tip)
        self.filled, self.divergence = [0] * len(headers), None

    def append(self, columns: Sequence[Sequence[StepTrace]]) -> None:
        """Show the steps of each column not shown yet."""
        rows = max((len(s) for s in columns), default=0)
        if rows > self.rowCount():
            old = self.rowCount()
            self.setRowCount(rows)
            for k in range(old, rows):  # each row named by its step, from 0 as every view and the CLI count
                self.setVerticalHeaderItem(k, QTableWidgetItem(str(k)))
        for c, steps in enumerate(columns):
            for k in range(self.filled[c], len(steps)):
                self.setItem(k, c, self._cell(steps[k]))
            self.filled[c] = max(self.filled[c], len(steps))

    def show_failure(self, column: int, message: str) -> None:
        """A column whose run failed before its first step: why, in its first cell."""
        if self.filled[column] == 0 and self.item(0, column) is None:
            if self.rowCount() == 0:
                self.setRowCount(1)
                self.setVerticalHeaderItem(0, QTableWidgetItem("0"))
            item = QTableWidgetItem(f"failed: {message}")
            item.setToolTip(message)
            item.setBackground(QBrush(FAILED))
            self.setItem(0, column, item)

    @staticmethod
    def _cell(st: StepTrace) -> QTableWidgetItem:
        item = QTableWidgetItem(visible(st.text))
        p, kind = st.drawn_prob
        item.setToolTip(f"step {st.step}: {st.text!r}, p = {format_prob(p) if p is not None else '—'}"
                        f"{' (model)' if kind == 'model' else ''}")
        return item

    def mark(self, divergence: Divergence | None, done: Sequence[bool]) -> None:
        """Shade the row of the first divergence (and only it); a column that had ended there says so."""
        if self.divergence is not None and divergence != self.divergence:
            self._paint_row(self.divergence.step, None, done)
        self.divergence = divergence
        if divergence is not None:
            self._paint_row(divergence.step, MARK, done)

    def _paint_row(self, row: int, color: QColor | None, done: Sequence[bool]) -> None:
        self.setVerticalHeaderItem(row, QTableWidgetItem(f"◆ {row}" if color is not None else str(row)))
        for c in range(self.columnCount()):
            item = self.item(row, c)
            if item is None and color is not None and c < len(done) and done[c] and self.filled[c] <= row:
                item = QTableWidgetItem("(ended)")
                self.setItem(row, c, item)
            if item is not None:
                item.setBackground(QBrush(color) if color is not None else QBrush())
