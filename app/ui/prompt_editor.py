"""The prompt editor: raw completion or chat (system + user/assistant turns), a live token count, and a view
of the prompt's token boundaries with ids on hover.

It is given the loaded model's tokenizer (pure CPU, never the model) to count and show tokens; counting is
debounced so typing stays smooth. Nothing typed is ever lost: switching modes keeps both texts.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.events import Message
from app.ui.token_view import TokenSpans

ROLES = ("user", "assistant")


class TokenBoundaries(TokenSpans):
    """Read-only: the prompt as its tokens, alternately shaded; hover shows the token id."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._ids: list[int] = []
        self._pieces: list[str] = []
        self._formats = []
        for c in (QColor(100, 149, 237, 70), QColor(255, 165, 0, 70)):
            f = QTextCharFormat()
            f.setBackground(c)
            self._formats.append(f)

    def set_tokens(self, ids: list[int], pieces: list[str]) -> None:
        self.clear_spans()
        self._ids, self._pieces = list(ids), list(pieces)
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        for i, piece in enumerate(pieces):
            self.insert_span(cursor, piece or "∅", self._formats[i % 2])
        cursor.endEditBlock()

    def span_tooltip(self, i: int) -> str:
        return f"token {i}: id <b>{self._ids[i]}</b> <code>{html.escape(repr(self._pieces[i]))}</code>"


class Turn(QWidget):
    removed = Signal(object)

    def __init__(self, role: str, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.role = QComboBox()
        self.role.addItems(ROLES)
        self.role.setCurrentText(role)
        self.text = QPlainTextEdit(text, placeholderText=f"{role} message")
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
        return Message(self.role.currentText(), self.text.toPlainText())


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
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(QLabel("System"))
        box.addWidget(self.system)
        box.addWidget(scroll, 1)
        box.addWidget(add, alignment=Qt.AlignmentFlag.AlignLeft)
        self.add_turn("user")

    def add_turn(self, role: str, text: str = "") -> Turn:
        turn = Turn(role, text)
        turn.removed.connect(self._remove)
        turn.text.textChanged.connect(self.changed)
        turn.role.currentIndexChanged.connect(self.changed)
        self.turns.append(turn)
        self._turn_box.addWidget(turn)
        self.changed.emit()
        return turn

    def _remove(self, turn: Turn) -> None:
        self.turns.remove(turn)
        turn.deleteLater()
        self.changed.emit()

    def messages(self) -> tuple[Message, ...]:
        system = self.system.toPlainText().strip()
        head = (Message("system", system),) if system else ()
        return head + tuple(t.message() for t in self.turns if t.text.toPlainText())


class PromptEditor(QWidget):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tokenizer = None
        self.completion = QPlainTextEdit(placeholderText="Type a prompt; the model continues it.")
        self.completion.textChanged.connect(self._edited)
        self.chat = ChatEditor()
        self.chat.changed.connect(self._edited)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.completion, "Completion")
        self.tabs.addTab(self.chat, "Chat")
        self.tabs.currentChanged.connect(self._edited)
        self.boundaries = TokenBoundaries()
        self.boundaries.hide()
        self.count = QLabel("", toolTip="Prompt length in the model's tokens (the chat template included)")
        self.count.setObjectName("token_count")
        self.show_tokens = QPushButton("Show tokens", checkable=True,
                                       toolTip="Show the prompt as the model sees it: token boundaries and ids")
        self.show_tokens.toggled.connect(self._toggle_tokens)
        row = QHBoxLayout()
        row.addWidget(self.count, 1)
        row.addWidget(self.show_tokens)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.tabs, 1)
        box.addWidget(self.boundaries, 1)
        box.addLayout(row)
        self._debounce = QTimer(self, singleShot=True, interval=150)
        self._debounce.timeout.connect(self.refresh_count)

    @property
    def chat_mode(self) -> bool:
        return self.tabs.currentIndex() == 1

    def set_tokenizer(self, tokenizer: object) -> None:
        self.tokenizer = tokenizer
        self.refresh_count()

    def prompt(self) -> str:
        return self.completion.toPlainText()

    def messages(self) -> tuple[Message, ...] | None:
        return self.chat.messages() if self.chat_mode else None

    def set_prompt(self, text: str) -> None:
        self.completion.setPlainText(text)

    def _edited(self) -> None:
        self._debounce.start()
        self.changed.emit()

    def model_text(self) -> tuple[list[int], str]:
        """The prompt as the model will see it (template applied), and its ids."""
        tok = self.tokenizer
        if not self.chat_mode:
            text = self.prompt()
            return tok.encode(text), text
        msgs = [{"role": m.role, "content": m.content} for m in self.chat.messages()]
        text = tok.apply_chat_template(msgs)
        return tok.encode(text, add_special_tokens=False), text

    def refresh_count(self) -> None:
        if self.tokenizer is None:
            self.count.setText("load a model to count tokens")
            return
        try:
            ids, _ = self.model_text()
        except ValueError as e:
            self.count.setText(str(e))
            return
        self.count.setText(f"{len(ids)} tokens")
        if self.show_tokens.isChecked():
            self.boundaries.set_tokens(ids, [self.tokenizer.token_text(i) for i in ids])

    def _toggle_tokens(self, on: bool) -> None:
        self.tabs.setVisible(not on)
        self.boundaries.setVisible(on)
        self.show_tokens.setText("Edit prompt" if on else "Show tokens")
        self.refresh_count()
