"""Run ▸ Steering… in the real window, on the tiny model through the model thread: a vector made from the pairs table,
a steered run and its unsteered twin (same seed), and the dock drawing their records and nothing else: the KL curve
at each step's recorded KL, a mark at each step whose draw left the twin's and a line at the first, the moved tokens
of the step clicked, both texts; a file that is not a vector is one line in the status."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from app.core.control_vectors import read_vector
from app.ui.formatting import format_prob, visible
from app.ui.main_window import MainWindow
from tests.ui.conftest import needs_torch

RUN_TIMEOUT = 60_000


def steering_view(qtbot, w: MainWindow):
    w.tools["steering"].trigger()
    view = w.tools["steering"].view
    with qtbot.waitSignal(view.made, timeout=RUN_TIMEOUT) as made:
        assert view.make()
    return view, made.args[0]


@needs_torch
def test_a_vector_from_the_pairs_then_a_steered_run_beside_its_twin(qtbot, window, tmp_path: Path):
    window.prompt.set_prompt("The day was")
    window.sampler.editors["max_tokens"].setValue(10)
    view, vector = steering_view(qtbot, window)
    assert vector.layers == (1,) and vector.pairs == 3 and view.layers.text() == "1"
    assert read_vector(view.path).layers == (1,)  # made into a file the run reads
    view.strength.setValue(6.0)
    assert f"{vector.relative(1, 6.0):.2g}× the residual stream's norm" in view.relative.text()
    with qtbot.waitSignal(view.ran, timeout=RUN_TIMEOUT) as ran:
        assert view.run()
    steered, twin = ran.args
    assert steered.settings.steering.strength == 6.0 and twin.settings.steering is None
    assert steered.seed == twin.seed and len(steered.steps) == 10
    x, y = view.chart.curve.getData()
    assert np.array_equal(x, [st.step for st in steered.steps])
    assert np.array_equal(y, [st.sample.steer.kl for st in steered.steps])  # the record's KL, drawn as is
    off = [st.step for st in steered.steps if st.sample.steer.twin_token != st.token_id]
    mx, _ = view.chart.marks.getData()
    assert mx.tolist() == off and view.chart.first.isVisible() == bool(off)
    if off:
        assert view.chart.first.value() == off[0]
    assert view.texts[1].toPlainText() == twin.text and view.texts[0].toPlainText() == steered.text
    view.show_step(2)
    _, text, before, after = steered.steps[2].sample.steer.promoted[0]
    shown = view.moved.text()
    assert "<b>step 2</b>" in shown and f"{html.escape(visible(text))}</code> {format_prob(before)} → " \
                                       f"{format_prob(after)}" in shown
    assert not view.job.running and view.buttons["Run"].isEnabled()


@needs_torch
def test_a_file_that_is_not_a_vector_is_one_line(qtbot, window, tmp_path: Path):
    window.tools["steering"].trigger()
    view = window.tools["steering"].view
    (tmp_path / "notes.gguf").write_text("not a vector")
    assert not view.load(str(tmp_path / "notes.gguf"))
    assert view.status.text().startswith("notes.gguf is not a GGUF control vector") and "\n" not in view.status.text()
    assert not view.run() and view.status.text() == "Make or load a vector first."
