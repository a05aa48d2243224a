"""Sessions in the real window: File → Save / Open / New keep and bring back the prompt, chat, settings, model and
every run; a newer or damaged file is refused in the banner and the session shown stays; unsaved changes are
asked about; text typed before a kill -9 is autosaved and offered back on the next start, after any number of
crashes, and a window running beside it keeps its own autosave."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox

from app.core import session_file
from app.core.events import Message
from app.core.models import ModelSpec
from app.core.session_file import SavedRun, SavedSession
from app.core.settings import SamplerSettings
from app.ui.main_window import MainWindow
from app.ui.sessions import AUTOSAVE_MS, question
from tests.core.test_trace import make_run
from tests.ui.conftest import RUN_TIMEOUT
from tests.ui.test_window import run

ROOT = Path(__file__).resolve().parents[2]


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
    w.sessions.recent_menu.aboutToShow.emit()
    actions = [a for a in w.sessions.recent_menu.actions() if "jsonl" in a.text()]
    assert [a.text().split()[1] for a in actions] == ["b.jsonl", "a.jsonl"]
    actions[1].trigger()
    assert w.prompt.prompt() == "a.jsonl" and w.windowTitle().startswith("a.jsonl")


def test_edits_are_autosaved_a_few_seconds_later_and_a_save_or_a_clean_exit_removes_it(qtbot, window):
    w = window
    path = w.sessions.autosave_path
    w.prompt.completion.selectAll()
    qtbot.keyClicks(w.prompt.completion, "typed")
    assert not path.exists()  # not at each keystroke
    qtbot.waitUntil(path.exists, timeout=AUTOSAVE_MS * 4)
    assert session_file.load(path).prompt == "typed"
    w.sessions.save_as(path.parent / "s.jsonl")
    qtbot.waitUntil(lambda: not path.exists(), timeout=AUTOSAVE_MS * 4)
    w.sampler.editors["top_p"].setValue(0.5)
    qtbot.waitUntil(path.exists, timeout=AUTOSAVE_MS * 4)
    assert session_file.load(path).settings.top_p == 0.5 and session_file.load(path).origin == str(
        path.parent / "s.jsonl")
    w.close()
    assert not path.exists()


def test_an_autosave_that_cannot_be_written_says_why_in_the_banner(qtbot, window, tmp_path):
    (tmp_path / "a file").write_text("not a folder")
    window.sessions.autosave_path = tmp_path / "a file" / "autosave.jsonl"
    window.prompt.set_prompt("typed")
    qtbot.waitUntil(window.banner.isVisible, timeout=AUTOSAVE_MS * 4)
    assert "Autosave failed: cannot write" in window.banner.label.text()


DRIVER = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtTest import QTest
from app.core.models import ModelSpec
from app.ui.main import make_app
from app.ui.main_window import MainWindow

app = make_app()
w = MainWindow(spec=ModelSpec(sys.argv[1], "torch"))
w.show()

def type_text():
    w.prompt.completion.setFocus()
    w.prompt.completion.selectAll()
    QTest.keyClicks(w.prompt.completion, sys.argv[2])

QTimer.singleShot(200, type_text)
app.exec()
"""
TYPED = "def kill(signal=9):  # typed, then killed"


def isolated(tmp_path: Path) -> dict[str, str]:
    return {f"XDG_{k}_HOME": str(tmp_path / k.lower()) for k in ("CONFIG", "STATE", "DATA", "CACHE")}


def typed_then_killed(tiny_path: Path, tmp_path: Path, text: str) -> Path:
    """A window in its own process, `text` typed into it, killed (SIGKILL: no close event, no cleanup) once it has
    autosaved it; its autosave file."""
    env = {**os.environ, **isolated(tmp_path), "QT_QPA_PLATFORM": "offscreen", "HF_HUB_OFFLINE": "1"}
    with (tmp_path / "stderr").open("wb") as err, subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(tiny_path), text], cwd=ROOT, env=env, stderr=err) as app:
        autosave = tmp_path / "state" / "logitlab" / f"autosave-{app.pid}.jsonl"
        try:
            deadline = time.monotonic() + RUN_TIMEOUT / 1000
            while not (autosave.exists() and session_file.load_header(autosave).prompt == text):
                assert app.poll() is None, (tmp_path / "stderr").read_text()
                assert time.monotonic() < deadline, "no autosave"
                time.sleep(0.1)
        finally:
            app.kill()
    assert app.returncode == -9
    return autosave


