"""What the lens and attention docks share around their `StepLook`: the heading (the step looked at and its token), the
button that starts the look and Stop, a grey note, a status line, and the body below them, which is the view's own.
A view says its job, heading and wording, and draws: the look's answer (`draw`), a step without one (`draw_unlooked`),
nothing (`blank`). Draws no record itself.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDockWidget, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.ui.formatting import visible
from app.ui.tools.inside.step_look import NO_STEP, StepLook

if TYPE_CHECKING:
    from app.core.record.trace import StepTrace
    from app.ui.viewmodel.playground import Playground


class LookDock(QDockWidget):
    KIND = ""  # the StepLook's job on the model thread: "lens" or "attention"
    HEADING = ""  # the dock's title, and its heading's first words
    DREW = "drew"  # what the heading says of the step's token
    READING = ""  # the status while the job runs

    shown = Signal(object)  # what was drawn (None: cleared)

    def __init__(self, playground: Playground, ask: QPushButton, parent: QWidget | None = None) -> None:
        super().__init__(self.HEADING, parent)
        self.playground = playground
        self.look = StepLook(playground, self.KIND, self)
        self.title = QLabel(f"<b>{self.HEADING}</b>")
        self.ask = ask
        self.stop = QPushButton("Stop", enabled=False)
        self.note = QLabel("", wordWrap=True)
        self.note.setStyleSheet("color: gray")
        self.status = QLabel(NO_STEP, wordWrap=True)

    def _finish(self, extra: Sequence[QWidget], rows: Sequence[QWidget], body: QWidget) -> None:
        """Lay the dock out (the heading, the button, Stop and `extra` on a line; `rows` under it; `body` below,
        stretched), follow the look and draw the step it looks at now. The view's last word in its constructor."""
        head = QHBoxLayout()
        head.addWidget(self.title, 1)
        for w in (self.ask, self.stop, *extra):
            head.addWidget(w)
        holder = QWidget()
        box = QVBoxLayout(holder)
        box.addLayout(head)
        for w in rows:
            box.addWidget(w)
        box.addWidget(body, 1)
        self.setWidget(holder)
        self.ask.clicked.connect(self.look.look)
        self.stop.clicked.connect(self.look.stop)
        self.look.step_changed.connect(self.show_step)
        self.look.looked.connect(self.draw)
        self.look.failed.connect(self.status.setText)
        self.look.running_changed.connect(self._running)
        self.show_step(self.look.trace)

    def look_at(self) -> bool:
        """Look at the step shown (the step panel's button for this view asks this)."""
        return self.look.look()

    def _running(self, running: bool) -> None:
        self.ask.setEnabled(not running)
        self.stop.setEnabled(running)
        if running:
            self.status.setText(self.READING)

    def show_step(self, trace: StepTrace | None) -> None:
        """The step now looked at: its heading, then the answer kept for it, else what the view draws without one."""
        if trace is None:
            self.title.setText(f"<b>{self.HEADING}</b>")
            self._clear(NO_STEP)
            return
        self.title.setText(f"<b>{self.HEADING} · step {trace.step}</b> — {self.DREW} "
                           f"<code>{html.escape(visible(trace.text))}</code>")
        if (kept := self.look.result) is not None:
            self.draw(kept)
        else:
            self.draw_unlooked(trace)

    def _clear(self, why: str) -> None:
        self.blank()
        self.status.setText(why)
        self.shown.emit(None)

    def draw(self, result: Any) -> None:
        """The look's answer for the step looked at."""
        raise NotImplementedError

    def draw_unlooked(self, trace: StepTrace) -> None:
        """The step looked at, with no answer kept for it."""
        raise NotImplementedError

    def blank(self) -> None:
        """Nothing drawn in the body."""
        raise NotImplementedError
