"""Prompt surprisal in the real window, on the real tiny torch model: with the toggle on, every prompt token is
shaded by the log-probability in the `Scored` record the model thread sent (nothing recomputed in the view),
hovering names it and the model's alternatives, edits re-score, stale answers are ignored."""

from __future__ import annotations

import html
import math
from dataclasses import replace

import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QMouseEvent, QTextCursor
from PySide6.QtWidgets import QApplication, QToolTip

from app.core.events import Request, Scored
from app.core.record.export import SHADES
from app.ui.formatting import format_logprob, format_prob, shown_piece, visible
from app.ui.main_window import MainWindow
from app.ui.run_view.surprisal_view import surprise_color, surprise_shade

RUN_TIMEOUT = 60_000
PROMPT = "Hello world, this is a test"


@pytest.fixture
def window(window):
    window.prompt.set_prompt(PROMPT)
    return window


def toggle_on(qtbot, w: MainWindow) -> Scored:
    with qtbot.waitSignal(w.playground.scored, timeout=RUN_TIMEOUT) as sig:
        w.prompt.show_surprisal.click()
    return sig.args[0]


def assert_drawn_from(w: MainWindow, ev: Scored) -> None:
    """Each span is the record's token, shaded by the record's log-probability for it."""
    view, tok = w.prompt.surprisal.text, w.playground.tokenizer
    assert view.score is ev.score
    assert view.span_count() == len(ev.score.ids) > 1
    for i, (tid, lp) in enumerate(zip(ev.score.ids, ev.score.logprobs.tolist(), strict=True)):
        assert view.span_text(i) == shown_piece(tok.token_text(tid))
        fmt = view.span_format(i)
        shade = surprise_shade(lp)
        if shade is None:
            assert i == 0 and math.isnan(lp) and fmt.background().style() == Qt.BrushStyle.NoBrush
        else:
            assert fmt.background().color() == surprise_color(shade / (SHADES - 1))


def test_toggling_on_shades_every_prompt_token_by_its_recorded_logprob(qtbot, window):
    ev = toggle_on(qtbot, window)
    assert window.prompt.surprisal.isVisible()
    assert ev.prompt_text == PROMPT and list(ev.score.ids) == window.playground.tokenizer.encode(PROMPT)
    assert_drawn_from(window, ev)
    assert "perplexity" in window.prompt.surprisal.status.text()


def test_unlikely_tokens_are_shaded_stronger_than_likely_ones():
    shades = [surprise_color(surprise_shade(math.log(p)) / (SHADES - 1)) for p in (1.0, 0.1, 0.01, 1e-4, 1e-9)]
    alphas = [c.alpha() for c in shades]
    assert alphas[0] == 0 and alphas == sorted(alphas) and alphas[-2] == alphas[-1]  # p <= 1e-4: full colour


