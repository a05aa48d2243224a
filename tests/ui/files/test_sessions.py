"""Sessions in the real window: File → Save / Open / New keep and bring back the prompt, chat, settings, model and
every run; a newer or damaged file is refused in the banner and the session shown stays; unsaved changes are
asked about; Open Recent lists the files. The autosave and its recovery: tests/ui/files/test_autosave.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox

from app.core.events import Message
from app.core.session import session_file
from app.core.session.session_file import SavedRun, SavedSession
from app.ui.files.sessions import question
from app.ui.main_window import MainWindow
from tests.core.record.test_trace import make_run
from tests.ui.conftest import RUN_TIMEOUT
from tests.ui.test_window import run


def branch(qtbot, w: MainWindow, parent: tuple[int, int], max_tokens: int = 4) -> None:
    """A run recorded as branching from `parent` (run id, step)."""
    w.sampler.editors["max_tokens"].setValue(max_tokens)
    with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT):
        assert w.playground.generate(replace(w.playground.make_request(), parent=parent))


def same_steps(a: list, b: list) -> bool:
    """Step for step equal, every float32 bit of every record."""
    return len(a) == len(b) and all(
        (s.step, s.text, s.top_texts) == (t.step, t.text, t.top_texts) and s.sample == t.sample
        and s.sample.values.tobytes() == t.sample.values.tobytes() for s, t in zip(a, b, strict=True))


def fill(qtbot, w: MainWindow) -> list:
    """A prompt, chat messages, settings and three runs (one named, two branches): the session's runs."""
    w.prompt.set_prompt("def add(a, b):\n")
    w.prompt.chat.system.setPlainText("Be brief.")
    w.prompt.chat.turns[0].text.setPlainText("Hi\n")
    w.sampler.editors["top_k"].setValue(17)
    run(qtbot, w, max_tokens=6)
    first = w.playground.shown
    branch(qtbot, w, (first.id, 2))
    branch(qtbot, w, (w.playground.shown.id, 1))
    w.playground.branches.rename(first.id, "the first")
    return list(w.playground.session.runs.values())


def test_a_session_saved_and_reopened_in_the_window_equals_the_original(qtbot, window, tmp_path):
    w = window
    runs = fill(qtbot, w)
    assert w.isWindowModified() and w.windowTitle().startswith("Untitled")
    settings, messages = w.sampler.settings(), w.prompt.chat.messages()
    assert w.sessions.save_as(tmp_path / "s.jsonl")
    assert w.windowTitle().startswith("s.jsonl") and not w.isWindowModified()

    assert w.sessions.new()
    assert w.prompt.prompt() == "" and w.prompt.chat.messages() == () and not w.playground.session.runs
    assert w.output.text.toPlainText() == "" and w.timeline.chart.n == 0 and w.step_panel.chart.chart.shown is None
    assert w.windowTitle().startswith("Untitled") and not w.isWindowModified()

    assert w.sessions.open(tmp_path / "s.jsonl")
    back = list(w.playground.session.runs.values())
    assert w.prompt.prompt() == "def add(a, b):\n" and w.prompt.chat.messages() == messages
    assert messages == (Message("system", "Be brief."), Message("user", "Hi\n"))
    assert w.sampler.settings() == settings and w.model_bar.source() == runs[0].request.model.source
    assert [r.name for r in back] == ["the first", "", ""]
    assert [r.parent for r in back] == [None, (back[0].id, 2), (back[1].id, 1)]
    assert all(same_steps(a.steps, b.steps) for a, b in zip(runs, back, strict=True))
    assert w.playground.shown is back[-1] and w.output.text.toPlainText().startswith(back[-1].trace.text)
    assert w.timeline.chart.n == len(back[-1].steps) and w.step_panel.chart.chart.shown[0] is back[-1].steps[-1].sample
    assert w.windowTitle().startswith("s.jsonl") and not w.isWindowModified()
    assert w.store.get("recent_sessions")[0] == str((tmp_path / "s.jsonl").resolve())
    w.playground.branches.rename(back[1].id, "renamed")
    assert w.isWindowModified()
    w.playground.branches.rename(back[1].id, "")
    assert not w.isWindowModified()  # as saved again

    assert run(qtbot, w, max_tokens=3).reason in ("length", "eos")  # it goes on with its model
    assert len(w.playground.session.runs) == 4 and w.isWindowModified()


