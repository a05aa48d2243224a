"""`logitlab --screenshot` as a user runs it: a real subprocess on Qt's offscreen platform. A path it cannot write
is refused before the window opens; a picture is saved once, at the size asked, and the user's preferences are
never read nor written."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtGui import QImage

from tests.e2e.test_cli import ENV, logitlab

NO_DISPLAY = {k: v for k, v in ENV.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}


@pytest.fixture
def saved_session(tmp_path: Path) -> Path:
    """A session file of one run: a screenshot of it loads no model."""
    from app.core.session.session_file import SavedRun, SavedSession, save
    from tests.core.record.test_trace import make_run

    path = tmp_path / "session.jsonl"
    save(SavedSession(prompt="def f():", runs=(SavedRun("first", make_run(steps=3)),), shown=4), path)
    return path


@pytest.fixture
def user_preferences(tmp_path: Path, qapp) -> tuple[dict, Path]:  # (qapp: a QApplication, for the geometry)
    """An environment whose config folder holds the user's preferences: a small window, their own prompt, a model
    that is gone."""
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QWidget

    from app.ui.files.preferences import Preferences

    path = tmp_path / "config" / "logitlab" / "preferences.ini"
    small = QWidget()
    small.resize(852, 600)
    prefs = Preferences(QSettings(str(path), QSettings.Format.IniFormat))
    for name, value in (("geometry", small.saveGeometry()), ("prompt", "mine"), ("model", "./nope")):
        prefs.set(name, value)
    prefs.save()
    return {**NO_DISPLAY, "XDG_CONFIG_HOME": str(tmp_path / "config")}, path


@pytest.mark.parametrize(("name", "says"), [
    ("nodir/y.png", "cannot save a picture in 'nodir': no such folder"),
    ("y.txt", "cannot save a picture as 'y.txt': '.txt' is not a picture type; end the name in .png, .jpg or .jpeg"),
    ("y", "cannot save a picture as 'y': no extension names its type; end the name in .png, .jpg or .jpeg"),
])
def test_a_picture_it_cannot_write_is_refused_before_the_window_opens(tmp_path: Path, name: str, says: str):
    r = subprocess.run([sys.executable, "-m", "app", "--model", "/no/model/here", "--screenshot", name],
                       capture_output=True, text=True, timeout=180, env=NO_DISPLAY, cwd=tmp_path)
    assert r.returncode == 2 and "saved" not in r.stderr
    assert r.stderr.splitlines() == [f"logitlab: error: argument --screenshot: {says} (see logitlab --help)"]
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize(("size", "says"), [
    ("100x100", "the width must be from 900 to 7680 and the height from 500 to 4320, got 100x100"),
    ("big", "expected WIDTHxHEIGHT in pixels, e.g. 1400x860, got 'big'"),
])
def test_a_size_out_of_range_is_one_line(tmp_path: Path, size: str, says: str):
    r = logitlab("--screenshot", str(tmp_path / "shot.png"), "--size", size, env=NO_DISPLAY)
    assert r.returncode == 2 and r.stderr.strip() == f"logitlab: error: argument --size: {says} (see logitlab --help)"


def test_a_screenshot_leaves_the_preferences_alone_and_comes_out_at_its_size(tmp_path: Path, saved_session: Path,
                                                                             user_preferences: tuple[dict, Path]):
    env, prefs = user_preferences
    before = hashlib.sha256(prefs.read_bytes()).hexdigest()
    for size, want in ((None, (1400, 860)), ("1200x700", (1200, 700)), (None, (1400, 860))):
        shot = tmp_path / "shot.png"
        r = logitlab("--open", str(saved_session), "--screenshot", str(shot), *(["--size", size] if size else []),
                     env=env)
        assert r.returncode == 0, r.stderr
        assert r.stderr.count("saved") == 1 and f"saved {shot}" in r.stderr  # once, though the file's run finished
        img = QImage(str(shot))
        assert (img.width(), img.height()) == want
        assert hashlib.sha256(prefs.read_bytes()).hexdigest() == before  # the user's own, untouched
    assert sorted(p.name for p in prefs.parent.iterdir()) == ["preferences.ini"]
