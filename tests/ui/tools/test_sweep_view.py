"""The sweep window in the real window: a 3×3 grid fills 9 cells, each the core's statistics of its samples, the
cells decoded together in batches (fewer jobs than cells)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from PySide6.QtCore import Qt

from app.core.compare.statistics import compare, sweep_row
from app.ui.main_window import MainWindow
from app.ui.tools.sweep_view import SweepView

RUN_TIMEOUT = 120_000


def sweep_window(w: MainWindow) -> SweepView:
    w.prompt.set_prompt("Hello there")
    w.sampler.editors["max_tokens"].setValue(4)
    w.tools["sweep"].trigger()
    view = w.tools["sweep"].view
    assert view is not None and view.isVisible()
    view.count.setValue(2)
    view.values[0].setText("0,0.9,1.8")  # temperature
    view.values[1].setText("0.5,0.9,1")  # top-p
    return view


def test_a_3x3_sweep_fills_9_cells_in_one_batch_and_its_csv_holds_them(qtbot, window, tmp_path: Path):
    view = sweep_window(window)
    jobs: list[object] = []
    window.playground.run_started.connect(jobs.append)  # once per job given to the model thread
    first_end: list[list[tuple[int, bool]]] = []  # as the first sample ends: every sample's (steps, running)

    def look() -> None:
        runs = [r for c in view.cells if c.request is not None for r in window.playground.session.of_request(
            c.request.id)]
        if not first_end and any(not r.running for r in runs):
            first_end.append([(len(r.steps), r.running) for r in runs])

    window.playground.session_changed.connect(look)  # (as the view-model routes each event, in their order)
    qtbot.mouseClick(view.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: all(c.result is not None for c in view.cells) and not window.playground.busy,
                    timeout=RUN_TIMEOUT)
    assert len(view.cells) == 9 and view.grid.rowCount() == 3 and view.grid.columnCount() == 3
    assert "9 of 9 cells done" in view.status.text() and "1 batch " in view.status.text()
    assert len(jobs) == view.batches == 1  # 9 cells × 2 samples: 18 rows, one batch
    (at_end,) = first_end  # when the first sample ended, all 18 had steps: decoded together, not cell by cell
    assert len(at_end) == 18 and all(n > 0 for n, _running in at_end) and sum(running for _n, running in at_end) == 17
    for c in view.cells:
        runs = sorted(window.playground.session.of_request(c.request.id), key=lambda r: r.sequence)
        assert len(runs) == 2 and {r.trace.settings.temperature for r in runs} == {c.cell.values["temperature"]}
        assert c.result == compare([r.trace for r in runs])  # the cell holds the core's numbers for its runs
    greedy = [c for c in view.cells if c.cell.values["temperature"] == 0]
    assert all(c.result.stats.unique == 1 for c in greedy)  # temperature 0: both samples alike
    view.statistic.setCurrentText("distinct_2")
    c = view.cells[4]
    assert view.grid.item(1, 1).text() == f"{c.result.stats.distinct_2:.3g}"
    path = tmp_path / "sweep.csv"
    view.export_csv(str(path))
    rows = list(csv.reader(io.StringIO(path.read_text())))
    assert rows[0][:3] == ["prompt", "temperature", "top_p"] and len(rows) == 10
    assert rows[5] == [str(x) for x in sweep_row(0, c.cell, c.result.stats, ["temperature", "top_p"])]


def test_batches_are_capped_and_stop_leaves_the_rest_empty_and_a_cell_lists_its_samples(qtbot, window):
    view = sweep_window(window)
    view.batch_rows = 4  # two cells of 2 samples a batch
    jobs: list[object] = []
    window.playground.run_started.connect(jobs.append)
    assert view.run()
    first = [c.request is not None for c in view.cells]
    assert first == [True, True] + [False] * 7  # the first batch: two cells, submitted together
    window.playground.session_changed.connect(lambda: view.stop() if view.cells[2].result is not None else None)
    qtbot.waitUntil(lambda: not window.playground.busy and not view.stop_button.isEnabled(), timeout=RUN_TIMEOUT)
    assert jobs[:2] == [view.cells[0].request, view.cells[2].request]  # a job per batch, started by its first cell
    done = sum(c.result is not None for c in view.cells)
    assert done in (3, 4) and "stopped" in view.status.text() and len(jobs) == view.batches == 2
    assert all(c.result is None for c in view.cells if c.request is None)  # not started: empty
    view.grid.cellClicked.emit(0, 0)
    samples = window.tools["samples"].view
    assert samples is not None and samples.request is view.cells[0].request
    assert samples.result == view.cells[0].result and samples.table.rowCount() == 2


def test_a_cell_opened_as_samples_names_all_its_settings_and_its_n(qtbot, window):
    view = sweep_window(window)
    view.count.setValue(4)
    view.values[0].setText("1.2,1.5")  # temperature
    view.values[1].setText("0.9,1")  # top-p
    assert view.run()
    qtbot.waitUntil(lambda: view.cells[0].result is not None and not window.playground.busy, timeout=RUN_TIMEOUT)
    assert view.cells[0].cell.values == {"temperature": 1.2, "top_p": 0.9}
    view.grid.cellClicked.emit(0, 0)
    samples = window.tools["samples"].view
    assert samples.request is view.cells[0].request and samples.count.value() == 4  # not the box's 8
    assert samples.status.text().startswith("4 samples at T=1.2, top-p=0.9, seeds ")


def test_a_bad_axis_is_one_line_and_nothing_runs(qtbot, window):
    view = sweep_window(window)
    view.values[0].setText("0.2,abc")
    with qtbot.waitSignal(view.failed) as said:
        assert not view.run()
    assert "numbers" in said.args[0] and not window.playground.busy and view.cells == []


def test_a_sweep_while_another_run_is_busy_says_so_in_one_line(qtbot, window):
    view = sweep_window(window)
    window.sampler.editors["max_tokens"].setValue(64)
    assert window.playground.generate(window.playground.make_request())  # the window's own run, in progress
    with qtbot.waitSignal(view.failed) as said:
        assert not view.run()
    assert "in progress" in said.args[0] and "\n" not in said.args[0] and view.status.text() == said.args[0]
    assert view.cells == [] and view.run_button.isEnabled()
    window.playground.stop()
    qtbot.waitUntil(lambda: not window.playground.busy, timeout=RUN_TIMEOUT)


def test_views_opened_after_the_sweep_see_it_busy_while_its_next_batch_runs(qtbot, window):
    view = sweep_window(window)
    view.batch_rows = 2  # one cell of 2 samples a batch
    window.sampler.editors["max_tokens"].setValue(32)
    window.tools["samples"].trigger()  # opened after the sweep: it hears `busy_changed` after the sweep does
    samples = window.tools["samples"].view
    assert view.run()
    qtbot.waitUntil(lambda: view.batches == 2, timeout=RUN_TIMEOUT)
    assert window.playground.busy and samples.stop_button.isEnabled() and not samples.sample_button.isEnabled()
    view.stop()
    qtbot.waitUntil(lambda: not window.playground.busy and not view.stop_button.isEnabled(), timeout=RUN_TIMEOUT)
