"""The chat editor's Think box in the real window: shown for the built-in thinking model (its template reads
enable_thinking), hidden for a model without the switch; unchecked, the settings' `think` is off, the token count is
the template's empty think span longer, and a run answers at once; the settings' `think` shows in the box."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings

from app.core.models.arithmetic import EMPTY_THINK, prompt_text
from app.core.models.sources import BUILTIN_THINKING_NAME, ModelSpec
from app.ui.main_window import MainWindow
from tests.ui.conftest import RUN_TIMEOUT, WINDOW_BACKEND


@pytest.fixture
def thinking_window(qtbot, store: QSettings):
    w = MainWindow(settings=store, spec=ModelSpec(BUILTIN_THINKING_NAME, WINDOW_BACKEND))
    qtbot.addWidget(w)
    w.show()
    w.sampler.set_settings(w.editing.settings.with_(temperature=0.0, max_tokens=64))
    qtbot.waitUntil(lambda: w.playground.tokenizer is not None, timeout=RUN_TIMEOUT)
    yield w
    w.close()


def chat(qtbot, w: MainWindow, text: str) -> None:
    w.prompt.tabs.setCurrentIndex(1)
    w.prompt.chat.turns[0].text.setPlainText(text)
    qtbot.waitUntil(lambda: w.prompt.count.text().endswith("tokens"), timeout=RUN_TIMEOUT)


def counted(w: MainWindow) -> int:
    r = w.prompt.model_text()
    assert r is not None and r.error is None
    return len(r.ids)


def test_unchecked_the_template_writes_the_empty_span_and_the_run_answers_at_once(qtbot, thinking_window):
    w = thinking_window
    chat(qtbot, w, "478+385")
    box = w.prompt.chat.think
    qtbot.waitUntil(box.isVisible, timeout=RUN_TIMEOUT)
    assert box.isChecked() and w.editing.settings.think
    thinking = counted(w)
    box.setChecked(False)
    assert not w.editing.settings.think
    empty = len(w.playground.tokenizer.encode(EMPTY_THINK, add_special_tokens=False))
    qtbot.waitUntil(lambda: counted(w) == thinking + empty, timeout=RUN_TIMEOUT)  # the count follows the box
    with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT) as done:
        assert w.playground.generate(w.playground.make_request())
    trace = w.playground.session.get(done.args[0].run_id).trace
    assert trace.prompt_text == prompt_text("478+385", thinking=False)
    assert {st.span for st in trace.steps} == {"answer"} and trace.text.strip().isdigit()
    w.sampler.set_settings(w.editing.settings.with_(think=True))  # (a preset, a reopened session): shown
    assert box.isChecked()
    assert w.sampler.settings().think  # the sampler panel keeps what the box set


def test_a_model_without_the_switch_shows_no_think_box(qtbot, window):
    chat(qtbot, window, "Hello")
    assert window.prompt.chat.isVisible() and not window.prompt.chat.think.isVisible()
