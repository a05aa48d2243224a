"""The model bar's threads control: auto leaves the count to the backend's rule; a number travels in the load
options to the model thread, which loads with it."""

from __future__ import annotations

import pytest

from app.ui.panels.model_bar import ModelBar
from backends import installed
from tests.ui.conftest import RUN_TIMEOUT, needs_torch


def test_auto_threads_leave_the_count_to_the_rule(qtbot):
    bar = ModelBar()
    qtbot.addWidget(bar)
    assert bar.threads.text() == "threads: auto"
    assert bar.spec().options.threads is None
    bar.threads.setValue(3)
    assert bar.spec().options.threads == 3


@needs_torch  # the window's model is torch's: the threads box is there
def test_a_thread_count_chosen_in_the_bar_reaches_the_loaded_model(window, qtbot):
    assert window.playground.info.threads == 1  # auto: the tiny model is small
    window.model_bar.threads.setValue(2)
    window.model_bar.load_button.click()
    qtbot.waitUntil(lambda: window.playground.info is not None and window.playground.info.threads == 2,
                    timeout=RUN_TIMEOUT)


def test_the_bar_shows_threads_for_torch_and_quantize_for_mlx(qtbot):
    if not (installed("mlx") and installed("torch")):
        pytest.skip("needs both backends installed")
    bar = ModelBar()
    qtbot.addWidget(bar)
    bar.set_backend("torch")
    assert bar.threads.isVisibleTo(bar) and not bar.quantize.isVisibleTo(bar)
    bar.set_backend("mlx")
    assert bar.quantize.isVisibleTo(bar) and not bar.threads.isVisibleTo(bar)


@needs_torch
def test_with_the_threads_box_a_900_px_window_stays_900_wide(window, qtbot):
    window.resize(900, 600)
    qtbot.waitUntil(lambda: window.width() == 900, timeout=5_000)
    assert window.model_bar.threads.isVisible()
