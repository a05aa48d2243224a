"""The chat editor: a system prompt and user / assistant turns, read as `Message`s (empty ones left out) and set
from them. A turn given a text keeps it byte for byte until it is edited. Its Think box (shown only for a template
with a thinking switch, Qwen3's enable_thinking) is the settings' `think`: the prompt editor binds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.events import Message

if TYPE_CHECKING:
    from app.core.settings import SamplerSettings
    from app.ui.viewmodel.editing_state import EditingState

ROLES = ("user", "assistant")
THINK_TIP = ("The model thinks before it answers (its chat template's enable_thinking). Off: the template writes an "
             "empty think span and the model answers at once; a span it opens anyway is closed at once. A model on "
             "a server: sent to vLLM and llama.cpp as chat_template_kwargs (llama.cpp: reasoning_budget 0 too)")


class Turn(QWidget):
    removed = Signal(object)

    def __init__(self, role: str, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.role = QComboBox()
        self.role.addItems(ROLES)
        self.role.setCurrentText(role)
        self.text = QPlainTextEdit(text, placeholderText=f"{role} message")
        # The editor shows "\r" and U+2029 as line breaks and U+00A0 as a space: until it is edited, the message
        # is the text it was given, byte for byte (a model's reply added to the chat).
        self._given, self._shown = text, self.text.toPlainText()
        self.text.setFixedHeight(self.fontMetrics().lineSpacing() * 4 + 12)
        drop = QToolButton(text="✕", toolTip="Remove this message", autoRaise=True)
        drop.clicked.connect(lambda: self.removed.emit(self))
        head = QHBoxLayout()
        head.addWidget(self.role)
        head.addStretch(1)
        head.addWidget(drop)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 2, 0, 2)
        box.addLayout(head)
        box.addWidget(self.text)

    def message(self) -> Message:
        shown = self.text.toPlainText()
        return Message(self.role.currentText(), self._given if shown == self._shown else shown)


class ChatEditor(QWidget):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.system = QPlainTextEdit(placeholderText="System prompt (optional)")
        self.system.setFixedHeight(self.fontMetrics().lineSpacing() * 3 + 12)
        self.system.textChanged.connect(self.changed)
        self.turns: list[Turn] = []
        self._turn_box = QVBoxLayout()
        self._turn_box.setContentsMargins(0, 0, 0, 0)
        inner = QWidget()
        inner_box = QVBoxLayout(inner)
        inner_box.setContentsMargins(0, 0, 0, 0)
        inner_box.addLayout(self._turn_box)
        inner_box.addStretch(1)
        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(inner)
        add = QPushButton("+ Message", toolTip="Add a user or assistant message")
        add.clicked.connect(lambda: self.add_turn("user" if not self.turns or
                                                  self.turns[-1].role.currentText() == "assistant" else "assistant"))
        self.think = QCheckBox("Think", checked=True, toolTip=THINK_TIP, visible=False)
        self.think.setObjectName("think")
        foot = QHBoxLayout()
        foot.addWidget(add)
        foot.addStretch(1)
        foot.addWidget(self.think)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(QLabel("System"))
        box.addWidget(self.system)
        box.addWidget(scroll, 1)
        box.addLayout(foot)
        self.add_turn("user")

    def bind_think(self, state: EditingState, switch: bool) -> None:
        """The Think box writes and shows `state`'s settings' `think`; shown only where `switch` (the template has
        one)."""
        self._state = state
        self.set_think(state.settings.think, switch)
        self.think.toggled.connect(self._think_toggled)
        state.settings_changed.connect(self._settings_changed)

    def _think_toggled(self, on: bool) -> None:
        self._state.set_settings(self._state.settings.with_(think=on))

    def _settings_changed(self, settings: SamplerSettings) -> None:
        if settings.think != self.think.isChecked():
            self.set_think(settings.think)

    def set_think(self, on: bool, switch: bool | None = None) -> None:
        """Check the Think box as `on` (no `toggled` sent); `switch`: whether the model's template has the switch
        (the box is shown only then; None: as it was)."""
        self.think.blockSignals(True)
        self.think.setChecked(on)
        self.think.blockSignals(False)
        if switch is not None:
            self.think.setVisible(switch)

    def add_turn(self, role: str, text: str = "") -> Turn:
        turn = Turn(role, text)
        turn.removed.connect(self._remove)
        turn.text.textChanged.connect(self.changed)
        turn.role.currentIndexChanged.connect(self.changed)
        self.turns.append(turn)
        self._turn_box.addWidget(turn)
        self.changed.emit()
        return turn

    def add_reply(self, text: str) -> None:
        """Append `text` as the assistant's message, then a new user message to type in."""
        self.add_turn("assistant", text)
        self.add_turn("user").text.setFocus()

    def _remove(self, turn: Turn) -> None:
        self.turns.remove(turn)
        turn.deleteLater()
        self.changed.emit()

    def set_messages(self, messages: tuple[Message, ...]) -> None:
        """Hold `messages`: the system one in its box, the others as turns (at least one)."""
        self.system.setPlainText(next((m.content for m in messages if m.role == "system"), ""))
        for turn in list(self.turns):
            turn.removed.emit(turn)
        for m in messages:
            if m.role != "system":
                self.add_turn(m.role, m.content)
        if not self.turns:
            self.add_turn("user")

    def messages(self) -> tuple[Message, ...]:
        system = self.system.toPlainText().strip()
        head = (Message("system", system),) if system else ()
        return head + tuple(m for m in (t.message() for t in self.turns) if m.content)
