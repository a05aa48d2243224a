"""Side by side in the real window: columns under their own settings (and models) stream together as runs of the
session, their first divergence is marked, the charts draw each column's recorded step (one chart per model), and
a saved session brings the columns back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt

from app.core.compare.side_by_side import first_divergence
from app.core.models.drafts import BUILTIN_DRAFT_PATH
from app.core.models.sources import BUILTIN_NAME, ModelSpec
from app.core.session import session_file
from app.core.settings import parse_order
from app.ui.files.sessions import snapshot
from app.ui.main_window import MainWindow
from app.ui.tools.side_by_side.view import SideBySideView
from tests.ui.conftest import WINDOW_BACKEND

RUN_TIMEOUT = 60_000
DRAFT = ModelSpec(str(BUILTIN_DRAFT_PATH))


def opened(w: MainWindow, max_tokens: int = 12) -> SideBySideView:
    w.prompt.set_prompt("Hello there")
    w.sampler.editors["max_tokens"].setValue(max_tokens)
    w.sampler.editors["temperature"].setValue(0.9)
    w.tools["side"].trigger()
    view = w.tools["side"].view
    assert view is not None and view.isVisible()
    return view


def ran(qtbot, w: MainWindow, view: SideBySideView) -> None:
    assert view.run()
    qtbot.waitUntil(lambda: not view._running and not w.playground.busy
                    and all(r is not None and not r.running for r in view.runs()), timeout=RUN_TIMEOUT)


def watch(w: MainWindow, view: SideBySideView) -> list[tuple[tuple[int, bool], ...]]:
    """The session as the first column to end ends: every column's (steps, still running), as the view-model
    routes that run's `Finished` (events are routed in the order the model thread made them, so this is the order
    of the events, whatever the frames)."""
    seen: list[tuple[tuple[int, bool], ...]] = []

    def look() -> None:
        now = tuple((len(r.steps), r.running) for r in view.runs())
        if not seen and len(now) > 1 and not all(running for _n, running in now):
            seen.append(now)
            assert view.table.filled == [n for n, _running in now]  # the table shows every step so far, live

    w.playground.session_changed.connect(look)
    return seen


def streamed_together(seen: list[tuple[tuple[int, bool], ...]]) -> bool:
    """When the first column ended, every column had steps and another was still running: their steps came
    interleaved (one after another, the others would have none yet)."""
    return len(seen) == 1 and all(n > 0 for n, _running in seen[0]) and any(running for _n, running in seen[0])


def record(run, step: int, distribution: str = "sampled from") -> dict[int, float]:
    sample = run.steps[step].sample
    probs = sample.final_probs if distribution == "sampled from" else sample.raw_probs
    return {int(t): float(p) for t, p in zip(sample.top_ids[: len(probs)], probs, strict=True)}


@pytest.fixture
def builtin_window(qtbot, store):
    """The window on the built-in model (its draft, the other real model shipped in resources/, beside it)."""
    w = MainWindow(settings=store, spec=ModelSpec(BUILTIN_NAME, WINDOW_BACKEND))
    qtbot.addWidget(w)
    w.show()
    w.sampler.seed.setValue(3)
    w.sampler.lock.setChecked(True)
    qtbot.waitUntil(lambda: w.playground.info is not None, timeout=RUN_TIMEOUT)
    yield w
    w.close()


def test_the_forms_start_from_the_panel_s_settings_on_the_window_s_model(window):
    view = opened(window)
    s = window.editing.settings
    a = view.forms[0].settings(s)
    assert (a.temperature, a.top_k, a.top_p, a.min_p, a.seed) == (0.9, s.top_k, s.top_p, s.min_p, s.seed)
    assert a.max_tokens == 12 and a.chain == s.chain
    assert view.forms[0].model.choice() is None and view.forms[0].model.spec(window.editing.model) == \
        window.editing.model


def test_two_temperatures_stream_together_and_their_divergence_is_marked(qtbot, window):
    view = opened(window, max_tokens=16)
    view.forms[0].boxes["temperature"].setValue(0.0)  # greedy
    view.forms[1].boxes["temperature"].setValue(1.8)
    view.forms[1].boxes["top_k"].setValue(0)
    started: list[object] = []
    window.playground.run_started.connect(started.append)
    seen = watch(window, view)
    ran(qtbot, window, view)
    a, b = view.runs()
    assert len(started) == 1  # one job for both columns
    assert streamed_together(seen)  # both streaming at once
    assert a.trace.settings.temperature == 0.0 and b.trace.settings.temperature == 1.8
    assert a.trace.seed == b.trace.seed == window.editing.settings.seed
    assert window.playground.session.get(a.id) is a and a.name.startswith("A: T 0")  # runs of the session
    assert view.table.rowCount() == max(len(a.steps), len(b.steps)) and view.table.filled == [len(a.steps),
                                                                                             len(b.steps)]
    assert [view.table.item(k, 0).toolTip().startswith(f"step {k}:") for k in range(len(a.steps))] == [True] * len(
        a.steps)
    want = first_divergence([a.trace.token_ids, b.trace.token_ids])
    assert want is not None and view.divergence == want  # the core's, on the runs' tokens
    k = want.step
    assert view.table.verticalHeaderItem(k).text() == f"◆ {k}"
    assert view.table.item(k, 0).background().color().alpha() == 70
    assert f"first divergence at step {k}" in view.status.text()
    assert a.trace.token_ids[:k] == b.trace.token_ids[:k] and view.compared.shown_step() == k  # the chart starts there
    assert [view.table.horizontalHeaderItem(c).text() for c in range(2)] == ["A", "B"]  # one model: no names


@pytest.mark.parametrize("distribution", ["sampled from", "model (raw)"])
def test_the_overlaid_chart_draws_each_column_s_record_at_the_cursor(qtbot, window, distribution):
    view = opened(window, max_tokens=8)
    view.count.setValue(3)
    view.forms[1].boxes["temperature"].setValue(1.5)
    view.forms[2].boxes["top_k"].setValue(3)
    ran(qtbot, window, view)
    view.distribution.setCurrentText(distribution)
    runs = view.runs()
    step = 4
    view.table.setCurrentCell(step, 1)  # the one cursor: a row
    chart = view.charts.chart_of(0)
    assert view.charts.groups == [(0, 1, 2)] and all(view.charts.chart_of(c) is chart for c in range(3))
    o = chart.drawn
    assert o is not None and o.step == step and len(o.candidates) >= 3
    for c, run in enumerate(runs):
        want = record(run, step, distribution)
        drawn = chart.heights(c)
        assert drawn, f"column {c} draws no bar"
        for i, height in drawn.items():
            assert height == pytest.approx(want[o.candidates[i]], rel=1e-6)  # the record's number, as is
        assert set(drawn) == {i for i, t in enumerate(o.candidates) if t in want}
        pens = chart.bars[c].opts["pens"]
        outlined = [i for i, pen in zip(sorted(drawn), pens, strict=True) if pen.style() != Qt.PenStyle.NoPen]
        assert [o.candidates[i] for i in outlined] == [run.steps[step].token_id]
    before = view.divergence is None or view.divergence.step >= step
    if distribution == "model (raw)" and before:  # the same model on the same prefix: the same raw rows
        np.testing.assert_allclose(o.probs[0], o.probs[1], rtol=1e-5)


def test_a_column_s_run_is_named_by_what_it_changes_and_the_tree_tooltip_holds_the_whole_name(qtbot, window):
    window.resize(1600, 1000)
    view = opened(window, max_tokens=4)
    view.forms[1].boxes["min_p"].setValue(0.05)
    ran(qtbot, window, view)
    a, b = view.runs()
    assert (a.name, b.name) == ("A: T 0.9", "B: T 0.9 · min-p 0.05")  # no "k 0 · p 1", nor the seed they share
    qtbot.waitUntil(lambda: window.branches.item_of(b.id) is not None)
    item = window.branches.item_of(b.id)
    assert item.text(0) == b.name and item.toolTip(0).splitlines()[0] == b.name
    assert f"seed {b.trace.seed}" in item.toolTip(0).splitlines()[1]
    tree = window.branches.tree
    assert tree.fontMetrics().horizontalAdvance(b.name) <= tree.visualItemRect(item).width()  # not cut at 1600 px


def test_a_cell_opens_its_run_in_the_window_at_that_step(qtbot, window):
    view = opened(window, max_tokens=6)
    ran(qtbot, window, view)
    b = view.runs()[1]
    view.open_cell(3, 1)
    assert window.playground.shown is b and window.playground.display.selected == 3


def test_steps_are_counted_from_0_as_the_window_counts_them(qtbot, window):
    """A row's name, a cell's tooltip, the chart's step and the step a double-click opens are one number, from 0."""
    view = opened(window, max_tokens=6)
    ran(qtbot, window, view)
    b = view.runs()[1]
    rows = [view.table.verticalHeaderItem(k).text().removeprefix("◆ ") for k in range(view.table.rowCount())]
    assert rows == [str(k) for k in range(len(b.steps))]
    view.table.setCurrentCell(1, 1)
    assert view.table.item(1, 1).toolTip().startswith("step 1:") and view.charts.chart_of(1).drawn.step == 1
    assert view.charts.chart_of(1).getAxis("bottom").labelText.startswith("step 1:")
    view.open_cell(1, 1)
    assert window.playground.display.selected == 1 and window.step_panel.title.text().startswith("<b>Step 1</b>")


