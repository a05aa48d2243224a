"""Starts the window: `logitlab` (and `logitlab --screenshot out.png`, which runs one generation, selects its
last step, saves a picture of the whole window and exits; `logitlab --open FILE` shows a saved session, or a run's
`--trace` file as a session of that run, without loading a model, and with `--screenshot` pictures it).

A screenshot's window keeps its preferences in a folder of its own, removed after: it neither reads nor writes
the user's (their geometry, prompt, seed or model), so it always opens as asked, at `--size` (1400x860 unless
given). It saves once, says so once, and exits non-zero when the picture could not be written.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication

from app.core.models.sources import ModelSpec
from app.core.settings import SamplerSettings
from app.ui.viewmodel.collector import collector

if TYPE_CHECKING:
    from app.ui.main_window import MainWindow


def make_app() -> QApplication:
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Logit Lab")
    app.setOrganizationName("LogitLab")
    collector()  # the garbage-collector policy is the application's (app/ui/viewmodel/collector.py)
    return app


def headless() -> bool:
    """Linux with no display server and no platform chosen."""
    return (sys.platform.startswith("linux") and not os.environ.get("QT_QPA_PLATFORM")
            and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"))


def run_window(spec: ModelSpec, settings: SamplerSettings, prompt: str | None = None,
               screenshot: str | None = None, open_path: str | None = None, size: tuple[int, int] | None = None) -> int:
    doc = None
    if open_path:  # read before the window opens: a file it cannot show is one line and exit status 2
        from app.core.session import session_file

        try:
            doc = session_file.load(open_path)
        except (OSError, session_file.SessionFormatError) as e:
            print(f"logitlab: error: cannot open {open_path}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
            return 2
    if headless():
        if not screenshot:
            print("logitlab: error: no display to open the window on (set DISPLAY, or use "
                  "'logitlab generate' in a terminal, or '--screenshot out.png')", file=sys.stderr)
            return 1
        os.environ["QT_QPA_PLATFORM"] = "offscreen"  # a screenshot needs no screen
    app = make_app()
    with contextlib.ExitStack() as stack:
        store = _own_preferences(stack) if screenshot else None
        window = _window(spec, settings, prompt, store, size)
        if doc is not None:  # drawn after the first paint: drawing a run builds the charts (pyqtgraph's import)
            QTimer.singleShot(0, lambda: window.sessions.show_file(doc, open_path))
        if screenshot:
            return _screenshot(app, window, screenshot, run=doc is None)
        return app.exec()


def _own_preferences(stack: contextlib.ExitStack) -> QSettings:
    """Preferences in a folder of their own, removed when `stack` closes: a screenshot never touches the user's."""
    folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="logitlab-screenshot-"))
    return QSettings(str(Path(folder) / "preferences.ini"), QSettings.Format.IniFormat)


def _window(spec: ModelSpec, settings: SamplerSettings, prompt: str | None, store: QSettings | None,
            size: tuple[int, int] | None) -> MainWindow:
    """The window on the preferences in `store` (None: the user's), with the command line's settings and prompt
    (a screenshot's own preferences: always its settings), at `size` (None: as the preferences left it); shown."""
    from app.ui.main_window import MainWindow

    window = MainWindow(settings=store, spec=spec)
    if store is not None or settings != SamplerSettings():
        window.sampler.set_settings(settings)
        window.sampler.lock.setChecked(settings.seed is not None or window.sampler.lock.isChecked())
    if prompt is not None:
        window.prompt.set_prompt(prompt)
    if size is not None:
        window.resize(*size)
    window.show()
    return window


def _screenshot(app: QApplication, window: MainWindow, path: str, run: bool = True) -> int:
    result = {"code": 0, "saved": False}
    window.sessions.ask = lambda: "discard"  # a screenshot's run is nothing to keep: no question on close

    def save() -> None:
        if result["saved"]:  # (a shown file's run also says it finished: one picture)
            return
        result["saved"] = True
        if window.grab().save(path):
            print(f"saved {path}", file=sys.stderr)
        else:
            print(f"logitlab: error: cannot write the picture {path}", file=sys.stderr)
            result["code"] = 1
        window.close()

    def finished(_ev: object) -> None:
        window.playground.select_step(len(window.playground.steps) - 1)
        QTimer.singleShot(300, save)

    def failed(message: str) -> None:
        print(f"logitlab: error: {message}", file=sys.stderr)
        result["code"] = 1
        QTimer.singleShot(100, save)

    window.playground.finished.connect(finished)
    window.playground.failed.connect(failed)
    if run:
        QTimer.singleShot(0, window.generate)
    else:  # a saved run is already shown
        QTimer.singleShot(0, lambda: finished(None))
    app.exec()
    return result["code"]
