"""Run → View code…: the menu entry that opens the code dialog (app/ui/tools/code_dialog.py, imported at the first
use: its code generators are not needed before the window's first paint) on the edited settings and prompt, with
the loaded model's tokenizer for a chat prompt's template. A new dialog each time, on what is edited then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QWidget

if TYPE_CHECKING:
    from app.ui.tools.code_dialog import CodeDialog
    from app.ui.viewmodel.playground import Playground


class CodeAction(QAction):
    def __init__(self, playground: Playground, window: QWidget) -> None:
        super().__init__("View &code…", window, toolTip="Code that reproduces these settings and the prompt in "
                         "mlx-lm, transformers, an OpenAI-compatible server and llama.cpp")
        self._pg, self._window = playground, window
        self.dialog: CodeDialog | None = None  # the last one opened
        self.triggered.connect(self.show_code)

    def show_code(self) -> None:
        from app.ui.tools.code_dialog import CodeDialog, code_request

        e = self._pg.editing
        request = code_request(e.settings, e.prompt.text, e.prompt.chat_messages, e.model.source, self._pg.tokenizer)
        self.dialog = CodeDialog(request, self._window)
        self.dialog.show()