def test_a_session_opens_without_its_model_to_look(qtbot, window, tmp_path):
    trace = make_run(steps=5)
    path = tmp_path / "elsewhere.jsonl"
    session_file.save(SavedSession(prompt="π", model="/no/such/model", backend="torch",
                                   runs=(SavedRun("kept", trace),)), path)
    loads = []
    window.playground.loading.connect(lambda *a: loads.append(a))
    assert window.sessions.open(path)
    shown = window.playground.shown
    assert same_steps(shown.steps, trace.steps) and shown.name == "kept"
    assert window.output.text.toPlainText().startswith(trace.text) and window.step_panel.chart.chart.shown is not None
    assert window.model_bar.source() == "/no/such/model" and not window.banner.isVisible()
    qtbot.wait(50)
    assert not loads and not window.playground.busy  # nothing was loaded to look
    window.generate()  # going on needs the model: one clear line, and the session stays
    qtbot.waitUntil(window.banner.isVisible, timeout=RUN_TIMEOUT)
    assert "no model folder at '/no/such/model'" in window.banner.label.text()
    assert next(r.name for r in window.playground.session.runs.values()) == "kept"


def newer(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    head = json.loads(lines[0])
    head["version"] = 99
    path.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n", encoding="utf-8")


def truncated(path: Path) -> None:
    path.write_text("\n".join(path.read_text(encoding="utf-8").splitlines()[:-3]) + "\n", encoding="utf-8")


@pytest.mark.parametrize(("damage", "message"), [(newer, "newer Logit Lab"), (truncated, "truncated")])
def test_a_newer_or_damaged_file_says_so_and_the_session_shown_stays(qtbot, window, tmp_path, damage, message):
    w = window
    w.prompt.set_prompt("keep me")
    run(qtbot, w, max_tokens=4)
    assert w.sessions.save_as(tmp_path / "s.jsonl")
    damage(tmp_path / "s.jsonl")
    w.prompt.set_prompt("keep me too")
    before = (list(w.playground.session.runs.values()), w.playground.shown, w.output.text.toPlainText())
    assert not w.sessions.open(tmp_path / "s.jsonl")
    assert w.banner.isVisible() and "Cannot open s.jsonl" in w.banner.label.text()
    assert message in w.banner.label.text() and str(tmp_path / "s.jsonl") in w.banner.label.text()
    assert (list(w.playground.session.runs.values()), w.playground.shown, w.output.text.toPlainText()) == before
    assert w.prompt.prompt() == "keep me too" and w.isWindowModified()


def test_unsaved_changes_are_asked_about_before_new_open_and_close(qtbot, window, tmp_path):
    w = window
    answers: list[str] = []
    w.sessions.ask = lambda: answers.pop(0)
    assert w.sessions.save_as(tmp_path / "s.jsonl")
    w.sampler.editors["temperature"].setValue(1.5)
    assert w.isWindowModified()

    answers[:] = ["cancel"]
    assert not w.sessions.new() and w.sampler.settings().temperature == 1.5
    answers[:] = ["cancel"]
    w.close()
    assert w.isVisible() and not answers  # asked, and the window stayed

    answers[:] = ["save"]
    assert w.sessions.new() and not answers and not w.isWindowModified()
    assert session_file.load(tmp_path / "s.jsonl").settings.temperature == 1.5  # saved before the new session

    w.prompt.set_prompt("thrown away")
    answers[:] = ["discard"]
    assert w.sessions.open(tmp_path / "s.jsonl") and not answers and w.prompt.prompt() != "thrown away"
    w.prompt.set_prompt("also thrown away")
    answers[:] = ["discard"]
    w.close()
    assert not w.isVisible() and not answers


def test_the_question_is_save_discard_or_cancel(qtbot, window):
    box = question(window, "s.jsonl")
    b = QMessageBox.StandardButton
    assert box.standardButtons() == b.Save | b.Discard | b.Cancel and box.defaultButton() is box.button(b.Save)
    assert "s.jsonl" in box.text()


def test_open_recent_lists_the_files_and_opens_one(qtbot, window, tmp_path):
    w = window
    for name in ("a.jsonl", "b.jsonl"):
        w.prompt.set_prompt(name)
        assert w.sessions.save_as(tmp_path / name)
    w.sessions.recent.menu.aboutToShow.emit()
    actions = [a for a in w.sessions.recent.menu.actions() if "jsonl" in a.text()]
    assert [a.text().split()[1] for a in actions] == ["b.jsonl", "a.jsonl"]
    actions[1].trigger()
    assert w.prompt.prompt() == "a.jsonl" and w.windowTitle().startswith("a.jsonl")
