"""The session's autosave in the real window: text typed before a kill -9 is autosaved and offered back on the next
start, after any number of crashes; a window running beside it keeps its own autosave; a clean exit removes it and
keeps aside what was offered and not restored (app/ui/files/autosave.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from app.core.models.sources import ModelSpec
from app.core.session import session_file
from app.core.session.session_file import SavedSession
from app.core.settings import SamplerSettings
from app.ui.banner import Banner
from app.ui.files.autosave import AUTOSAVE_MS, Autosave
from app.ui.main_window import MainWindow
from tests.ui.conftest import RUN_TIMEOUT

ROOT = Path(__file__).resolve().parents[3]


def test_edits_are_autosaved_a_few_seconds_later_and_a_save_or_a_clean_exit_removes_it(qtbot, window):
    w = window
    path = w.sessions.autosave.path
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
    window.sessions.autosave.path = tmp_path / "a file" / "autosave.jsonl"
    window.prompt.set_prompt("typed")
    qtbot.waitUntil(window.banner.isVisible, timeout=AUTOSAVE_MS * 4)
    assert "Autosave failed: cannot write" in window.banner.label.text()


DRIVER = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtTest import QTest
from app.core.models.sources import ModelSpec
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
    assert w.sessions.autosave.path.exists() and not first.exists()  # restored, and still safe if killed again
    w.close()
    assert not list(w.sessions.autosave.folder.iterdir())


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
    assert w.sessions.autosave.offered == [newer, older] and "(1 more after it)" in w.banner.label.text()
    assert w.sessions.autosave.restore() and w.prompt.prompt() == "newer"
    assert "“older…”" in w.banner.label.text()
    assert w.sessions.autosave.restore() and w.prompt.prompt() == "older" and not w.sessions.autosave.offered
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
    assert w.sessions.autosave.offered == [crashed] and "more after" not in w.banner.label.text()
    assert "a crashed window" in w.banner.label.text()
    w.prompt.set_prompt("typed here")
    w.sessions.autosave.save_now()  # (now, not a few seconds later)
    qtbot.waitUntil(w.sessions.autosave.path.exists, timeout=AUTOSAVE_MS * 4)  # its own file, beside the other
    assert running.read_bytes() == before
    w.close()  # a clean exit: the crashed window's session, not restored, is kept aside and offered no more
    assert running.read_bytes() == before and not w.sessions.autosave.path.exists() and not crashed.exists()
    assert session_file.load(tmp_path / f"recovered-{DEAD}.jsonl").prompt == "a crashed window's"
    again = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), "torch"))
    qtbot.addWidget(again)
    again.show()
    qtbot.wait(50)
    assert again.sessions.autosave.offered == [] and not again.banner.isVisible()
    again.close()


def test_restoring_a_session_that_had_a_file_keeps_its_name(qtbot, window, tmp_path):
    w = window
    doc = SavedSession(prompt="from a file", settings=SamplerSettings(top_k=3), origin=str(tmp_path / "mine.jsonl"))
    session_file.save(doc, w.sessions.autosave.folder / f"autosave-{DEAD}.jsonl")
    w.sessions.autosave.offer()  # as at the start of the next run
    assert w.banner.isVisible() and "“mine.jsonl”" in w.banner.label.text()
    assert w.sessions.autosave.restore()
    assert w.prompt.prompt() == "from a file" and w.sampler.settings().top_k == 3
    assert w.windowTitle().startswith("mine.jsonl") and w.isWindowModified()


def test_the_autosave_alone_writes_what_is_unsaved_and_hands_a_restored_session_to_recover(qtbot, tmp_path):
    """Without a window: `save_now` writes `unsaved()` (None removes the file), `offer` finds a gone window's file,
    `restore` gives its session to `recover` and makes it this process's autosave."""
    banner = Banner()
    qtbot.addWidget(banner)
    unsaved: list[SavedSession | None] = [SavedSession(prompt="typed")]
    recovered: list[SavedSession] = []
    autosave = Autosave(tmp_path, banner, lambda: unsaved[0], lambda doc: recovered.append(doc) or True, banner)
    autosave.save_now()
    qtbot.waitUntil(autosave.path.exists)
    assert session_file.load(autosave.path).prompt == "typed"
    unsaved[0] = None
    autosave.save_now()
    qtbot.waitUntil(lambda: not autosave.path.exists())
    gone = autosaved(tmp_path, DEAD, "a crashed window's")
    autosave.offer()
    assert autosave.offered == [gone] and banner.action.text() == "Restore"
    assert autosave.restore() and [d.prompt for d in recovered] == ["a crashed window's"]
    assert not gone.exists() and session_file.load(autosave.path).prompt == "a crashed window's"
    autosave.closed()
    assert not autosave.path.exists()