def test_text_typed_before_each_of_two_kill_9_is_offered_back_on_the_next_start(qtbot, tiny_path, tmp_path,
                                                                              monkeypatch):
    first = typed_then_killed(tiny_path, tmp_path, TYPED)
    second = typed_then_killed(tiny_path, tmp_path, TYPED + " again")  # it offered the first, and was killed too
    assert first.exists() and second.exists()

    for k, v in isolated(tmp_path).items():
        monkeypatch.setenv(k, v)
    w = MainWindow(spec=ModelSpec(str(tiny_path), "torch"))
    qtbot.addWidget(w)
    w.show()
    assert w.prompt.prompt() != TYPED  # the killed app never saved its preferences
    qtbot.waitUntil(lambda: w.banner.isVisible() and w.banner.action.text() == "Restore", timeout=RUN_TIMEOUT)
    assert "did not close cleanly" in w.banner.label.text() and "(1 more after it)" in w.banner.label.text()
    w.banner.action.click()  # the newest first
    assert w.prompt.prompt() == TYPED + " again" and w.isWindowModified()
    assert w.banner.isVisible() and TYPED[:20] in w.banner.label.text() and "more after" not in w.banner.label.text()
    w.banner.action.click()
    assert w.prompt.prompt() == TYPED and not w.banner.isVisible()
    assert w.sessions.autosave_path.exists() and not first.exists()  # restored, and still safe if killed again
    w.close()
    assert not list(w.sessions.folder.iterdir())


DEAD = 2**31 - 1  # a process id no process has


def autosaved(folder: Path, pid: int, prompt: str, age: float = 0) -> Path:
    """The autosave file a window of process `pid` left, `age` seconds ago."""
    path = folder / f"autosave-{pid}.jsonl"
    session_file.save(SavedSession(prompt=prompt), path)
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_every_crashed_windows_autosave_is_offered_at_every_start_until_restored(qtbot, tiny_path, store, tmp_path):
    older, newer = autosaved(tmp_path, DEAD, "older", age=60), autosaved(tmp_path, DEAD - 1, "newer")
    first = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), "torch"))  # it offers both, and is killed:
    qtbot.addWidget(first)  # it never closes (never cleans up) before the next start
    first.show()
    qtbot.waitUntil(lambda: first.banner.isVisible(), timeout=RUN_TIMEOUT)
    assert "“newer…”" in first.banner.label.text() and "(1 more after it)" in first.banner.label.text()
    assert older.exists() and newer.exists()  # offering moves nothing
    w = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), "torch"))  # the next start
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.banner.isVisible(), timeout=RUN_TIMEOUT)
    assert w.sessions.offered == [newer, older] and "(1 more after it)" in w.banner.label.text()
    assert w.sessions.restore() and w.prompt.prompt() == "newer"
    assert "“older…”" in w.banner.label.text()
    assert w.sessions.restore() and w.prompt.prompt() == "older" and not w.sessions.offered
    w.close()
    first.close()


def test_a_running_windows_autosave_is_left_alone_and_a_clean_exit_keeps_what_was_not_restored(qtbot, tiny_path,
                                                                                               store, tmp_path):
    running = autosaved(tmp_path, os.getppid(), "another window's, typed just now")  # a live process, older
    before = running.read_bytes()
    crashed = autosaved(tmp_path, DEAD, "a crashed window's")
    w = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), "torch"))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.banner.isVisible(), timeout=RUN_TIMEOUT)
    assert w.sessions.offered == [crashed] and "more after" not in w.banner.label.text()
    assert "a crashed window" in w.banner.label.text()
    w.prompt.set_prompt("typed here")
    w.sessions.autosave()  # (now, not a few seconds later)
    qtbot.waitUntil(w.sessions.autosave_path.exists, timeout=AUTOSAVE_MS * 4)  # its own file, beside the other
    assert running.read_bytes() == before
    w.close()  # a clean exit: the crashed window's session, not restored, is kept aside and offered no more
    assert running.read_bytes() == before and not w.sessions.autosave_path.exists() and not crashed.exists()
    assert session_file.load(tmp_path / f"recovered-{DEAD}.jsonl").prompt == "a crashed window's"
    again = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), "torch"))
    qtbot.addWidget(again)
    again.show()
    qtbot.wait(50)
    assert again.sessions.offered == [] and not again.banner.isVisible()
    again.close()


def test_restoring_a_session_that_had_a_file_keeps_its_name(qtbot, window, tmp_path):
    w = window
    doc = SavedSession(prompt="from a file", settings=SamplerSettings(top_k=3), origin=str(tmp_path / "mine.jsonl"))
    session_file.save(doc, w.sessions.folder / f"autosave-{DEAD}.jsonl")
    w.sessions._offer_recovery()  # as at the start of the next run
    assert w.banner.isVisible() and "“mine.jsonl”" in w.banner.label.text()
    assert w.sessions.restore()
    assert w.prompt.prompt() == "from a file" and w.sampler.settings().top_k == 3
    assert w.windowTitle().startswith("mine.jsonl") and w.isWindowModified()
