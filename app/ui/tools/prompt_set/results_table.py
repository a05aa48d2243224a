"""The prompt set's results table: a row per prompt, settings and sample, drawing `PromptResult`s as recorded
(`compare`'s statistics, the settings' label); it computes nothing."""

from __future__ import annotations

import math
from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTableWidget, QTableWidgetItem, QWidget

from app.core.compare.prompt_sets import PromptResult

RESULT_COLUMNS = ("#", "settings", "sample", "tokens", "mean logprob", "perplexity", "prompt", "output")
LABEL, PROMPT, OUTPUT = 1, 6, 7  # the text columns
TEXT_PX = 240  # the widest a label or prompt column opens
ROW_PX = 22  # a row's height: one line of text


def number(x: float | None, digits: int = 3) -> str:
    """A statistic as the results table shows it ("—": not measured)."""
    return "—" if x is None else "∞" if math.isinf(x) else f"{x:.{digits}f}"


def cells(r: PromptResult) -> tuple[str, ...]:
    """A result's row, as shown (a line break as ↵)."""
    s = r.sample
    return (str(r.index + 1), r.label, str(s.sequence + 1), str(s.length), number(s.mean_logprob),
            number(s.perplexity, 2), r.prompt.replace("\n", "↵"), s.text.replace("\n", "↵"))


class PromptResultsTable(QTableWidget):
    """Read-only rows, appended as each prompt × settings finishes."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(RESULT_COLUMNS), parent, editTriggers=QTableWidget.EditTrigger.NoEditTriggers,
                         selectionBehavior=QTableWidget.SelectionBehavior.SelectRows)
        self.setHorizontalHeaderLabels(RESULT_COLUMNS)
        self.verticalHeader().hide()
        self.verticalHeader().setDefaultSectionSize(ROW_PX)
        self.horizontalHeader().setStretchLastSection(True)
        self.setWordWrap(False)

    def show_results(self, results: Sequence[PromptResult]) -> None:
        self.setRowCount(0)
        self.add(results)

    def add(self, results: Sequence[PromptResult]) -> None:
        for r in results:
            row = self.rowCount()
            self.insertRow(row)
            tips = {LABEL: r.label, PROMPT: r.prompt, OUTPUT: r.sample.text}
            for col, text in enumerate(cells(r)):
                item = QTableWidgetItem(text)
                item.setToolTip(tips.get(col, ""))
                if col not in tips:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.setItem(row, col, item)
        if results:
            self.resizeColumnsToContents()
            for col in (LABEL, PROMPT):
                self.setColumnWidth(col, min(self.columnWidth(col), TEXT_PX))
            self.horizontalHeader().setStretchLastSection(True)