def test_a_column_s_stage_order_runs_and_a_second_start_is_refused(qtbot, window):
    view = opened(window, max_tokens=5)
    view.forms[0].order.setCurrentIndex(view.forms[0].order.findData("mlx-lm"))
    assert view.run()
    assert not view.run() and "in progress" in view.status.text()  # one side-by-side at a time, said so
    qtbot.waitUntil(lambda: not view._running and not window.playground.busy, timeout=RUN_TIMEOUT)
    a, b = view.runs()
    assert (a.trace.settings.order, a.trace.settings.chain) == parse_order("mlx-lm")
    assert b.trace.settings.chain == window.editing.settings.chain  # B: as the panel


def test_saving_and_reopening_brings_the_columns_back(qtbot, window, tmp_path: Path):
    view = opened(window, max_tokens=8)
    view.forms[0].order.setCurrentIndex(view.forms[0].order.findData("mlx-lm"))
    view.forms[1].boxes["temperature"].setValue(1.6)
    view.forms[1].boxes["top_k"].setValue(0)
    ran(qtbot, window, view)
    a, b = view.runs()
    divergence, labels = view.divergence, [c.label for c in view.compared.columns]
    assert window.sessions.save_as(tmp_path / "s.jsonl")
    view.close()
    assert window.sessions.new() and view.compared.columns == [] and view.table.rowCount() == 0  # another session
    assert window.sessions.open(tmp_path / "s.jsonl")
    assert view.isVisible()  # the view comes back with the session
    back = view.runs()
    assert [r.id for r in back] == [a.id, b.id] and [c.label for c in view.compared.columns] == labels
    assert [r.trace.token_ids for r in back] == [a.trace.token_ids, b.trace.token_ids]
    assert view.table.filled == [len(a.steps), len(b.steps)] and view.divergence == divergence
    assert view.forms[1].boxes["temperature"].value() == 1.6 and view.count.value() == 2
    assert view.forms[0].order.currentData() == "mlx-lm"  # each column's own settings, to run again
    if divergence is not None:
        assert view.table.verticalHeaderItem(divergence.step).text() == f"◆ {divergence.step}"
    view.table.setCurrentCell(2, 0)
    chart = view.charts.chart_of(1)
    assert chart.drawn.step == 2 and chart.heights(1)
    for i, height in chart.heights(1).items():
        assert height == pytest.approx(record(back[1], 2)[chart.drawn.candidates[i]], rel=1e-6)


