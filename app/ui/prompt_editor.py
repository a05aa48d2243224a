"""The prompt editor: raw completion or chat (system + user/assistant turns), a live token count, a view
of the prompt's token boundaries with ids on hover, and its surprisal (each token shaded by its log-probability
under the model, below the editor while the toggle is on).

It is given the loaded model's tokenizer (pure CPU, never the model) to count and show tokens; counting is
debounced so typing stays smooth, and the prompt is rendered (chat template, then tokens) on a thread of its own:
a template that loops or crawls never hangs the window, and after `RENDER_NOTE_MS` the count says so.
It never scores a prompt itself: while Surprisal is on it asks for a score
(`score_wanted`, debounced) and draws the `Scored` record it is handed back, if that is still of the text shown;
one score is in flight at a time, so edits during a long run do not pile work up behind it. Nothing typed is
ever lost: switching modes keeps both texts.
"""

from __future__ import annotations

import contextlib
import html
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.events import Message, Scored
from app.core.generation import prompt_tokens
from app.ui.token_view import SurprisalView, TokenSpans

ROLES = ("user", "assistant")
COUNT_MS = 150
SCORE_MS = 400  # a score is a forward over the whole prompt: wait for a pause in typing
RENDER_WAIT_S = 0.05  # a prompt rendered within this is shown at once; a slower one when its thread is done
RENDER_NOTE_MS = 1000  # then the count says the template is slow (the tokenizer stops it at its own limit)
COUNT_TIP = "Prompt length in the model's tokens (the chat template included)"
SERVER_COUNT = "no count: the server tokenizes"  # short: the label shares a row with two buttons in a 900 px window
SERVER_COUNT_TIP = "A model on a server tokenizes the prompt with its own tokenizer, which is not known here"
SERVER_SCORE = "A model on a server cannot score the prompt here."


@dataclass(frozen=True)
class Rendered:
    """The prompt as the model sees it, for one (tokenizer, prompt, messages) key: its ids and text, or why not."""

    key: tuple[Any, ...]
    ids: tuple[int, ...] = ()
    text: str = ""
    error: str | None = None


class PromptRenderer(QObject):
    """Renders the prompt through the chat template and the tokenizer on one thread of its own, the latest
    request only (one that a newer request has replaced is skipped); `rendered` brings each result back."""

    rendered = Signal(object)  # Rendered, on the UI thread

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prompt-render")
        self._latest: tuple[Any, ...] | None = None
        self._future: Future | None = None

    def render(self, tokenizer: Any, prompt: str, messages: tuple[Message, ...] | None) -> Rendered | None:
        """The render of these inputs if it is ready within `RENDER_WAIT_S`; else None, and `rendered` brings it."""
        key = (tokenizer, prompt, messages)
        if key != self._latest or self._future is None:
            self._latest = key
            self._future = self._pool.submit(self._run, key)
        try:
            return self._future.result(RENDER_WAIT_S)
        except FutureTimeout:
            return None

    def _run(self, key: tuple[Any, ...]) -> Rendered | None:
        if key != self._latest:
            return None  # replaced while it waited
        try:
            ids, text = prompt_tokens(*key)
            result = Rendered(key, tuple(ids), text)
        except ValueError as e:
            result = Rendered(key, error=str(e))
        with contextlib.suppress(RuntimeError):  # the editor is gone (the window closed)
            self.rendered.emit(result)
        return result


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
        return head + tuple(m for m in (t.message() for t in self.turns) if m.content)


