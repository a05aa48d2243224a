"""The beam search dock in the real window: it runs on the model thread, draws exactly the recorded steps and
hypotheses, stops on request, and opens a hypothesis as a run of the session that forks like any other; a think
budget, which beams do not keep, is refused in one line."""

from __future__ import annotations

import math

import pytest

from app.core.decoding.beam import BeamSettings
from app.core.record.trace import RunTrace
from app.ui.formatting import format_logprob, format_prob, visible
from app.ui.tools.beam_tree import FILL
from app.ui.tools.beam_view import THINK_BUDGET_REFUSED
from tests.ui.conftest import RUN_TIMEOUT


def open_dock(window):
    window.tools["beam"].trigger()
    view = window.tools["beam"].view
    assert view is not None and view.isVisible()
    return view


def run_search(qtbot, view, width: int = 3, max_tokens: int = 6):
    view.controls.width_box.setValue(width)
    view.controls.max_tokens.setValue(max_tokens)
    assert view.run()
    qtbot.waitUntil(lambda: view.result is not None, timeout=RUN_TIMEOUT)
    return view.result


def test_the_tree_draws_every_recorded_step_and_nothing_else(qtbot, window) -> None:
    view = open_dock(window)
    window.prompt.field().setPlainText("Hello")
    done = run_search(qtbot, view)
    assert view.controls.settings() == BeamSettings(3, 1.0, False, 0, 6)
    assert [s.step for s in view.steps] == list(range(done.result.steps))
    want = [(s.step, c.beam, c.token, c.fate) for s in view.steps for c in s.candidates[: s.shortlist]]
    drawn = view.tree.drawn()
    assert [(d.step, d.beam, d.token, d.fate) for d in drawn] == want
    shortlisted = [c for s in view.steps for c in s.candidates[: s.shortlist]]
    for i, (d, c) in enumerate(zip(drawn, shortlisted, strict=True)):
        assert d.label.startswith(visible(view.texts[c.token])[:8])
        assert format_logprob(c.cumulative) in d.label  # the recorded cumulative log-probability, as recorded
        if c.fate == "finished":
            assert format_logprob(c.score) in d.label
        assert view.tree.fill_of(i) != FILL["kept"] or c.fate == "kept"  # kept and pruned look different
    for s in view.steps[:-1]:
        assert sum(c.fate == "kept" for c in s.candidates) == 3  # the width: three live beams after each step


def test_the_hypotheses_are_listed_best_first_with_their_recorded_scores(qtbot, window) -> None:
    view = open_dock(window)
    done = run_search(qtbot, view, width=4, max_tokens=5)
    hyps = done.result.hypotheses
    assert len(hyps) == view.table.rowCount() == 4
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    for i, h in enumerate(hyps):
        cells = [view.table.item(i, j).text() for j in range(6)]
        assert cells[:5] == [str(i + 1), format_logprob(h.score), format_logprob(h.logprob), str(len(h.tokens)),
                             h.reason]
        assert cells[5] == done.texts[i].replace("\n", "↵")


def test_stop_ends_the_search_at_once(qtbot, window) -> None:
    view = open_dock(window)
    view.controls.max_tokens.setValue(400)
    assert view.run()
    view.stop()
    qtbot.waitUntil(lambda: view.result is not None, timeout=RUN_TIMEOUT)
    assert view.result.result.reason == "cancelled"
    assert view.controls.run.isEnabled() and not view.controls.stop.isEnabled()


def test_a_hypothesis_opens_as_a_run_and_forks_like_any_other(qtbot, window, tmp_path) -> None:
    view = open_dock(window)
    done = run_search(qtbot, view, width=2, max_tokens=5)
    pg = window.playground
    before = set(pg.session.runs)
    with qtbot.waitSignal(view.opened, timeout=RUN_TIMEOUT):
        view.table.cellWidget(1, 6).click()  # the second best
    qtbot.waitUntil(lambda: not pg.busy, timeout=RUN_TIMEOUT)
    (run_id,) = set(pg.session.runs) - before
    run = pg.session.get(run_id)
    assert run.trace.token_ids == list(done.result.hypotheses[1].tokens)
    assert run.trace.branch == "beam" and run.name.startswith("beam #2")
    assert pg.shown is run
    run.trace.save(tmp_path / "beam.jsonl")  # it saves as any run's trace does, and reads back the same
    back = RunTrace.load(tmp_path / "beam.jsonl")
    assert back.token_ids == run.trace.token_ids and back.branch == "beam"
    runner_up = next(int(t) for t in run.steps[1].sample.top_ids if int(t) != run.steps[1].token_id)
    assert pg.branches.fork(1, runner_up)
    qtbot.waitUntil(lambda: not pg.busy, timeout=RUN_TIMEOUT)
    (fork,) = pg.session.children(run_id)
    assert fork.parent == (run_id, 1) and fork.trace.token_ids[:2] == [run.steps[0].token_id, runner_up]


