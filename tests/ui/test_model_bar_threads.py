"""The model bar's threads control: auto leaves the count to the backend's rule; a number travels in the load
options to the model thread, which loads with it."""

from __future__ import annotations

from app.ui.model_bar import ModelBar
from tests.ui.conftest import RUN_TIMEOUT


def test_auto_threads_leave_the_count_to_the_rule(qtbot):
    bar = ModelBar()
    qtbot.addWidget(bar)
    assert bar.threads.text() == "threads: auto"
    assert bar.spec().options.threads is None
    bar.threads.setValue(3)
    assert bar.spec().options.threads == 3


def test_a_thread_count_chosen_in_the_bar_reaches_the_loaded_model(window, qtbot):
    assert window.playground.info.threads == 1  # auto: the tiny model is small
    window.model_bar.threads.setValue(2)
    window.model_bar.load_button.click()
    qtbot.waitUntil(lambda: window.playground.info is not None and window.playground.info.threads == 2,
                    timeout=RUN_TIMEOUT)
