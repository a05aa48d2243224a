"""The stage order as a list the user reorders by dragging: every stage in the order it runs, those the settings
turn on in plain text, the others greyed "(off)", each by its stage table label. It shows an order and says when a
drag made a new one; the panel turns that into settings (`SamplerSettings.chain`)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QAbstractItemView, QListWidget, QListWidgetItem, QWidget

from app.core.stage_table import label

NAME = Qt.ItemDataRole.UserRole


class StageList(QListWidget):
    """Stage names top to bottom in the order they run; drag one to move it."""

    order_changed = Signal(tuple)  # the stage names after a drag, top to bottom

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setDragDropMode(QAbstractItemView.DragDropMode.InternalMove)
        self.setDefaultDropAction(Qt.DropAction.MoveAction)
        self.setToolTip("The order the stages run in, top first (penalties always run before them). Drag a stage "
                        "to move it; the greyed ones are off.")
        self.model().rowsMoved.connect(lambda *_: self.order_changed.emit(self.order()))

    def order(self) -> tuple[str, ...]:
        return tuple(self.item(i).data(NAME) for i in range(self.count()))

    def show_order(self, names: tuple[str, ...], on: tuple[str, ...]) -> None:
        """Show `names` in order, numbered from the top, those in `on` as running, the rest greyed. After a drag the
        rows are already in this order: they are renumbered in place (the dragged row stays selected)."""
        if self.order() != names:
            self.blockSignals(True)
            self.clear()
            for name in names:
                item = QListWidgetItem()
                item.setData(NAME, name)
                self.addItem(item)
            self.blockSignals(False)
        grey = self.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text)
        for i, name in enumerate(names):
            item = self.item(i)
            text = f"{i + 1}. {label(name)}" + ("" if name in on else "  (off)")
            if item.text() != text:
                item.setText(text)
                item.setData(Qt.ItemDataRole.ForegroundRole, None if name in on else grey)
        self.setFixedHeight(self.sizeHintForRow(0) * min(len(names), 12) + 2 * self.frameWidth() + 2)
