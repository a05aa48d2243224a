"""Run ▸ Compare quantization…: the action that opens the quantization diff's dock (app/ui/quant_view.py), made
when first asked for (pyqtgraph and the diff's core modules: not before the window's first paint)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow

if TYPE_CHECKING:
    from app.ui.playground import Playground
    from app.ui.quant_view import QuantView


class QuantAction(QAction):
    """The menu entry; `view` is the dock once opened (None before)."""

    def __init__(self, window: QMainWindow, playground: Playground) -> None:
        super().__init__("Compare &quantization…", window, shortcut=QKeySequence("Ctrl+Shift+K"),
                         toolTip="Teacher-force the shown run (or the prompt) through the model and a variant of it "
                                 "(another precision, 4- or 8-bit, a GGUF file): KL and top-1 agreement per token")
        self.main, self.playground = window, playground
        self.view: QuantView | None = None
        self.triggered.connect(self.open)

    def open(self) -> QuantView:
        from app.ui.quant_view import QuantView  # (pyqtgraph: not before the window's first paint)

        if self.view is None:
            self.view = QuantView(self.playground, self.main)
            self.main.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.view)
            self.view.setFloating(True)  # a chart and a text: its own window first, docked if dragged in
            self.view.resize(1000, 620)
        self.view.show()
        self.view.raise_()
        return self.view
