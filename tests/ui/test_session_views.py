"""What the views showed comes back with the session: a beam search (its tree, hypotheses and a step's candidates), a
speculative run (its rounds, summary and name), a sweep (its grid, colours and each cell's samples), a Sample ×N
list and a steering grid (its cells' texts, numbers and marks), run in one window, saved (or autosaved), then opened
in a fresh window, are drawn there from the saved records as they were, with nothing run again; and those that open
runs still open them there."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt

from app.core.models.sources import ModelSpec
from app.core.session import session_file
from app.ui.files.autosave import AUTOSAVE_MS
from app.ui.main_window import MainWindow
from app.ui.tools.speculative_view import COLUMNS, run_name
from tests.tiny import make_model
from tests.ui.conftest import RUN_TIMEOUT, WINDOW_BACKEND, needs_torch
from tests.ui.tools.test_beam_view import open_dock, run_search
from tests.ui.tools.test_samples_view import sampled, shown_rows
from tests.ui.tools.test_steer_grid_view import grid_with_vector
from tests.ui.tools.test_sweep_view import sweep_window


@pytest.fixture
def fresh(qtbot, tiny_path: Path, tmp_path: Path):
    """A second window on the same model, with its own settings and autosave folder: where a session is reopened."""
    (tmp_path / "fresh").mkdir()
    store = QSettings(str(tmp_path / "fresh" / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), WINDOW_BACKEND))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.playground.tokenizer is not None, timeout=RUN_TIMEOUT)
    yield w
    w.close()


@pytest.fixture(scope="module")
def draft_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("models") / "tiny-draft", seed=1, hidden=32, layers=1)


def reopened(window: MainWindow, fresh: MainWindow, path: Path, tool: str):
    """Save the window's session to `path`, open it in `fresh`: the view `tool` there, opened with it."""
    assert window.sessions.save_as(path)
    assert fresh.tools[tool].view is None  # never opened in this window: the session opens it
    assert fresh.sessions.open(path)
    view = fresh.tools[tool].view
    assert view is not None and view.isVisible() and not fresh.isWindowModified()  # drawn, not changed
    return view


def table(t, columns: int) -> list[list[str]]:
    """The texts of a table's cells, row by row."""
    return [[t.item(r, c).text() if t.item(r, c) is not None else "" for c in range(columns)]
            for r in range(t.rowCount())]


# beam search ----------------------------------------------------------------------------------------------------

def beam_shown(view) -> dict:
    buttons = [view.table.cellWidget(r, 6) for r in range(view.table.rowCount())]
    return {"tree": view.tree.drawn(), "hypotheses": table(view.table, 6),
            "openable": [b.isEnabled() for b in buttons], "candidates": table(view.step_table, 6),
            "step": view.step_label.text(), "status": view.status.text(), "settings": view.controls.settings()}


def test_a_beam_search_comes_back_with_its_tree_hypotheses_and_candidates(qtbot, window, fresh, tmp_path):
    view = open_dock(window)
    window.prompt.field().setPlainText("Hello")
    view.controls.penalty.setValue(0.5)
    done = run_search(qtbot, view, width=3, max_tokens=5)
    shown = beam_shown(view)
    assert len(shown["tree"]) > 3 and len(shown["hypotheses"]) == 3 and window.isWindowModified()

    back = reopened(window, fresh, tmp_path / "beam.jsonl", "beam")
    assert beam_shown(back) == shown
    assert back.result.result == done.result and back.texts == view.texts and back.steps == view.steps
    assert fresh.playground.session.views.beam.finished is back.result  # drawn from the saved record itself
    pg = fresh.playground
    before = set(pg.session.runs)
    with qtbot.waitSignal(back.opened, timeout=RUN_TIMEOUT):
        back.table.cellWidget(0, 6).click()  # a reopened search's hypothesis still opens as a run
    qtbot.waitUntil(lambda: not pg.busy, timeout=RUN_TIMEOUT)
    (run_id,) = set(pg.session.runs) - before
    assert pg.session.get(run_id).trace.token_ids == list(done.result.hypotheses[0].tokens)
    assert fresh.sessions.new() and back.tree.drawn() == [] and back.table.rowCount() == 0  # another session