@pytest.mark.qt_log_ignore("This plugin does not support raise")  # the offscreen platform, showing a tooltip
def test_hovering_a_token_shows_its_probability_rank_and_the_models_alternatives(qtbot, window):
    ev = toggle_on(qtbot, window)
    view, tok, s = window.prompt.surprisal.text, window.playground.tokenizer, ev.score
    i = 3
    cur = QTextCursor(view.document())
    cur.setPosition(view._starts[i])
    rect = view.cursorRect(cur)
    at = rect.topLeft() + QPoint(3, rect.height() // 2)
    move = QMouseEvent(QEvent.Type.MouseMove, QPointF(at), QPointF(view.viewport().mapToGlobal(at)),
                       Qt.MouseButton.NoButton, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(view.viewport(), move)  # handled now: no pointer, no timer, no machine load involved
    assert QToolTip.isVisible()
    tip = QToolTip.text()
    assert tip == view.span_tooltip(i)
    lp = float(s.logprobs[i])
    assert f"p = <b>{format_prob(math.exp(lp))}</b>" in tip and f"log p = {format_logprob(lp)}" in tip
    best, best_lp = int(s.top_ids[i][0]), float(s.top_logprobs[i][0])
    assert f"<code>{html.escape(visible(tok.token_text(best)))}</code> {format_prob(math.exp(best_lp))}" in tip
    top = s.top_ids[i].tolist()
    assert (f"rank <b>{top.index(s.ids[i]) + 1}</b>" in tip) if s.ids[i] in top else ("not among" in tip)
    assert "nothing precedes it" in view.span_tooltip(0)


def test_an_edit_rescores_once_after_typing_pauses_and_names_the_rank(qtbot, window):
    first = toggle_on(qtbot, window)
    tok, s = window.playground.tokenizer, first.score
    # End the prompt on the model's own favourite at that position: the new score must rank it first.
    i = len(s.ids) - 1
    candidates = ([*s.ids[:i], alt] for alt in s.top_ids[i].tolist())
    ids = next(c for c in candidates if tok.encode(tok.decode(c)) == c)  # one whose text tokenizes back to it
    asked: list[int] = []
    window.prompt.scoring.score_wanted.connect(lambda: asked.append(1))
    window.prompt.completion.clear()
    with qtbot.waitSignal(window.playground.scored, timeout=RUN_TIMEOUT) as sig:
        qtbot.keyClicks(window.prompt.completion, tok.decode(ids))
    assert len(asked) == 1  # one score for a burst of keystrokes
    ev = sig.args[0]
    assert list(ev.score.ids) == ids
    assert_drawn_from(window, ev)
    expected = 1 + s.top_ids[i].tolist().index(ids[-1])
    assert f"rank <b>{expected}</b>" in window.prompt.surprisal.text.span_tooltip(i)


def test_a_stale_score_is_ignored(qtbot, window):
    window.prompt.show_surprisal.click()  # asks for PROMPT's score ...
    window.prompt.set_prompt("import os")  # ... and the text changes before it is back
    with qtbot.waitSignal(window.playground.scored, timeout=RUN_TIMEOUT) as old:
        pass
    assert old.args[0].prompt_text == PROMPT
    assert window.prompt.surprisal.text.score is None  # not drawn: it is of the old text
    with qtbot.waitSignal(window.playground.scored, timeout=RUN_TIMEOUT) as new:
        pass
    assert new.args[0].prompt_text == "import os"
    assert_drawn_from(window, new.args[0])
    # An answer to a request this editor did not send (or no longer waits for) changes nothing either.
    with qtbot.waitSignal(window.playground.scored, timeout=RUN_TIMEOUT):
        window.playground.worker.score(Request(model=window.model_bar.spec(), prompt="import os"))
    assert window.prompt.surprisal.text.score is new.args[0].score


def test_chat_mode_scores_the_template_rendered_prompt(qtbot, window):
    window.prompt.tabs.setCurrentIndex(1)
    window.prompt.chat.turns[0].text.setPlainText("Hi there")
    ev = toggle_on(qtbot, window)
    tok = window.playground.tokenizer
    assert ev.prompt_text == "<|user|>Hi there\n<|assistant|>"
    assert list(ev.score.ids) == tok.encode(ev.prompt_text, add_special_tokens=False)
    assert_drawn_from(window, ev)
    assert window.prompt.surprisal.text.toPlainText() == "".join(shown_piece(tok.token_text(t)) for t in ev.score.ids)
    assert "".join(tok.token_text(t) for t in ev.score.ids) == ev.prompt_text


def test_toggling_off_removes_the_shading_and_a_late_answer_is_not_drawn(qtbot, window):
    toggle_on(qtbot, window)
    window.prompt.show_surprisal.click()
    view = window.prompt.surprisal.text
    assert not window.prompt.surprisal.isVisible() and view.score is None and view.span_count() == 0
    assert view.toPlainText() == ""
    window.prompt.show_surprisal.click()  # on, and off again before the answer is back
    window.prompt.show_surprisal.click()
    with qtbot.waitSignal(window.playground.scored, timeout=RUN_TIMEOUT):
        pass
    assert view.score is None and view.span_count() == 0


def test_a_score_waits_behind_a_running_generation_without_blocking_and_survives_stop(qtbot, window):
    window.sampler.editors["max_tokens"].setValue(100_000)
    assert window.playground.generate(replace(window.playground.make_request(), ignore_eos=True))
    qtbot.waitUntil(lambda: len(window.playground.steps) >= 3, timeout=RUN_TIMEOUT)
    window.prompt.show_surprisal.click()
    qtbot.wait(300)
    assert window.prompt.surprisal.text.score is None and "scoring" in window.prompt.surprisal.status.text()
    with qtbot.waitSignal(window.playground.scored, timeout=RUN_TIMEOUT) as sig:
        window.controls.stop_button.click()  # Stop cancels every queued job, the score too: the editor asks again
    assert_drawn_from(window, sig.args[0])