def test_an_opened_hypothesis_shows_the_tokens_the_beam_took_with_their_model_probabilities(qtbot, window) -> None:
    """A beam run is its own kind of run: no sampler stage ran, so no step reads "cut by greedy" or p = 0; each
    shows the token the beam took and its probability under the model, which sum to the beam's recorded log p."""
    view = open_dock(window)
    window.prompt.field().setPlainText("Hello")
    done = run_search(qtbot, view, width=3, max_tokens=6)
    pg = window.playground
    rank = next(r for r, steps in enumerate(done.runs) if any(st.sample.rank for st in steps))  # off the greedy path
    with qtbot.waitSignal(view.opened, timeout=RUN_TIMEOUT):
        assert view.open(rank)
    qtbot.waitUntil(lambda: not pg.busy, timeout=RUN_TIMEOUT)
    run, h = pg.shown, done.result.hypotheses[rank]
    panel, chart = window.step_panel, window.step_panel.chart.chart
    for k, st in enumerate(run.steps):
        pg.select_step(k)
        assert not any("cut by" in name for _, name in chart.legend.entries)
        assert panel.title.text().startswith(f"<b>Step {k}</b> — the beam took")
        assert format_prob(st.raw_prob) in panel.title.text() and st.prob == pytest.approx(st.raw_prob, rel=1e-6)
    assert window.timeline.chart.prob.getData()[1].min() > 0  # p(drawn): the model's, never a cut's 0
    assert run.trace.token_ids == list(h.tokens) and all(st.sample.is_taken for st in run.steps)
    assert math.fsum(math.log(st.prob) for st in run.steps) == pytest.approx(h.logprob, rel=1e-4, abs=1e-4)


def test_it_waits_for_a_run_in_progress(qtbot, window) -> None:
    view = open_dock(window)
    pg = window.playground
    assert pg.generate(pg.make_request())
    assert not view.run()  # one run at a time on the model thread
    assert "in progress" in view.status.text() and view.controls.run.isEnabled()
    pg.stop()
    qtbot.waitUntil(lambda: not pg.busy, timeout=RUN_TIMEOUT)
    assert view.run()
    qtbot.waitUntil(lambda: view.result is not None, timeout=RUN_TIMEOUT)


def test_a_clicked_step_lists_its_recorded_candidates(qtbot, window) -> None:
    from PySide6.QtCore import QPointF, Qt

    from app.ui.tools.beam_tree import COL_W, ROW_H
    from app.ui.tools.beam_view import STEP_COLUMNS

    view = open_dock(window)
    run_search(qtbot, view, width=2, max_tokens=4)
    last = view.steps[-1]
    assert view.step_table.rowCount() == len(last.candidates)  # following the latest step while none is pinned
    view.tree.horizontalScrollBar().setValue(0)
    view.tree.verticalScrollBar().setValue(0)
    where = view.tree.mapFromScene(QPointF(2 * COL_W + 10, ROW_H / 2))  # a box of step 1
    qtbot.mouseClick(view.tree.viewport(), Qt.MouseButton.LeftButton, pos=where)
    assert view.shown_step == 1 and view.tree.marked == 1
    step = view.steps[1]
    assert view.step_table.rowCount() == len(step.candidates) == 2 * step.shortlist  # each live beam's best K
    for i, c in enumerate(step.candidates):
        row = [view.step_table.item(i, j).text() for j in range(len(STEP_COLUMNS))]
        assert row[0] == str(c.beam) and row[1] == visible(view.texts[c.token])
        assert row[2:4] == [format_logprob(c.logprob), format_logprob(c.cumulative)]
        assert row[4].startswith("kept" if c.fate == "kept" else c.fate)


def test_a_think_budget_is_refused_in_one_line(qtbot, window) -> None:
    view = open_dock(window)
    window.sampler.set_settings(window.editing.settings.with_(think_budget=8))
    assert not view.run()  # (each beam would have to force its own closing marker)
    assert view.status.text() == THINK_BUDGET_REFUSED and not view.running
    window.sampler.set_settings(window.editing.settings.with_(think_budget=0))
    assert view.run()
    qtbot.waitUntil(lambda: view.result is not None, timeout=RUN_TIMEOUT)
