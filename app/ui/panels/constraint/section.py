"""The sampler panel's "Constraint" section: a fold toggle whose title says the kind when one is on, the editor
under it (folded at first, unfolded when settings bring a constraint), and a mark for a remote model, whose server
applies the constraint itself (not observed here) or refuses a kind it cannot take.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from app.core.remote.server_constraint import NOT_OBSERVED
from app.core.stage_inputs import Constraint
from app.ui.panels.constraint.editor import ConstraintEditor

REMOTE_NOTE = (f"A server's run: the server applies the constraint ({NOT_OBSERVED}); OpenAI-compatible servers "
               "take a JSON schema, vLLM also regular expressions, choices and GBNF, llama.cpp GBNF and choices; "
               "what a server cannot take is refused before the run")


class ConstraintSection(QWidget):
    edited = Signal()  # the editor's

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.toggle = QToolButton(text="Constraint", checkable=True, autoRaise=True,
                                  toolButtonStyle=Qt.ToolButtonStyle.ToolButtonTextBesideIcon,
                                  arrowType=Qt.ArrowType.RightArrow, toolTip="What the text must match: a JSON "
                                  "schema, a regular expression, a grammar, or choices (the grammar stage)")
        self.note = QLabel("⚠", toolTip=REMOTE_NOTE, visible=False)
        self.note.setStyleSheet("color: #b26a00;")
        self.editor = ConstraintEditor()
        self.editor.setVisible(False)
        self.editor.edited.connect(self._retitle)
        self.editor.edited.connect(self.edited)
        self.toggle.toggled.connect(self._fold)
        head = QHBoxLayout()
        head.addWidget(self.toggle)
        head.addWidget(self.note)
        head.addStretch(1)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addLayout(head)
        box.addWidget(self.editor)

    def constraint(self) -> Constraint | None:
        return self.editor.constraint()

    def set_constraint(self, c: Constraint | None) -> None:
        self.editor.set_constraint(c)
        if c is not None:
            self.toggle.setChecked(True)
        self._retitle()

    def set_remote(self, remote: bool) -> None:
        self.note.setVisible(remote)

    def _fold(self, unfolded: bool) -> None:
        self.editor.setVisible(unfolded)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if unfolded else Qt.ArrowType.RightArrow)

    def _retitle(self) -> None:
        summary = self.editor.summary()
        self.toggle.setText(f"Constraint: {summary}" if summary else "Constraint")
