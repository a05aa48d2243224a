"""The prompt editor: raw completion or chat (system + user/assistant turns), a live token count, a view
of the prompt's token boundaries with ids on hover, and its surprisal (each token shaded by its log-probability
under the model, below the editor while the toggle is on).

It is given the loaded model's tokenizer (pure CPU, never the model) to count and show tokens; counting is
debounced so typing stays smooth, and the prompt is rendered (chat template, then tokens) on a thread of its own:
a template that loops or crawls never hangs the window, and after `RENDER_NOTE_MS` the count says so. The surprisal
is its `scoring`'s (app/ui/panels/prompt_scoring.py), which asks the view-model for scores and never scores itself.
Nothing typed is ever lost: switching modes keeps both texts. Bound to the `EditingState`: an edit writes the prompt
there (text, messages, mode), and the editor shows whatever prompt the state holds; the chat's Think box (shown where
the model's template has a thinking switch) writes and shows the settings' `think`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.events import Message
from app.ui.charts.chart_host import LazyHost
from app.ui.formatting import token_count
from app.ui.panels.prompt_render import PromptRenderer, Rendered, TokenBoundaries
from app.ui.panels.prompt_scoring import PromptScoring
from app.ui.viewmodel.editing_state import EditingState, Prompt

if TYPE_CHECKING:
    from app.ui.panels.chat_editor import ChatEditor
    from app.ui.run_view.surprisal_view import SurprisalView
    from app.ui.viewmodel.playground import Playground

COUNT_MS = 150
RENDER_NOTE_MS = 1000  # then the count says the template is slow (the tokenizer stops it at its own limit)
COUNT_TIP = "Prompt length in the model's tokens (the chat template included)"
SERVER_COUNT = "no count: the server tokenizes"  # short: the label shares a row with two buttons in a 900 px window
SERVER_COUNT_TIP = "A model on a server tokenizes the prompt with its own tokenizer, which is not known here"


class PromptEditor(QWidget):
    unusable = Signal(str)  # why the prompt as it is cannot be generated from (no chat template…); "": it can

    def __init__(self, state: EditingState | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state if state is not None else EditingState(self)
        self._showing = False  # the state's prompt is being put into the fields: not an edit
        self.tokenizer = None
        self.server = False  # the loaded model is on a server: it tokenizes there
        self.completion = QPlainTextEdit(placeholderText="Type a prompt; the model continues it.")
        self.completion.textChanged.connect(self._edited)
        # hidden at start, so built when first shown or used (`chat`, `boundaries`, `surprisal` build them); the
        # Chat tab right after the first paint too, as its size counts in the tabs' minimum size
        self.tabs = QTabWidget()
        self._switch = False  # the loaded model's template has a thinking switch (the Think box is shown)
        self._chat = LazyHost(lambda: _chat_editor(self._edited, self.state, self._switch), after=self.tabs)
        self.tabs.addTab(self.completion, "Completion")
        self.tabs.addTab(self._chat, "Chat")
        self.tabs.currentChanged.connect(self._edited)
        self._boundaries = LazyHost(TokenBoundaries)
        self._boundaries.hide()
        self.count = QLabel("", toolTip=COUNT_TIP)
        self.count.setObjectName("token_count")
        # a long note (a slow template, a server) is cut at the column's edge, never widens the column
        self.count.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.show_tokens = QPushButton("Show tokens", checkable=True,
                                       toolTip="Show the prompt as the model sees it: token boundaries and ids")
        self.show_tokens.toggled.connect(self._toggle_tokens)
        self.scoring = PromptScoring(self)  # the prompt's surprisal: its toggle, its view, the scores asked for
        self.show_surprisal, self._surprisal = self.scoring.button, self.scoring.host
        self.split = _lay_out(self)
        self._debounce = QTimer(self, singleShot=True, interval=COUNT_MS)
        self._debounce.timeout.connect(self.refresh_count)
        self.renderer = PromptRenderer(self)
        self.renderer.rendered.connect(self._rendered)
        self._slow = QTimer(self, singleShot=True, interval=RENDER_NOTE_MS)
        self._slow.timeout.connect(lambda: self.count.setText(
            f"the chat template is still rendering after {RENDER_NOTE_MS / 1000:g} s: no token count"))
        self.state.prompt_changed.connect(self._show)
        self.state.settings_changed.connect(self._debounce.start)  # (the Think box: another render; else cached)
        self._show(self.state.prompt)

    @property
    def chat(self) -> ChatEditor:
        """The Chat tab's editor (built now if it was not yet)."""
        return self._chat.widget

    @property
    def boundaries(self) -> TokenBoundaries:
        """The prompt's tokens, shown instead of the tabs by Show tokens (built now if it was not yet)."""
        return self._boundaries.widget

    @property
    def surprisal(self) -> SurprisalView:
        """The prompt shaded by its surprisal, below the editor while Surprisal is on (built now if it was not yet)."""
        return self.scoring.view

    def _chat_messages(self) -> tuple[Message, ...]:
        """The chat's messages; none while it is not built (a new chat editor holds none)."""
        return self.chat.messages() if self._chat.is_built else ()

    def bind(self, pg: Playground) -> None:
        """The loaded model's tokenizer; while Surprisal is on, scores asked of the view-model and drawn when back."""
        pg.loaded.connect(lambda info: self.set_tokenizer(pg.tokenizer, server=info.backend == "remote"))
        self.scoring.bind(pg)

    @property
    def chat_mode(self) -> bool:
        return self.tabs.currentIndex() == 1

    def set_tokenizer(self, tokenizer: object, server: bool = False) -> None:
        """The loaded model's tokenizer; None with `server`: the model is on a server, whose tokenizer is not
        known here (no count, no surprisal: say so, rather than "load a model"; nor whether it has a thinking
        switch: the Think box is shown, and sent as vLLM and llama.cpp take it)."""
        self.tokenizer, self.server = tokenizer, server
        _show_switch(self, server)
        self.count.setToolTip(SERVER_COUNT_TIP if server else COUNT_TIP)
        self.refresh_count()
        self.scoring.request()  # another model: another score

    def prompt(self) -> str:
        return self.completion.toPlainText()

    def field(self) -> QPlainTextEdit:
        """The text field with focus, else the one in view (the last chat message): Edit → Undo acts on it."""
        focused = self.focusWidget()
        if isinstance(focused, QPlainTextEdit) and focused.isVisible():
            return focused
        return self.chat.turns[-1].text if self.chat_mode and self.chat.turns else self.completion

    def messages(self) -> tuple[Message, ...] | None:
        return self._chat_messages() if self.chat_mode else None

    def set_prompt(self, text: str) -> None:
        self.completion.setPlainText(text)

    def shown(self) -> Prompt:
        """The prompt as the fields hold it."""
        return Prompt(self.prompt(), self._chat_messages(), self.chat_mode)

    def _show(self, prompt: Prompt) -> None:
        """Put the state's prompt into the fields (what they then hold goes back: the chat keeps one turn)."""
        if prompt == self.shown():
            return  # the fields' own edit coming back: leave them (and the cursor) be
        self._showing = True
        try:
            if prompt.text != self.prompt():
                self.completion.setPlainText(prompt.text)
            if prompt.messages != self._chat_messages():
                self.chat.set_messages(prompt.messages)
            self.tabs.setCurrentIndex(1 if prompt.chat else 0)
        finally:
            self._showing = False
        self.state.set_prompt(self.shown())

    def _edited(self) -> None:
        self._debounce.start()
        self.scoring.edited()
        if not self._showing:
            self.state.set_prompt(self.shown())

    def model_text(self) -> Rendered | None:
        """The prompt as the model will see it (template applied) and its ids, if rendered; None while it renders
        (`_rendered` follows)."""
        return self.renderer.render(self.tokenizer, self.prompt(), self.messages(), self.state.settings.think)

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
        now = (self.tokenizer, self.prompt(), self.messages(), self.state.settings.think)
        if self.tokenizer is None or r.key != now:
            return
        self._show_count(r)
        self.scoring.rendered()

    def _show_count(self, r: Rendered) -> None:
        self._slow.stop()
        _show_switch(self, r.switch)
        self.unusable.emit(r.error or "")
        if r.error is not None:
            self.count.setText(r.error)
            self.count.setToolTip(r.error)  # a long one is cut at the column's edge
            return
        self.count.setToolTip(SERVER_COUNT_TIP if self.server else COUNT_TIP)
        self.count.setText(token_count(len(r.ids), prompt_empty=self.messages() is None and not self.prompt()))
        if self.show_tokens.isChecked():
            self.boundaries.set_tokens(list(r.ids), [self.tokenizer.token_text(i) for i in r.ids])

    def _toggle_tokens(self, on: bool) -> None:
        self.tabs.setVisible(not on)
        self._boundaries.setVisible(on)
        self.show_tokens.setText("Edit prompt" if on else "Show tokens")
        self.refresh_count()


