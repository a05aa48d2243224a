"""The window's right column, the branch tree over the model card, and how it gives way: below `NARROW` pixels of
window width it folds away (its splitter handle brings it back) and returns at its width once the window is wide
again; View → Branches unfolds it. It places and sizes; it draws nothing of its own.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QLabel, QSplitter, QVBoxLayout, QWidget

NARROW = 1100  # px: narrower windows fold the model card away
SIDE = 240  # px: the right column's width (branch tree, model card) when it unfolds


def side_column(branches: QWidget, model_card: QWidget) -> QWidget:
    """The right column: the branch tree over the model card."""
    side = QWidget()
    box = QVBoxLayout(side)
    box.setContentsMargins(0, 0, 0, 0)
    box.addWidget(QLabel("<b>Branches</b>"))
    box.addWidget(branches, 1)
    box.addWidget(QLabel("<b>Model</b>"))
    box.addWidget(model_card)
    return side


class SideFold(QObject):
    """Folds `splitter`'s last pane (the side column) while `window` is narrower than `NARROW`."""

    def __init__(self, window: QWidget, splitter: QSplitter) -> None:
        super().__init__(window)
        self._window, self._split = window, splitter
        self._card_width: int | None = None  # its width before a narrow window folded it away
        window.installEventFilter(self)

    def show_side(self) -> None:
        """Unfold the side column (View → Branches), taking its room from the middle."""
        sizes = self._split.sizes()
        if sizes[2] < 200:
            self._split.setSizes([sizes[0], max(200, sizes[1] - 260 + sizes[2]), 260])

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if watched is self._window and event.type() == QEvent.Type.Resize:
            self._resized(event.size().width())
        return False

    def _resized(self, width: int) -> None:
        """Below `NARROW` pixels the side column folds away; above, it returns."""
        sizes = self._split.sizes()
        narrow = width < NARROW
        if narrow and sizes[2] > 0 and self._card_width is None:
            self._card_width = max(sizes[2], SIDE)  # (a window still being laid out gives it a sliver)
            self._split.setSizes([sizes[0], sizes[1] + sizes[2], 0])
        elif not narrow and self._card_width is not None:
            card, self._card_width = self._card_width, None
            if sizes[2] == 0:  # once the splitter has its new width (it is laid out after this event)
                QTimer.singleShot(0, self, lambda: self._unfold(card))

    def _unfold(self, card: int) -> None:
        left, center, right = self._split.sizes()
        if right == 0 and self._window.width() >= NARROW:  # (narrowed again before this ran: it stays folded)
            self._split.setSizes([left, max(1, center - card), card])
