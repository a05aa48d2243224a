"""Side by side in the real window: columns under their own settings stream as runs of the session, their first
divergence is marked, and the overlaid chart draws each column's recorded step."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from app.core.settings import parse_order
from app.core.side_by_side import first_divergence
from app.ui.main_window import MainWindow
from app.ui.side_by_side import SideBySideView

RUN_TIMEOUT = 60_000


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


def test_the_forms_start_from_the_panel_s_settings(window):
    view = opened(window)
    s = window.editing.settings
    a = view.forms[0].settings(s)
    assert (a.temperature, a.top_k, a.top_p, a.min_p, a.seed) == (0.9, s.top_k, s.top_p, s.min_p, s.seed)
    assert a.max_tokens == 12 and a.chain == s.chain


def test_two_temperatures_stream_as_runs_and_their_divergence_is_marked(qtbot, window):
    view = opened(window)
    view.forms[0].boxes["temperature"].setValue(0.0)  # greedy
    view.forms[1].boxes["temperature"].setValue(1.8)
    view.forms[1].boxes["top_k"].setValue(0)
    seen_when_b_started: list[int] = []
    window.playground.run_started.connect(
        lambda r: seen_when_b_started.append(view._filled[0]) if len(view.columns) > 1
        and r is view.columns[1].request else None)
    streaming: list[tuple[bool, int]] = []  # (B still running, B's rows shown) each time steps arrive
    window.playground.steps_appended.connect(
        lambda _s: streaming.append((view.runs()[1].running, view._filled[1])) if view.runs()[1:2] != [None] else None)
    ran(qtbot, window, view)
    a, b = view.runs()
    assert seen_when_b_started == [len(a.steps)]  # column A was in the table before B began streaming
    assert any(running and rows > 0 for running, rows in streaming)  # B's rows came in while it ran
    assert a.trace.settings.temperature == 0.0 and b.trace.settings.temperature == 1.8
    assert a.trace.seed == b.trace.seed == window.editing.settings.seed
    assert window.playground.session.get(a.id) is a and a.name.startswith("A: T 0")  # runs of the session
    assert view.table.rowCount() == max(len(a.steps), len(b.steps))
    assert [view.table.item(k, 0).toolTip().startswith(f"step {k + 1}:") for k in range(len(a.steps))] == [True] * len(
        a.steps)
    want = first_divergence([a.trace.token_ids, b.trace.token_ids])
    assert want is not None and view.divergence == want  # the core's, on the runs' tokens
    k = want.step
    assert view.table.verticalHeaderItem(k).text() == f"◆ {k + 1}"
    assert view.table.item(k, 0).background().color().alpha() == 70
    assert f"first divergence at step {k + 1}" in view.status.text()
    assert a.trace.token_ids[:k] == b.trace.token_ids[:k] and view.shown_step() == k  # the chart starts there


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
    o = view.chart.drawn
    assert o is not None and o.step == step and len(o.candidates) >= 3
    for c, run in enumerate(runs):
        sample = run.steps[step].sample
        probs = sample.final_probs if distribution == "sampled from" else sample.raw_probs
        record = {int(t): float(p) for t, p in zip(sample.top_ids[: len(probs)], probs, strict=True)}
        drawn = view.chart.heights(c)
        assert drawn, f"column {c} draws no bar"
        for i, height in drawn.items():
            assert height == pytest.approx(record[o.candidates[i]], rel=1e-6)  # the record's number, as is
        assert set(drawn) == {i for i, t in enumerate(o.candidates) if t in record}
        pens = view.chart.bars[c].opts["pens"]
        outlined = [i for i, pen in zip(sorted(drawn), pens, strict=True) if pen.style() != Qt.PenStyle.NoPen]
        assert [o.candidates[i] for i in outlined] == [run.steps[step].token_id]
    before = view.divergence is None or view.divergence.step >= step
    if distribution == "model (raw)" and before:  # the same model on the same prefix: the same raw rows
            np.testing.assert_allclose(o.probs[0], o.probs[1], rtol=1e-5)


def test_a_cell_opens_its_run_in_the_window_at_that_step(qtbot, window):
    view = opened(window, max_tokens=6)
    ran(qtbot, window, view)
    b = view.runs()[1]
    view.open_cell(3, 1)
    assert window.playground.shown is b and window.playground.selected == 3


def test_a_column_s_stage_order_runs_and_a_second_start_is_refused(qtbot, window):
    view = opened(window, max_tokens=5)
    view.forms[0].order.setCurrentIndex(view.forms[0].order.findData("mlx-lm"))
    assert view.run()
    assert not view.run() and "in progress" in view.status.text()  # one side-by-side at a time, said so
    qtbot.waitUntil(lambda: not view._running and not window.playground.busy, timeout=RUN_TIMEOUT)
    a, b = view.runs()
    assert (a.trace.settings.order, a.trace.settings.chain) == parse_order("mlx-lm")
    assert b.trace.settings.chain == window.editing.settings.chain  # B: as the panel


def test_the_columns_are_saved_and_reopened_as_runs_of_the_session(qtbot, window, tmp_path):
    view = opened(window, max_tokens=5)
    view.forms[1].boxes["temperature"].setValue(1.4)
    ran(qtbot, window, view)
    a, b = view.runs()
    assert window.sessions.save_as(tmp_path / "s.jsonl")
    assert window.sessions.open(tmp_path / "s.jsonl")
    assert view.columns == [] and view.table.rowCount() == 0  # another session: the columns are forgotten
    back = {r.name: r.trace for r in window.playground.session.runs.values()}
    assert back[a.name].token_ids == a.trace.token_ids and back[b.name].settings.temperature == 1.4