def _chat_editor(edited: Callable[[], object], state: EditingState, switch: bool) -> ChatEditor:
    """The Chat tab's editor, built at its first use; an edit in it calls `edited`; its Think box bound to the
    settings' `think`, shown where the model's template has the switch."""
    from app.ui.panels.chat_editor import ChatEditor

    chat = ChatEditor()
    chat.changed.connect(edited)
    chat.bind_think(state, switch)
    return chat


def _show_switch(editor: PromptEditor, switch: bool) -> None:
    """Whether the model's template has a thinking switch: the chat's Think box shown or hidden (once it is built)."""
    editor._switch = switch
    if editor._chat.is_built:
        editor.chat.set_think(editor.state.settings.think, switch)


def _lay_out(editor: PromptEditor) -> QSplitter:
    """The tabs (or the tokens instead) over the surprisal, in a splitter; the count and the two toggles in a row
    under them."""
    top = QWidget()
    tb = QVBoxLayout(top)
    tb.setContentsMargins(0, 0, 0, 0)
    tb.addWidget(editor.tabs, 1)
    tb.addWidget(editor._boundaries, 1)
    split = QSplitter(Qt.Orientation.Vertical, childrenCollapsible=False)
    split.addWidget(top)
    split.addWidget(editor.scoring.host)
    row = QHBoxLayout()
    row.addWidget(editor.count, 1)
    row.addWidget(editor.show_surprisal)
    row.addWidget(editor.show_tokens)
    box = QVBoxLayout(editor)
    box.setContentsMargins(0, 0, 0, 0)
    box.addWidget(split, 1)
    box.addLayout(row)
    return split
