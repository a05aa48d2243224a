"""The prompt set window in the real window: prompts run under the window's settings, the side-by-side columns or a
sweep cell's settings, each row the core's statistics of its run under a label; the exports are the core writers'
text with the label column; the set and its results are part of the session (saved, reopened, autosaved and
recovered; an edit marks it modified); Stop ends the set; bad input is one line and keeps the set."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from PySide6.QtCore import Qt

from app.core.compare.prompt_sets import PromptResult, results_csv, results_jsonl, results_markdown
from app.core.compare.statistics import compare
from app.core.models.drafts import BUILTIN_DRAFT_PATH
from app.core.models.sources import BUILTIN_NAME, ModelSpec
from app.core.session import session_file
from app.ui.files.autosave import AUTOSAVE_MS
from app.ui.main_window import MainWindow
from app.ui.tools.prompt_set.results_table import cells
from app.ui.tools.prompt_set.targets import COLUMNS, SWEEP_CELL
from app.ui.tools.prompt_set.view import PromptSetView
from app.ui.tools.side_by_side.column_model import short_name
from tests.core.compare.test_prompt_sets import markdown_rows
from tests.ui.tools.side_by_side.test_side_by_side import DRAFT, builtin_window  # noqa: F401 (a fixture)

RUN_TIMEOUT = 120_000
PROMPTS = ("Hello there", "Once upon a time", "The cat")


def prompt_set_window(w: MainWindow, prompts: tuple[str, ...] = PROMPTS, max_tokens: int = 4) -> PromptSetView:
    w.sampler.editors["max_tokens"].setValue(max_tokens)
    w.tools["prompt_set"].trigger()
    view = w.tools["prompt_set"].view
    assert view is not None and view.isVisible()
    view.paste.setPlainText("\n".join(prompts) + "\n")
    view.add_button.click()
    return view


def run_set(qtbot, w: MainWindow, view: PromptSetView) -> None:
    qtbot.mouseClick(view.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.jobs and all(j.results is not None for j in view.jobs) and not w.playground.busy
                    and view.export_button.isEnabled(), timeout=RUN_TIMEOUT)


def runs_of(w: MainWindow, request_id: int) -> list:
    return sorted(w.playground.session.of_request(request_id), key=lambda r: r.sequence)


def assert_rows_are_compare_of_the_runs(w: MainWindow, view: PromptSetView) -> None:
    """Every job's results are `compare` on its runs' traces, and the table shows them row for row."""
    expected = []
    for job in view.jobs:
        runs = runs_of(w, job.request.id)
        assert [r.trace.prompt_text for r in runs] == [job.prompt] * len(runs)
        assert job.results == tuple(PromptResult(job.index, job.prompt, job.target.label, s)
                                    for s in compare([r.trace for r in runs]).samples)
        expected.extend(job.results)
    assert view.results() == expected and view.table.rowCount() == len(expected)
    for row, r in enumerate(expected):
        assert tuple(view.table.item(row, c).text() for c in range(view.table.columnCount())) == cells(r)


def test_three_prompts_run_and_the_table_holds_compare_numbers(qtbot, window, tmp_path: Path):
    view = prompt_set_window(window)
    assert view.prompt_list() == list(PROMPTS) and view.paste.toPlainText() == ""
    view.count.setValue(2)
    run_set(qtbot, window, view)
    assert "3 of 3 runs done" in view.status.text() and view.table.rowCount() == 6
    assert_rows_are_compare_of_the_runs(window, view)
    assert {j.target.label for j in view.jobs} == {"T=0.8"}  # the panel's: temperature 0.8, no filter on
    assert all(r.trace.settings.seed == 3 for j in view.jobs for r in runs_of(window, j.request.id)[:1])
    results = view.results()
    for suffix, writer in (("csv", results_csv), ("jsonl", results_jsonl), ("md", results_markdown)):
        path = tmp_path / f"out.{suffix}"
        assert view.export(str(path))
        assert path.read_bytes().decode("utf-8") == writer(results)


def test_two_prompts_against_two_columns_give_four_labelled_rows(qtbot, window, tmp_path: Path):
    w = window
    w.tools["side"].trigger()
    side = w.tools["side"].view
    side.forms[0].boxes["temperature"].setValue(0.3)
    side.forms[1].boxes["temperature"].setValue(1.5)
    side.forms[1].boxes["top_p"].setValue(0.9)
    side.forms[1].model.set_choice(ModelSpec(w.playground.editing.model.source))  # its own model (the same one here)
    name = short_name(w.playground.editing.model)
    view = prompt_set_window(w, PROMPTS[:2])
    view.against.setCurrentText(COLUMNS)
    assert f"A: T=0.3, top-p=1 · B: T=1.5, top-p=0.9 · {name}" in view.status.text()  # what it will run against, said
    run_set(qtbot, w, view)
    assert view.table.rowCount() == 4 and "4 of 4 runs done" in view.status.text()
    assert_rows_are_compare_of_the_runs(w, view)
    base = w.playground.editing.settings
    assert [(j.index, j.target.label) for j in view.jobs] == [
        (0, "A: T=0.3, top-p=1"), (0, f"B: T=1.5, top-p=0.9 · {name}"), (1, "A: T=0.3, top-p=1"),
        (1, f"B: T=1.5, top-p=0.9 · {name}")]
    for job in view.jobs:  # each run ran under its column's settings, as the form holds them, on its model
        form = side.forms[0 if job.target.label.startswith("A") else 1]
        (run,) = runs_of(w, job.request.id)
        assert run.trace.settings == form.settings(base) == job.target.settings
        assert run.request.model == form.model.spec(w.playground.editing.model)
    assert [view.table.item(r, 1).text() for r in range(4)] == [j.target.label for j in view.jobs]
    labels = [j.target.label for j in view.jobs]
    for kind in ("csv", "jsonl", "md"):
        path = tmp_path / f"out.{kind}"
        assert view.export(str(path))
        text = path.read_text(encoding="utf-8")
        if kind == "csv":
            rows = list(csv.DictReader(io.StringIO(text)))
        elif kind == "jsonl":
            rows = [json.loads(line) for line in text.splitlines()]
        else:
            head, _, *body = markdown_rows(text)
            rows = [dict(zip(head, line, strict=True)) for line in body]
        assert [r["settings"] for r in rows] == labels, kind


def test_against_a_sweep_cell_the_runs_take_that_cell_s_settings(qtbot, window):
    w = window
    w.sampler.editors["max_tokens"].setValue(3)
    w.tools["sweep"].trigger()
    sweep = w.tools["sweep"].view
    sweep.count.setValue(1)
    sweep.values[0].setText("0.2,1.4")  # temperature
    sweep.values[1].setText("0.5,1")  # top-p
    assert sweep.run()
    qtbot.waitUntil(lambda: all(c.result is not None for c in sweep.cells) and not w.playground.busy,
                    timeout=RUN_TIMEOUT)
    sweep.grid.setCurrentCell(1, 0)  # temperature 1.4, top-p 0.5
    cell = next(c.cell for c in sweep.cells if (c.cell.row, c.cell.col) == (1, 0))
    view = prompt_set_window(w, PROMPTS[:2], max_tokens=3)
    view.against.setCurrentText(SWEEP_CELL)
    run_set(qtbot, w, view)
    assert [j.target.label for j in view.jobs] == ["T=1.4, top-p=0.5"] * 2
    for job in view.jobs:
        (run,) = runs_of(w, job.request.id)
        assert run.trace.settings == cell.settings
        assert (run.trace.settings.temperature, run.trace.settings.top_p) == (1.4, 0.5)
    assert_rows_are_compare_of_the_runs(w, view)


def test_no_columns_or_no_sweep_cell_yet_is_one_line(qtbot, window):
    view = prompt_set_window(window)
    for source, says in ((COLUMNS, "no side-by-side columns yet"), (SWEEP_CELL, "no sweep cell yet")):
        view.against.setCurrentText(source)
        with qtbot.waitSignal(view.failed) as said:
            assert not view.run()
        assert says in said.args[0] and "\n" not in said.args[0] and not window.playground.busy
    assert view.prompt_list() == list(PROMPTS)


def test_the_set_and_its_results_are_saved_in_the_session_and_come_back(qtbot, window, tmp_path: Path):
    w = window
    view = prompt_set_window(w, PROMPTS[:2])
    assert w.isWindowModified() and w.playground.session.prompt_set.prompts == PROMPTS[:2]  # an edit: modified
    run_set(qtbot, w, view)
    results = view.results()
    assert w.sessions.save_as(tmp_path / "s.jsonl") and not w.isWindowModified()
    view.prompts.item(0, 0).setText("edited")  # an edit of a cell marks the session modified, and is kept
    assert w.isWindowModified() and w.playground.session.prompt_set.prompts == ("edited", PROMPTS[1])
    assert w.sessions.new()
    assert view.prompt_list() == [] and view.table.rowCount() == 0 and not view.export_button.isEnabled()
    assert w.sessions.open(tmp_path / "s.jsonl")
    assert view.prompt_list() == list(PROMPTS[:2]) and view.results() == results and not w.isWindowModified()
    assert [tuple(view.table.item(r, c).text() for c in range(8)) for r in range(2)] == [cells(r) for r in results]
    assert view.export_button.isEnabled() and "as the session saved them" in view.status.text()
    for r in results:  # the runs the results came from came back with them
        assert w.playground.session.get(r.sample.run_id).trace.text == r.sample.text


def test_the_set_is_autosaved_and_recovered(qtbot, window):
    w = window
    view = prompt_set_window(w, PROMPTS[:2])
    run_set(qtbot, w, view)
    results = view.results()
    w.sessions.autosave.save_now()
    path = w.sessions.autosave.path
    qtbot.waitUntil(lambda: path.exists() and session_file.load(path).prompt_set is not None,
                    timeout=AUTOSAVE_MS * 4)
    doc = session_file.load(path)
    assert w.sessions.new() and view.prompt_list() == []
    assert w.sessions.recover(doc)
    assert view.prompt_list() == list(PROMPTS[:2]) and view.results() == results and w.isWindowModified()


def test_stop_ends_the_set_after_the_prompt_in_progress(qtbot, window):
    view = prompt_set_window(window, max_tokens=24)
    assert view.run()
    qtbot.waitUntil(lambda: view.jobs[0].request is not None and window.playground.busy, timeout=RUN_TIMEOUT)
    qtbot.mouseClick(view.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not window.playground.busy and not view.stop_button.isEnabled(), timeout=RUN_TIMEOUT)
    assert sum(j.request is not None for j in view.jobs) < len(PROMPTS)
    assert "stopped" in view.status.text() and view.run_button.isEnabled()


def test_bad_input_is_one_line_and_keeps_the_set(qtbot, window, tmp_path: Path):
    view = prompt_set_window(window)
    view.paste.setPlainText("   \n\n")
    with qtbot.waitSignal(view.failed) as said:
        assert not view.add_pasted()
    assert "nothing to add" in said.args[0] and view.paste.toPlainText() == "   \n\n"
    assert window.banner.isVisible() and "nothing to add" in window.banner.label.text()  # the window says it too
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{not json}\n')
    with qtbot.waitSignal(view.failed) as said:
        assert not view.load(str(bad))
    assert "line 2" in said.args[0] and "\n" not in said.args[0] and view.prompt_list() == list(PROMPTS)
    headless = tmp_path / "none.csv"
    headless.write_text("prompt\n")
    assert not view.load(str(headless)) and view.prompt_list() == list(PROMPTS)
    saved = tmp_path / "set.jsonl"
    assert view.save_set(str(saved))
    view.set_prompts([])
    with qtbot.waitSignal(view.failed) as said:
        assert not view.run()
    assert "empty" in said.args[0] and not window.playground.busy
    assert view.load(str(saved)) and view.prompt_list() == list(PROMPTS)


def test_run_set_while_another_run_is_busy_says_so_in_one_line(qtbot, window):
    view = prompt_set_window(window, max_tokens=64)
    assert window.playground.generate(window.playground.make_request())  # the window's own run, in progress
    with qtbot.waitSignal(view.failed) as said:
        assert not view.run()
    assert "in progress" in said.args[0] and "\n" not in said.args[0] and view.status.text() == said.args[0]
    assert view.jobs == [] and view.prompt_list() == list(PROMPTS)
    window.playground.stop()
    qtbot.waitUntil(lambda: not window.playground.busy, timeout=RUN_TIMEOUT)


def test_views_opened_after_the_set_see_it_busy_while_its_next_prompt_runs(qtbot, window):
    view = prompt_set_window(window, max_tokens=32)
    window.tools["samples"].trigger()  # opened after the set: it hears `busy_changed` after the set does
    samples = window.tools["samples"].view
    assert view.run()
    qtbot.waitUntil(lambda: view.jobs[1].request is not None, timeout=RUN_TIMEOUT)
    assert window.playground.busy and samples.stop_button.isEnabled() and not samples.sample_button.isEnabled()
    view.stop()
    qtbot.waitUntil(lambda: not window.playground.busy and not view.stop_button.isEnabled(), timeout=RUN_TIMEOUT)


def test_a_prompt_against_columns_on_two_models_is_one_job_and_the_window_s_model_stays(qtbot, builtin_window):  # noqa: F811
    """Each prompt runs under every column as one job: column B's model (the built-in draft) is held beside the
    window's, so neither is reloaded between the columns and the window keeps showing its own model."""
    w = builtin_window
    w.tools["side"].trigger()
    w.tools["side"].view.forms[1].model.set_choice(DRAFT)
    view = prompt_set_window(w, PROMPTS[:2])
    view.against.setCurrentText(COLUMNS)
    started, loaded = [], []
    w.playground.run_started.connect(started.append)
    w.playground.loaded.connect(loaded.append)
    run_set(qtbot, w, view)
    assert len(started) == 2  # one job per prompt, both columns in it
    assert loaded == []  # no column's model replaced the window's
    sources = [runs_of(w, j.request.id)[0].trace.model["source"] for j in view.jobs]
    assert sources == [BUILTIN_NAME, str(BUILTIN_DRAFT_PATH)] * 2
    assert w.playground.info.name == runs_of(w, view.jobs[0].request.id)[0].trace.model["name"]
    assert_rows_are_compare_of_the_runs(w, view)



def test_a_set_started_the_moment_a_sweep_ends_runs_every_prompt(qtbot, window):
    """No neighbour's bookkeeping comes between two jobs of a plan: a set started on the very turn the sweep's last
    job ends (when the model thread is free) runs all its prompts, none refused as busy."""
    w = window
    w.sampler.editors["max_tokens"].setValue(2)
    w.tools["sweep"].trigger()
    sweep = w.tools["sweep"].view
    sweep.count.setValue(1)
    sweep.values[0].setText("0.2,1.4")
    sweep.values[1].setText("0.5,1")
    view = prompt_set_window(w, PROMPTS[:2], max_tokens=2)
    started = []

    def start_the_set(busy: bool) -> None:
        if not busy and not started:
            started.append(view.run())

    w.playground.busy_changed.connect(start_the_set)
    assert sweep.run()
    qtbot.waitUntil(lambda: bool(started) and not w.playground.busy and not view._running, timeout=RUN_TIMEOUT)
    w.playground.busy_changed.disconnect(start_the_set)
    assert started == [True] and all(c.result is not None for c in sweep.cells)
    assert [j.results is not None for j in view.jobs] == [True, True], view.status.text()
    assert view.status.text().startswith("2 of 2 runs done ·")
