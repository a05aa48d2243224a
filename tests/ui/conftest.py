"""The real window on the tiny torch model (mlx where only it is installed), offscreen, with its own settings file
and every draw seeded."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from app.core.models.sources import ModelSpec
from app.ui.files.sessions import Sessions
from app.ui.main_window import MainWindow
from backends import installed
from tests.tiny import LOCAL_BACKENDS

RUN_TIMEOUT = 60_000
WINDOW_BACKEND = "torch" if installed("torch") or not LOCAL_BACKENDS else LOCAL_BACKENDS[0]  # torch where it is there
needs_torch = pytest.mark.skipif(not installed("torch"), reason="torch backend not installed")


@pytest.fixture(autouse=True)
def unsaved_changes_discarded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offscreen, no one answers the Save / Discard / Cancel question: every window discards, unless a test
    answers for the user itself (`w.sessions.ask = ...`)."""
    monkeypatch.setattr(Sessions, "ask", lambda _self: "discard")


@pytest.fixture
def store(tmp_path: Path) -> QSettings:
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def window(qtbot, tiny_path: Path, store: QSettings):
    w = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), WINDOW_BACKEND))
    qtbot.addWidget(w)
    w.show()
    w.sampler.seed.setValue(3)  # every draw seeded: no test depends on luck
    w.sampler.lock.setChecked(True)
    qtbot.waitUntil(lambda: w.playground.info is not None and w.playground.tokenizer is not None,
                    timeout=RUN_TIMEOUT)
    yield w
    w.close()
