"""Run ▸ Steering… ▸ Strength × layer grid in the real window, on the tiny model through the model thread: the grid's
cells run as the plan's jobs under one seed, and the table holds what the core recorded for each: the text, the
perplexity under the unsteered model, the mean KL, the relative strength, BROKEN in red where the core marked it;
strengths that are not numbers are one line in the status."""

from __future__ import annotations

from app.core.compare.steer_grid import cell_result, mark_broken
from app.ui.main_window import MainWindow
from app.ui.tools.inside.steer_grid_view import BROKEN
from tests.ui.conftest import needs_torch

RUN_TIMEOUT = 60_000


def one_line(text: str) -> str:
    return text.replace("\n", "↵")


def grid_with_vector(qtbot, window: MainWindow):
    """The steering dock opened on a 4-token prompt and a vector made from its pairs: its grid tab's view."""
    window.prompt.set_prompt("The day was")
    window.sampler.editors["max_tokens"].setValue(4)
    window.tools["steering"].trigger()
    dock = window.tools["steering"].view
    with qtbot.waitSignal(dock.made, timeout=RUN_TIMEOUT):
        assert dock.make()
    return dock.grid


@needs_torch
def test_the_grid_table_holds_each_cells_recorded_values(qtbot, window: MainWindow):
    grid = grid_with_vector(qtbot, window)
    dock = window.tools["steering"].view
    assert grid.layer_sets.text() == "1"  # the vector's middle layer
    grid.strengths.setText("nine")
    assert not grid.run() and grid.status.text() == "strengths are numbers with commas (1,2,4), got 'nine'"
    grid.strengths.setText("0, 40")
    grid.layer_sets.setText("1; 0-1")  # a layer the vector has no direction for: said before any cell runs
    assert not grid.run() and grid.status.text().startswith("the vector has no direction for layer 0 (it has 1")
    assert not window.playground.busy and not grid.plan.cells
    grid.layer_sets.setText("1")
    with qtbot.waitSignal(grid.ended, timeout=RUN_TIMEOUT):
        assert grid.run()
    qtbot.waitUntil(lambda: not window.playground.busy, timeout=RUN_TIMEOUT)
    runs = grid.plan.cells
    assert [r.cell.strength for r in runs] == [0.0, 40.0] and grid.plan.jobs == 2
    assert runs[0].request.settings.seed == runs[1].request.settings.seed
    session = window.playground.session
    expected = mark_broken([cell_result(r.cell, session.finished_traces(r.request.id), dock.vector) for r in runs])
    assert [r.result for r in runs] == expected  # the plan holds the core's results for the session's records
    t = grid.table
    assert (t.rowCount(), t.columnCount()) == (1, 2)
    assert t.verticalHeaderItem(0).text() == "layers 1" and t.horizontalHeaderItem(0).text() == "0 (unsteered)"
    base, steered = expected
    assert t.item(0, 0).text() == f"ppl {base.perplexity:.3g} · unsteered\n{one_line(base.text)}"
    assert steered.broken  # strength 40 is ~20× the residual norm here: the core marks the cell broken
    assert t.item(0, 1).text() == (f"BROKEN · ppl {steered.perplexity:.3g} · KL {steered.mean_kl:.3g} · "
                                   f"{steered.relative:.2g}× norm\n{one_line(steered.text)}")
    assert steered.mean_kl > 0 and steered.relative == dock.vector.relative(1, 40.0)
    assert t.item(0, 1).background().color() == BROKEN  # in red
    assert t.item(0, 0).background().color() != BROKEN
    assert "perplexity under the unsteered model" in t.item(0, 1).toolTip()
    assert grid.status.text().startswith("2 of 2 cells done") and grid.run_button.isEnabled()