# speculative decoding ---------------------------------------------------------------------------------------------

def spec_shown(view) -> dict:
    rows = table(view.table, len(COLUMNS))
    colours = [view.table.item(r, 0).background().color().rgba() for r in range(view.table.rowCount())]
    return {"rows": rows, "colours": colours, "status": view.status.text(), "k": view.controls.k.value(),
            "draft": view.controls.draft_source()}


def test_a_speculative_run_comes_back_with_its_rounds_summary_and_name(qtbot, window, fresh, tmp_path, draft_path):
    window.tools["speculative"].trigger()
    view = window.tools["speculative"].view
    view.controls.draft.setEditText(str(draft_path))
    view.controls.k.setValue(3)
    window.sampler.set_settings(window.editing.settings.with_(max_tokens=12))
    assert view.run()
    qtbot.waitUntil(lambda: view.summary is not None and not window.playground.busy, timeout=RUN_TIMEOUT)
    run = window.playground.shown
    assert run.name == run_name(str(draft_path), 3) == "speculative: tiny-draft, k 3"  # named as other runs are
    shown = spec_shown(view)
    assert shown["rows"] and "acceptance" in shown["status"] and "tok/s" in shown["status"]

    back = reopened(window, fresh, tmp_path / "spec.jsonl", "speculative")
    assert spec_shown(back) == shown
    assert back.rounds == view.rounds and back.stats == view.stats and back.summary == view.summary
    assert back.request_id == run.id and fresh.playground.session.get(run.id).name == run.name
    fresh.branches.refresh()
    assert fresh.branches.item_of(run.id).text(0).endswith(run.name)  # the branch tree names it
    assert fresh.playground.shown.id == run.id and fresh.playground.shown.trace.token_ids == run.trace.token_ids


# sweep --------------------------------------------------------------------------------------------------------

def sweep_shown(view) -> dict:
    g = view.grid
    return {"cells": table(g, g.columnCount()), "status": view.status.text(), "csv": view.csv_text(),
            "colours": [[g.item(r, c).background().color().rgba() for c in range(g.columnCount())]
                        for r in range(g.rowCount())],
            "headers": ([g.verticalHeaderItem(r).text() for r in range(g.rowCount())],
                        [g.horizontalHeaderItem(c).text() for c in range(g.columnCount())]),
            "axes": [(n.currentText(), v.text()) for n, v in zip(view.names, view.values, strict=True)],
            "statistic": view.statistic.currentText(), "n": view.count.value()}


def test_a_sweep_comes_back_with_its_grid_and_each_cell_lists_its_samples(qtbot, window, fresh, tmp_path):
    view = sweep_window(window)
    view.values[1].setText("5,40")  # top-p … as top-k: whole numbers
    view.names[1].setCurrentText("top_k")
    view.statistic.setCurrentText("distinct_2")
    assert view.run()
    qtbot.waitUntil(lambda: all(c.result is not None for c in view.cells) and not window.playground.busy,
                    timeout=RUN_TIMEOUT)
    shown = sweep_shown(view)
    assert len(shown["cells"]) == 3 and "6 of 6 cells done" in shown["status"] and "…" not in str(shown["cells"])

    back = reopened(window, fresh, tmp_path / "sweep.jsonl", "sweep")
    assert sweep_shown(back) == shown
    assert [c.result for c in back.cells] == [c.result for c in view.cells]
    assert back.export_button.isEnabled() and back.run_button.isEnabled() and not back.stop_button.isEnabled()
    back.statistic.setCurrentText("mean_logprob")  # recoloured from the saved statistics
    assert back.grid.item(1, 1).text() == f"{back.cells[3].result.stats.mean_logprob:.3g}"
    back.grid.cellClicked.emit(2, 0)  # a cell still lists its samples: its runs came back as one request's
    samples = fresh.tools["samples"].view
    assert samples.request is back.cells[4].request and samples.table.rowCount() == 2
    assert samples.result.samples == back.cells[4].result.samples