def test_an_autosave_brings_the_columns_back_too(qtbot, window):
    view = opened(window, max_tokens=4)
    ran(qtbot, window, view)
    ids = [r.id for r in view.runs()]
    doc = session_file.from_lines(list(session_file.encode(snapshot(window.playground))))
    assert window.sessions.new() and view.compared.columns == []
    assert window.sessions.recover(doc)
    assert [r.id for r in view.runs()] == ids and view.table.filled == [len(r.steps) for r in view.runs()]


def test_a_column_on_the_built_in_draft_streams_beside_the_built_in_model(qtbot, builtin_window):
    w = builtin_window
    view = opened(w, max_tokens=10)
    view.forms[1].model.set_choice(DRAFT)
    seen = watch(w, view)
    ran(qtbot, w, view)
    a, b = view.runs()
    assert a.request.model == w.editing.model and b.request.model.source == str(BUILTIN_DRAFT_PATH)
    assert b.trace.model["source"] == str(BUILTIN_DRAFT_PATH) and a.trace.model["source"] == BUILTIN_NAME
    assert streamed_together(seen)  # the two models stream together
    assert w.playground.info.name == a.trace.model["name"]  # the window's model stays the one it shows
    headers = [view.table.horizontalHeaderItem(c).text() for c in range(2)]
    assert headers == ["A · Built-in model", "B · Built-in draft"]
    assert view.charts.groups == [(0,), (1,)] and view.charts.chart_of(0) is not view.charts.chart_of(1)
    view.table.setCurrentCell(1, 0)
    for c, run in enumerate((a, b)):  # each model's chart draws its own column's record
        chart = view.charts.chart_of(c)
        assert chart.drawn.probs.shape[0] == 1 and chart.heights(c)
        for i, height in chart.heights(c).items():
            assert height == pytest.approx(record(run, 1)[chart.drawn.candidates[i]], rel=1e-6)
    texts = first_divergence([[s.text for s in a.steps], [s.text for s in b.steps]])
    assert view.divergence == texts  # across models: compared by the tokens' texts
    assert "B failed" not in view.status.text()


