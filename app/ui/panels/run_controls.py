"""The run controls: Generate and Stop (the buttons and their Run-menu actions, Ctrl+Enter and Esc), Run → Replay,
and "Add the reply to the chat" under the prompt once a chat run has finished.

Generate is on while no run is in progress (a model load alone may be) and the prompt can be generated from (the
prompt editor's `unusable` says why not, in its tooltip); Stop while the view-model is busy; Replay while a finished
run is shown. A reason Generate cannot start goes to the banner. The window places the buttons and the actions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QPushButton, QWidget

if TYPE_CHECKING:
    from app.ui.banner import Banner
    from app.ui.panels.prompt_editor import PromptEditor
    from app.ui.viewmodel.playground import Playground

GENERATE_TIP = "Generate (Ctrl+Enter)"


class RunControls(QObject):
    def __init__(self, prompt: PromptEditor, banner: Banner, window: QWidget) -> None:
        """`window`: where the actions' shortcuts apply (their menu's window)."""
        super().__init__(window)
        self._prompt, self._banner = prompt, banner
        self._pg: Playground | None = None
        self._unusable = ""  # why the prompt cannot be generated from now ("": it can)
        self.generate_button = QPushButton("Generate", toolTip=GENERATE_TIP)
        self.stop_button = QPushButton("Stop", enabled=False, toolTip="Stop (Esc)")
        self.reply_button = QPushButton("Add the reply to the chat", visible=False,
                                        toolTip="Append the generated text as an assistant message, then a new "
                                        "user message")
        self.generate_action = QAction("&Generate", window, shortcut=QKeySequence("Ctrl+Return"), toolTip=GENERATE_TIP)
        self.generate_action.setShortcuts([QKeySequence("Ctrl+Return"), QKeySequence("Ctrl+Enter")])
        self.stop_action = QAction("&Stop", window, shortcut=QKeySequence(Qt.Key.Key_Escape), enabled=False,
                                   toolTip="Stop (Esc)")
        for a in (self.generate_action, self.stop_action):
            a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        self.replay_action = QAction("Re&play under these settings", window, shortcut=QKeySequence("Ctrl+Shift+R"),
                                     enabled=False, toolTip="Re-run the shown run with its seed under the panel's "
                                     "settings: where it first draws a different token is marked")
        prompt.unusable.connect(self._prompt_unusable)

    def bind(self, pg: Playground) -> None:
        """Generate, Stop and Replay act on the view-model and follow whether it is busy; the reply button follows
        its runs."""
        self._pg = pg
        self.generate_action.triggered.connect(self.generate)
        self.generate_button.clicked.connect(self.generate)
        for stop in (self.stop_action.triggered, self.stop_button.clicked):
            stop.connect(pg.stop)
            stop.connect(self._prompt.scoring.cancelled)  # after pg.stop (Stop cancels a queued score): asks again
        self.replay_action.triggered.connect(pg.branches.replay)
        pg.session_changed.connect(self._can_replay)
        pg.busy_changed.connect(self._busy)
        pg.run_started.connect(lambda _request: self.reply_button.hide())
        pg.cleared.connect(self.reply_button.hide)
        pg.finished.connect(lambda _ev: self.reply_button.setVisible(pg.editing.prompt.chat and bool(pg.steps)))
        self.reply_button.clicked.connect(self._add_reply)

    def generate(self) -> None:
        """Generate from what the editing state holds (Ctrl+Enter); a reason it cannot goes to the banner."""
        if self.generate_action.isEnabled() and self._pg is not None:
            self._banner.hide()
            self._pg.generate()

    def _prompt_unusable(self, why: str) -> None:
        """The prompt cannot be generated from as it is (chat mode on a model with no chat template…): Generate
        is off, and its tooltip says why."""
        self._unusable = why
        self.generate_button.setToolTip(why or GENERATE_TIP)
        self._busy(self._pg is not None and self._pg.busy)

    def _busy(self, busy: bool) -> None:
        can_run = (not busy or (self._pg is not None and self._pg.loading_only)) and not self._unusable
        self.generate_action.setEnabled(can_run)
        self.generate_button.setEnabled(can_run)
        self.stop_action.setEnabled(busy)
        self.stop_button.setEnabled(busy)
        self._can_replay()

    def _can_replay(self) -> None:
        pg = self._pg
        self.replay_action.setEnabled(pg is not None and pg.trace is not None and (not pg.busy or pg.loading_only))

    def _add_reply(self) -> None:
        self._prompt.chat.add_reply("".join(s.text for s in self._pg.steps))
        self.reply_button.hide()
