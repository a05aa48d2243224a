"""The error banner: one line a person can act on, shown above the work area until closed, with at most one action
button (Restore, Allow its code…). Anything may show a message in it; it decides nothing itself.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget


class Banner(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        self.setStyleSheet("#banner { background: #b3261e; border-radius: 4px; } QLabel, QToolButton { color: white; }")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.label = QLabel(wordWrap=True, textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        self.action = QPushButton()
        self.action.hide()
        self._callback: Callable[[], object] | None = None
        self.action.clicked.connect(self._act)
        close = QToolButton(text="✕", autoRaise=True, toolTip="Dismiss")
        close.clicked.connect(self.hide)
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 4, 4, 4)
        row.addWidget(self.label, 1)
        row.addWidget(self.action)
        row.addWidget(close)
        self.hide()

    def show_message(self, text: str, action: str | None = None, callback: Callable[[], object] | None = None) -> None:
        self.label.setText(text)
        self.action.setVisible(action is not None)
        self.action.setText(action or "")
        self._callback = callback
        self.show()

    def _act(self) -> None:
        self.hide()
        if self._callback is not None:
            self._callback()
