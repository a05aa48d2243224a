"""The prompt set window in the real window: three prompts run one after another, each row the core's statistics
of its run; the exports are the core writers' text; Stop ends the set; bad input is one line and keeps the set."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from app.core.compare import compare
from app.core.prompt_sets import PromptResult, results_csv, results_jsonl, results_markdown
from app.ui.main_window import MainWindow
from app.ui.prompt_set_view import OUTPUT, PROMPT, PromptSetView, number

RUN_TIMEOUT = 120_000
PROMPTS = ("Hello there", "Once upon a time", "The cat")


def prompt_set_window(w: MainWindow, max_tokens: int = 4) -> PromptSetView:
    w.sampler.editors["max_tokens"].setValue(max_tokens)
    w.tools["prompt_set"].trigger()
    view = w.tools["prompt_set"].view
    assert view is not None and view.isVisible()
    view.paste.setPlainText("\n".join(PROMPTS) + "\n")
    view.add_button.click()
    return view


def test_three_prompts_run_and_the_table_holds_compare_numbers(qtbot, window, tmp_path: Path):
    view = prompt_set_window(window)
    assert view.prompt_list() == list(PROMPTS) and view.paste.toPlainText() == ""
    view.count.setValue(2)
    qtbot.mouseClick(view.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: all(j.results is not None for j in view.jobs) and not window.playground.busy
                    and view.export_button.isEnabled(), timeout=RUN_TIMEOUT)
    assert "3 of 3 prompts done" in view.status.text() and view.table.rowCount() == 6
    row = 0
    for i, job in enumerate(view.jobs):
        runs = sorted(window.playground.session.of_request(job.request.id), key=lambda r: r.sequence)
        assert [r.trace.prompt_text for r in runs] == [PROMPTS[i]] * 2
        expected = compare([r.trace for r in runs]).samples
        assert job.results == tuple(PromptResult(i, PROMPTS[i], s) for s in expected)
        for s in expected:
            cells = [view.table.item(row, c).text() for c in range(view.table.columnCount())]
            assert cells[:5] == [str(i + 1), str(s.sequence + 1), str(s.length), number(s.mean_logprob),
                                 number(s.perplexity, 2)]
            assert cells[PROMPT] == PROMPTS[i] and cells[OUTPUT] == s.text.replace("\n", "↵")
            row += 1
    results = view.results()
    for suffix, writer in (("csv", results_csv), ("jsonl", results_jsonl), ("md", results_markdown)):
        path = tmp_path / f"out.{suffix}"
        assert view.export(str(path))
        assert path.read_bytes().decode("utf-8") == writer(results)


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