def test_a_column_whose_model_fails_says_why_and_the_others_go_on(qtbot, window, tmp_path: Path):
    view = opened(window, max_tokens=5)
    view.forms[1].model.set_choice(ModelSpec(str(tmp_path / "no-such-model")))
    ran(qtbot, window, view)
    a, b = view.runs()
    assert a.finished.reason != "error" and len(a.steps) == 5
    assert b.finished.reason == "error" and b.steps == [] and b.finished.message
    assert view.table.item(0, 1).text() == f"failed: {b.finished.message}"
    assert f"B failed: {b.finished.message}" in view.status.text()
    assert view.divergence is None and window.playground.info is not None


def test_a_first_column_on_another_model_leaves_the_window_s_model_shown(qtbot, builtin_window, tmp_path: Path):
    w = builtin_window
    name = w.playground.info.name
    view = opened(w, max_tokens=4)
    view.forms[0].model.set_choice(DRAFT)  # column A beside the window's model, column B on it
    ran(qtbot, w, view)
    a, b = view.runs()
    assert a.trace.model["source"] == str(BUILTIN_DRAFT_PATH) and b.trace.model["source"] == BUILTIN_NAME
    assert w.playground.info.name == name  # the window's model (and tokenizer) stay the window's
    messages: list[str] = []
    w.playground.failed.connect(messages.append)
    view.forms[0].model.set_choice(ModelSpec(str(tmp_path / "no-such-model")))
    ran(qtbot, w, view)
    a, b = view.runs()
    assert a.finished.reason == "error" and b.finished.reason != "error"
    assert messages == [] and w.playground.info.name == name  # A's model failing is A's business: no banner