# Sample ×N ------------------------------------------------------------------------------------------------------

def samples_shown(view) -> dict:
    labels = [view.table.cellWidget(r, 5).text() for r in range(view.table.rowCount())]
    return {"rows": shown_rows(view), "texts": labels, "summary": view.summary.text(), "status": view.status.text(),
            "agreement": list(view.chart.bars.opts["height"])}


def test_a_sample_list_comes_back_saved_or_autosaved_and_its_rows_open_as_runs(qtbot, window, fresh, tmp_path):
    view = sampled(qtbot, window, n=5, max_tokens=8)
    shown = samples_shown(view)
    assert len(shown["rows"]) == 5 and "distinct-1" in shown["summary"]

    back = reopened(window, fresh, tmp_path / "samples.jsonl", "samples")
    assert samples_shown(back) == shown
    assert back.result == view.result and back.request.run_ids == view.request.run_ids
    row = 3
    run_id = int(back.table.item(row, 0).data(Qt.ItemDataRole.UserRole))
    back.table.cellDoubleClicked.emit(row, 1)
    assert fresh.playground.shown.id == run_id  # a row opens its sample as the shown run

    path = window.sessions.autosave.path  # the autosave keeps it too, and its recovery brings it back
    window.sampler.editors["top_k"].setValue(3)
    window.sessions.autosave.save_now()
    qtbot.waitUntil(lambda: path.exists() and session_file.load(path).views.samples is not None,
                    timeout=AUTOSAVE_MS * 4)
    assert fresh.sessions.new() and back.table.rowCount() == 0
    assert fresh.sessions.recover(session_file.load(path))
    assert samples_shown(back) == shown


# the steering grid ----------------------------------------------------------------------------------------------

def grid_shown(view) -> dict:
    t = view.table
    return {"cells": table(t, t.columnCount()), "tips": [t.item(0, c).toolTip() for c in range(t.columnCount())],
            "colours": [[t.item(r, c).background().color().rgba() for c in range(t.columnCount())]
                        for r in range(t.rowCount())],
            "headers": ([t.verticalHeaderItem(r).text() for r in range(t.rowCount())],
                        [t.horizontalHeaderItem(c).text() for c in range(t.columnCount())]),
            "status": view.status.text(), "inputs": (view.strengths.text(), view.layer_sets.text(),
                                                     view.samples.value())}


@needs_torch
def test_a_steering_grid_comes_back_with_its_cells_as_the_core_recorded_them(qtbot, window, fresh, tmp_path):
    grid = grid_with_vector(qtbot, window)
    grid.strengths.setText("0, 40")
    with qtbot.waitSignal(grid.ended, timeout=RUN_TIMEOUT):
        assert grid.run()
    qtbot.waitUntil(lambda: not window.playground.busy, timeout=RUN_TIMEOUT)
    shown = grid_shown(grid)
    assert "BROKEN" in shown["cells"][0][1] and shown["status"].startswith("2 of 2 cells done")

    back = reopened(window, fresh, tmp_path / "grid.jsonl", "steering")
    assert back.tabs.currentWidget() is back.grid and back.grid.isVisible()  # its tab in front
    assert grid_shown(back.grid) == shown
    assert back.grid.results == grid.results  # drawn from the saved results: nothing run again
    assert [r.request.run_ids for r in back.grid.plan.cells] == [r.request.run_ids for r in grid.plan.cells]
    assert back.grid.run_button.isEnabled() and not back.grid.stop_button.isEnabled()
    assert fresh.sessions.new() and back.grid.table.rowCount() == 0 and back.grid.record() is None  # another session
