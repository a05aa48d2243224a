"""The sweep window in the real window: a 3×3 grid fills 9 cells, each the core's statistics of its samples."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from PySide6.QtCore import Qt

from app.core.compare import compare, sweep_row
from app.ui.main_window import MainWindow
from app.ui.sweep_view import SweepView

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


def test_a_3x3_sweep_fills_9_cells_and_its_csv_holds_them(qtbot, window, tmp_path: Path):
    view = sweep_window(window)
    qtbot.mouseClick(view.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: all(c.result is not None for c in view.cells) and not window.playground.busy,
                    timeout=RUN_TIMEOUT)
    assert len(view.cells) == 9 and view.grid.rowCount() == 3 and view.grid.columnCount() == 3
    assert "9 of 9 cells done" in view.status.text()
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


def test_clicking_a_cell_lists_its_samples_and_stop_leaves_the_rest_empty(qtbot, window):
    view = sweep_window(window)
    assert view.run()
    qtbot.waitUntil(lambda: view.cells[0].result is not None, timeout=RUN_TIMEOUT)
    view.stop()
    qtbot.waitUntil(lambda: not window.playground.busy and not view.stop_button.isEnabled(), timeout=RUN_TIMEOUT)
    assert 1 <= sum(c.result is not None for c in view.cells) < 9 and "stopped" in view.status.text()
    view.grid.cellClicked.emit(0, 0)
    samples = window.tools["samples"].view
    assert samples is not None and samples.request is view.cells[0].request
    assert samples.result == view.cells[0].result and samples.table.rowCount() == 2


def test_a_bad_axis_is_one_line_and_nothing_runs(qtbot, window):
    view = sweep_window(window)
    view.values[0].setText("0.2,abc")
    with qtbot.waitSignal(view.failed) as said:
        assert not view.run()
    assert "numbers" in said.args[0] and not window.playground.busy and view.cells == []