class PromptEditor(QWidget):
    changed = Signal()
    score_wanted = Signal()  # Surprisal is on and the prompt shown has no score yet: build and send a request
    unusable = Signal(str)  # why the prompt as it is cannot be generated from (no chat template…); "": it can

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tokenizer = None
        self.server = False  # the loaded model is on a server: it tokenizes there
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
        self.surprisal = SurprisalView()
        self.surprisal.hide()
        self.count = QLabel("", toolTip=COUNT_TIP)
        self.count.setObjectName("token_count")
        # a long note (a slow template, a server) is cut at the column's edge, never widens the column
        self.count.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.show_tokens = QPushButton("Show tokens", checkable=True,
                                       toolTip="Show the prompt as the model sees it: token boundaries and ids")
        self.show_tokens.toggled.connect(self._toggle_tokens)
        self.show_surprisal = QPushButton("Surprisal", checkable=True,
                                          toolTip="Shade the prompt's tokens by how unlikely the model finds each "
                                          "one, given the tokens before it; hover a token for its probability "
                                          "and the model's alternatives")
        self.show_surprisal.toggled.connect(self._toggle_surprisal)
        self._build_layout()
        self._debounce = QTimer(self, singleShot=True, interval=COUNT_MS)
        self._debounce.timeout.connect(self.refresh_count)
        self.renderer = PromptRenderer(self)
        self.renderer.rendered.connect(self._rendered)
        self._slow = QTimer(self, singleShot=True, interval=RENDER_NOTE_MS)
        self._slow.timeout.connect(lambda: self.count.setText(
            f"the chat template is still rendering after {RENDER_NOTE_MS / 1000:g} s: no token count"))
        self._score_after_render = False  # a score waits for the prompt's render
        self._score_debounce = QTimer(self, singleShot=True, interval=SCORE_MS)
        self._score_debounce.timeout.connect(self.request_score)
        self._score_sent: int | None = None  # the latest score request: only its answer is drawn
        self._score_in_flight = False
        self._rescore = False  # edited while a score was in flight: ask again when it is back

    def _build_layout(self) -> None:
        top = QWidget()
        tb = QVBoxLayout(top)
        tb.setContentsMargins(0, 0, 0, 0)
        tb.addWidget(self.tabs, 1)
        tb.addWidget(self.boundaries, 1)
        self.split = QSplitter(Qt.Orientation.Vertical, childrenCollapsible=False)
        self.split.addWidget(top)
        self.split.addWidget(self.surprisal)
        row = QHBoxLayout()
        row.addWidget(self.count, 1)
        row.addWidget(self.show_surprisal)
        row.addWidget(self.show_tokens)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.split, 1)
        box.addLayout(row)

    @property
    def chat_mode(self) -> bool:
        return self.tabs.currentIndex() == 1

    def set_tokenizer(self, tokenizer: object, server: bool = False) -> None:
        """The loaded model's tokenizer; None with `server`: the model is on a server, whose tokenizer is not
        known here (no count, no surprisal: say so, rather than "load a model")."""
        self.tokenizer, self.server = tokenizer, server
        self.count.setToolTip(SERVER_COUNT_TIP if server else COUNT_TIP)
        self.refresh_count()
        self.request_score()  # another model: another score

    def prompt(self) -> str:
        return self.completion.toPlainText()

    def field(self) -> QPlainTextEdit:
        """The text field with focus, else the one in view (the last chat message): Edit → Undo acts on it."""
        focused = self.focusWidget()
        if isinstance(focused, QPlainTextEdit) and focused.isVisible():
            return focused
        return self.chat.turns[-1].text if self.chat_mode and self.chat.turns else self.completion

    def messages(self) -> tuple[Message, ...] | None:
        return self.chat.messages() if self.chat_mode else None

    def set_prompt(self, text: str) -> None:
        self.completion.setPlainText(text)

    def _edited(self) -> None:
        self._debounce.start()
        if self.show_surprisal.isChecked():
            self._score_debounce.start()
            self.surprisal.set_status("· edited…")
        self.changed.emit()

    def model_text(self) -> Rendered | None:
        """The prompt as the model will see it (template applied) and its ids, if rendered; None while it renders
        (`_rendered` follows)."""
        return self.renderer.render(self.tokenizer, self.prompt(), self.messages())

    def refresh_count(self) -> None:
        if self.tokenizer is None:
            self.count.setText(SERVER_COUNT if self.server else "load a model to count tokens")
            self.unusable.emit("")
            return
        r = self.model_text()
        if r is None:
            if not self._slow.isActive():
                self._slow.start()
            return
        self._show_count(r)

    def _rendered(self, r: Rendered) -> None:
        """A render from the thread: shown if it is of the prompt as it is now."""
        if self.tokenizer is None or r.key != (self.tokenizer, self.prompt(), self.messages()):
            return
        self._show_count(r)
        if self._score_after_render:
            self._score_after_render = False
            self.request_score()

    def _show_count(self, r: Rendered) -> None:
        self._slow.stop()
        self.unusable.emit(r.error or "")
        if r.error is not None:
            self.count.setText(r.error)
            self.count.setToolTip(r.error)  # a long one is cut at the column's edge
            return
        self.count.setToolTip(SERVER_COUNT_TIP if self.server else COUNT_TIP)
        self.count.setText(f"{len(r.ids)} tokens")
        if self.show_tokens.isChecked():
            self.boundaries.set_tokens(list(r.ids), [self.tokenizer.token_text(i) for i in r.ids])

    def _toggle_tokens(self, on: bool) -> None:
        self.tabs.setVisible(not on)
        self.boundaries.setVisible(on)
        self.show_tokens.setText("Edit prompt" if on else "Show tokens")
        self.refresh_count()

    # surprisal ----------------------------------------------------------------------------------------------
    def _toggle_surprisal(self, on: bool) -> None:
        self.surprisal.setVisible(on)
        self._score_debounce.stop()
        self._rescore = False
        if on:
            total = sum(self.split.sizes())
            self.split.setSizes([total // 2, total - total // 2])  # room for the shaded text, as for the editor
            self.request_score()
        else:  # an answer still on its way is of no use now
            self._score_sent, self._score_in_flight = None, False
            self.surprisal.clear()

    def request_score(self) -> None:
        """Ask for a score of the prompt as it is now (at most one in flight; a later edit asks again)."""
        if not self.show_surprisal.isChecked():
            return
        if self.tokenizer is None:
            self.surprisal.clear(SERVER_SCORE if self.server else "Load a model to score the prompt.")
            return
        r = self.model_text()
        if r is None:
            self._score_after_render = True
            return
        if r.error is not None:  # (the token count beneath says the same)
            self.surprisal.clear(f"Nothing to score: {r.error}.")
            return
        if not r.ids or not r.text:
            self.surprisal.clear("Type a prompt to see how surprising the model finds each of its tokens.")
            return
        self.surprisal.scoring()
        if self._score_in_flight:
            self._rescore = True
            return
        self.score_wanted.emit()

    def expect_score(self, request_id: int) -> None:
        """The score request just sent for the prompt shown; answers to any earlier one are stale."""
        self._score_sent, self._score_in_flight, self._rescore = request_id, True, False

    def show_score(self, ev: Scored) -> None:
        """Draw `ev` if it answers the latest request and is of the prompt shown now; otherwise ignore it."""
        if ev.request_id != self._score_sent:
            return  # an older request's answer, or one sent by someone else
        self._score_in_flight = False
        if self._is_current(ev):
            self.surprisal.show_score(ev.score, self.tokenizer.token_text)
        if self._rescore:
            self._rescore = False
            self.request_score()

    def score_failed(self, *_message: str) -> None:
        """A request failed (the window shows why): do not wait for a score that may never come."""
        if self._score_in_flight:
            self._score_in_flight = False
            self.surprisal.set_status("")
            if self._rescore:
                self._rescore = False
                self.request_score()

    def score_cancelled(self) -> None:
        """Stop cancels every queued job, a score too: ask again (the toggle is still on)."""
        if self._score_in_flight:
            self._score_in_flight = self._rescore = False
            self.request_score()

    def _is_current(self, ev: Scored) -> bool:
        if self.tokenizer is None or self._score_debounce.isActive():
            return False  # edited since: the score of the new text is on its way
        r = self.model_text()
        return r is not None and r.error is None and r.text == ev.prompt_text and r.ids == ev.score.ids
