"""The prompt's surprisal, below the prompt editor while the Surprisal toggle is on: each token shaded by its
log-probability under the model, given the tokens before it. It never scores a prompt itself: it asks for a score
(`score_wanted`, debounced after an edit) and draws the `Scored` record handed back if it is still of the prompt
shown, with token healing's notice when the prompt ends at a boundary the model rarely saw (Heal: `Healer`); one
score is in flight at a time (edits during a long run pile nothing up), one failed or cancelled is asked again. It
reads the prompt as the editor renders it (`PromptEditor.model_text`); its view is built when first shown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QPushButton

from app.ui.charts.chart_host import LazyHost
from app.ui.viewmodel.healing import Healer

if TYPE_CHECKING:
    from app.core.events import Scored
    from app.ui.panels.prompt_editor import PromptEditor
    from app.ui.run_view.surprisal_view import SurprisalView
    from app.ui.viewmodel.playground import Playground

SCORE_MS = 400  # a score is a forward over the whole prompt: wait for a pause in typing
SERVER_SCORE = "A model on a server cannot score the prompt here."


class PromptScoring(QObject):
    score_wanted = Signal()  # Surprisal is on and the prompt shown has no score yet: build and send a request

    def __init__(self, editor: PromptEditor) -> None:
        super().__init__(editor)
        self._editor = editor
        self.host = LazyHost(self._new_view)  # hidden at start: built when first shown
        self.healer: Healer | None = None  # the heal verb, once bound to the view-model
        self.host.hide()
        self.button = QPushButton("Surprisal", checkable=True,
                                  toolTip="Shade the prompt's tokens by how unlikely the model finds each one, given "
                                  "the tokens before it; hover a token for its probability and the model's "
                                  "alternatives")
        self.button.toggled.connect(self.toggle)
        self._after_render = False  # a score waits for the prompt's render
        self._debounce = QTimer(self, singleShot=True, interval=SCORE_MS)
        self._debounce.timeout.connect(self.request)
        self._sent: int | None = None  # the latest score request: only its answer is drawn
        self._in_flight = False
        self._rescore = False  # edited while a score was in flight: ask again when it is back

    @property
    def view(self) -> SurprisalView:
        """The prompt shaded by its surprisal (built now if it was not yet)."""
        return self.host.widget

    def bind(self, pg: Playground) -> None:
        """Scores asked of the view-model, and drawn when back; a failed request is not waited for."""
        self.score_wanted.connect(lambda: self.expect(pg.score_edited()))
        self.healer = Healer(pg, self)
        self.healer.compared.connect(lambda typed, healed, text: self.view.show_healed(typed, healed, text))
        pg.scored.connect(self.show)
        pg.failed.connect(self.failed)
        pg.opt_in_needed.connect(self.failed)

    def toggle(self, on: bool) -> None:
        self.host.setVisible(on)
        self._debounce.stop()
        self._rescore = False
        if on:
            split = self._editor.split
            total = sum(split.sizes())
            split.setSizes([total // 2, total - total // 2])  # room for the shaded text, as for the editor
            self.request()
        else:  # an answer still on its way is of no use now
            self._sent, self._in_flight = None, False
            if self.host.is_built:
                self.view.clear()

    def edited(self) -> None:
        """The prompt was edited: its score is asked for after a pause in typing."""
        if self.button.isChecked():
            self._debounce.start()
            self.view.set_status("· edited…")

    def rendered(self) -> None:
        """The prompt's render is back: a score that waited for it is asked for now."""
        if self._after_render:
            self._after_render = False
            self.request()

    def request(self) -> None:
        """Ask for a score of the prompt as it is now (at most one in flight; a later edit asks again)."""
        if not self.button.isChecked():
            return
        editor = self._editor
        if editor.tokenizer is None:
            self.view.clear(SERVER_SCORE if editor.server else "Load a model to score the prompt.")
            return
        r = editor.model_text()
        if r is None:
            self._after_render = True
            return
        if r.error is not None:  # (the token count beneath says the same)
            self.view.clear(f"Nothing to score: {r.error}.")
            return
        if not r.ids or not r.text:
            self.view.clear("Type a prompt to see how surprising the model finds each of its tokens.")
            return
        self.view.scoring()
        if self._in_flight:
            self._rescore = True
            return
        self.score_wanted.emit()

    def expect(self, request_id: int) -> None:
        """The score request just sent for the prompt shown; answers to any earlier one are stale."""
        self._sent, self._in_flight, self._rescore = request_id, True, False

    def show(self, ev: Scored) -> None:
        """Draw `ev` if it answers the latest request and is of the prompt shown now; otherwise ignore it."""
        if ev.request_id != self._sent:
            return  # an older request's answer, or one sent by someone else
        self._in_flight = False
        if self._is_current(ev):
            self.view.show_score(ev.score, self._editor.tokenizer.token_text)
            self._show_boundary(ev)
        if self._rescore:
            self._rescore = False
            self.request()

    def failed(self, *_message: str) -> None:
        """A request failed (the window shows why): do not wait for a score that may never come."""
        if self._in_flight:
            self._in_flight = False
            self.view.set_status("")
            if self._rescore:
                self._rescore = False
                self.request()

    def cancelled(self) -> None:
        """Stop cancels every queued job, a score too: ask again (the toggle is still on)."""
        if self._in_flight:
            self._in_flight = self._rescore = False
            self.request()

    def _is_current(self, ev: Scored) -> bool:
        if self._editor.tokenizer is None or self._debounce.isActive():
            return False  # edited since: the score of the new text is on its way
        r = self._editor.model_text()
        return r is not None and r.error is None and r.text == ev.prompt_text and r.ids == ev.score.ids


    def _show_boundary(self, ev: Scored) -> None:
        """Token healing's notice: the prompt's last token as its surprisal record sees it (the core's reading)."""
        from app.core.decoding.healing import boundary, text_of  # (loaded with the score's record: after a run)

        self.view.show_boundary(boundary(ev.score, text_of(self._editor.tokenizer)), not self._editor.chat_mode)

    def _new_view(self) -> SurprisalView:
        from app.ui.run_view.surprisal_view import SurprisalView

        view = SurprisalView()
        view.heal_requested.connect(lambda: self.healer is not None and self.healer.heal())
        return view
