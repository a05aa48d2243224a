"""The prompt set's prompts: an editable table, one prompt per row (an empty row is no prompt). It says when the
user edited it (`edited`), never when it is filled from a list; what the prompts are run under is the view's.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QTableWidget, QTableWidgetItem, QWidget

ROW_PX = 22  # a table row's height


class PromptsTable(QTableWidget):
    edited = Signal()  # rows added, removed or typed in (not a `fill`)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, 1, parent, selectionBehavior=QTableWidget.SelectionBehavior.SelectRows)
        self._filling = False
        self.setHorizontalHeaderLabels(["prompt"])
        self.horizontalHeader().setStretchLastSection(True)
        self.verticalHeader().setDefaultSectionSize(ROW_PX)
        self.itemChanged.connect(lambda _item: None if self._filling else self.edited.emit())

    def prompts(self) -> list[str]:
        """The prompts in table order (an empty row is no prompt)."""
        items = (self.item(r, 0) for r in range(self.rowCount()))
        return [it.text() for it in items if it is not None and it.text().strip()]

    def fill(self, prompts: Sequence[str], clear: bool = False) -> None:
        """Put `prompts` after the rows (`clear`: in their place); not an edit."""
        self._filling = True
        if clear:
            self.setRowCount(0)
        for p in prompts:
            self.insertRow(self.rowCount())
            self.setItem(self.rowCount() - 1, 0, QTableWidgetItem(p))
        self._filling = False

    def append(self, prompts: Sequence[str], edit: bool = False) -> None:
        """Add `prompts` after the rows, an edit (`edit`: the last one opened for typing)."""
        self.fill(prompts)
        self.edited.emit()
        if edit and prompts:
            self.editItem(self.item(self.rowCount() - 1, 0))

    def remove_selected(self) -> None:
        for row in sorted({i.row() for i in self.selectedIndexes()}, reverse=True):
            self.removeRow(row)
        self.edited.emit()
