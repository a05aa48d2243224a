"""A thinking model in the real window (a tiny random Qwen3-style model made here): the output draws the think span
apart and folds it, the timeline labels each span with the core's figures and marks the budget's cut, and Run ▸ Think
probes draws the probes it got and opens one as a run of the branch tree; the probes come back with the session."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QSettings

from app.core.models.sources import ModelSpec
from app.core.record.span_stats import span_stats
from app.ui.charts.timeline import words
from app.ui.main_window import MainWindow
from app.ui.tools.thinking.probe_view import ThinkProbeView
from tests.thinking import make_thinking_model
from tests.ui.conftest import RUN_TIMEOUT, WINDOW_BACKEND

BUDGET = 6


@pytest.fixture(scope="module")
def thinker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_thinking_model(tmp_path_factory.mktemp("thinker") / "qwen3-tiny", "qwen3")


@pytest.fixture
def window(qtbot, thinker: Path, store: QSettings):
    w = MainWindow(settings=store, spec=ModelSpec(str(thinker), WINDOW_BACKEND))
    qtbot.addWidget(w)
    w.show()
    w.sampler.seed.setValue(3)
    w.sampler.lock.setChecked(True)
    qtbot.waitUntil(lambda: w.playground.tokenizer is not None, timeout=RUN_TIMEOUT)
    yield w
    w.close()


def think(qtbot, w: MainWindow) -> object:
    """A run whose prompt opens the think span, cut by a hard budget of `BUDGET` think tokens."""
    w.prompt.set_prompt("47+38 <think>")
    w.sampler.editors["max_tokens"].setValue(12)
    w.sampler.editors["think_budget"].setValue(BUDGET)
    with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT) as done:
        assert w.playground.generate(replace(w.playground.make_request(), ignore_eos=True))
    qtbot.waitUntil(lambda: not w.playground.busy, timeout=RUN_TIMEOUT)
    return w.playground.session.get(done.args[0].run_id).trace


def test_the_output_draws_the_think_span_apart_and_folds_it(qtbot, window):
    trace = think(qtbot, window)
    assert [st.span for st in trace.steps][: BUDGET + 1] == ["think"] * (BUDGET + 1)
    assert trace.steps[BUDGET].forced == "budget"
    view = window.output
    text = view.text
    assert view.thinking.isVisible() and view.thinking.isChecked()
    shown = [i for i in range(text.span_count())]
    italics = [text.span_format(i).fontItalic() for i in shown]
    spans = [trace.steps[text._step_of[i]].span for i in shown]
    assert italics == [s == "think" for s in spans]  # the think span in italics, the answer not
    whole = text.toPlainText()
    view.thinking.setChecked(False)  # folded: one line stands for the span
    folded = text.toPlainText()
    thought = "".join(st.text for st in trace.steps[: BUDGET + 1])
    assert folded.startswith(f"[thought for {BUDGET + 1} tokens, closed by the budget") and "</think>" not in folded
    assert folded.endswith(trace.text[len(thought):] + " [max tokens]")  # the answer as it was
    view.thinking.setChecked(True)
    assert text.toPlainText() == whole
    view.thinking.setChecked(False)  # folded while a run streams: "[thinking…]", then its length once it ends
    think(qtbot, window)
    assert text.toPlainText() == folded and not view.thinking.isChecked()


def test_the_timeline_labels_each_span_with_the_core_s_figures_and_marks_the_budget(qtbot, window):
    trace = think(qtbot, window)
    chart = window.timeline_panel.timeline.widget
    chart.redraw()
    assert chart.spans.said == [words(s) for s in span_stats(trace.steps)]
    assert chart.spans.said[0].startswith("think · H ") and "(k 20)" in chart.spans.said[0]
    assert chart.forced == [BUDGET] and chart.spans.cuts[0].value() == BUDGET
    assert np.isfinite(chart.varentropy.getData()[1]).all()


def test_probes_are_drawn_and_one_opens_as_a_run(qtbot, window):
    trace = think(qtbot, window)
    window.tools["think"].trigger()
    view: ThinkProbeView = window.tools["think"].view
    view.every.setValue(2)
    view.answers.setText("85, 86")
    assert view.probe()
    qtbot.waitUntil(lambda: not view.job.running, timeout=RUN_TIMEOUT)
    steps = sorted(view.probes)
    assert steps == [0, 2, 4, 6]  # every 2 think tokens, and where the budget closed the span
    assert view.chart.names == ["85", "86"]
    x, y = view.chart.curves[0].getData()
    assert list(x) == [view.probes[s].think_tokens for s in steps]
    np.testing.assert_allclose(y, [view.probes[s].answer_probs[0] for s in steps])
    assert "answers" in view.summary.text()
    runs = len(window.playground.session.runs)
    with qtbot.waitSignal(window.playground.finished, timeout=RUN_TIMEOUT):
        assert view.open_probe(4)
    qtbot.waitUntil(lambda: not window.playground.busy, timeout=RUN_TIMEOUT)
    child = list(window.playground.session.runs.values())[-1]
    assert len(window.playground.session.runs) == runs + 1 and child.parent[0] == trace.run_id
    closing = window.playground.tokenizer.encode("</think>", add_special_tokens=False)
    assert list(child.trace.prompt_ids[-3:])[:1] == closing  # its prompt: the run's 4 tokens, then the close


def test_the_probes_come_back_with_the_session_and_still_open_as_runs(qtbot, window, thinker, tmp_path):
    think(qtbot, window)
    window.tools["think"].trigger()
    view: ThinkProbeView = window.tools["think"].view
    view.every.setValue(3)
    view.answers.setText("85, 86")
    assert view.probe()
    qtbot.waitUntil(lambda: not view.job.running, timeout=RUN_TIMEOUT)
    assert window.isWindowModified()  # new probes: the session changed
    drawn = [c.getData() for c in view.chart.curves]
    assert window.sessions.save_as(tmp_path / "s.jsonl")
    store = QSettings(str(tmp_path / "fresh.ini"), QSettings.Format.IniFormat)
    fresh = MainWindow(settings=store, spec=ModelSpec(str(thinker), WINDOW_BACKEND))
    qtbot.addWidget(fresh)
    fresh.show()
    qtbot.waitUntil(lambda: fresh.playground.tokenizer is not None, timeout=RUN_TIMEOUT)
    try:
        assert fresh.sessions.open(tmp_path / "s.jsonl")
        again: ThinkProbeView = fresh.tools["think"].view  # opened by the session, drawn from its record
        assert again is not None and again.isVisible() and not fresh.isWindowModified()
        assert sorted(again.probes) == sorted(view.probes) == [0, 3, 6]
        assert (again.every.value(), again.answers.text(), again.chart.names) == (3, "85, 86", ["85", "86"])
        for (x, y), (x2, y2) in zip(drawn, [c.getData() for c in again.chart.curves], strict=True):
            np.testing.assert_array_equal(x, x2)
            np.testing.assert_allclose(y, y2, rtol=1e-6)
        with qtbot.waitSignal(fresh.playground.finished, timeout=RUN_TIMEOUT):
            assert again.open_probe(3)  # the run it probed is in the reopened session
    finally:
        qtbot.waitUntil(lambda: not fresh.playground.busy, timeout=RUN_TIMEOUT)
        fresh.close()
