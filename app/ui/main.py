"""Starts the window: `logitlab` (and `logitlab --screenshot out.png`, which runs one generation, selects its
last step, saves a picture of the whole window and exits; `logitlab --open FILE` shows a saved session, or a run's
`--trace` file as a session of that run, without loading a model, and with `--screenshot` pictures it).
"""

from __future__ import annotations

import os
import sys

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.core.models import ModelSpec
from app.core.settings import SamplerSettings
from app.ui.collector import collector


def make_app() -> QApplication:
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Logit Lab")
    app.setOrganizationName("LogitLab")
    collector()  # the garbage-collector policy is the application's (app/ui/collector.py)
    return app


def headless() -> bool:
    """Linux with no display server and no platform chosen."""
    return (sys.platform.startswith("linux") and not os.environ.get("QT_QPA_PLATFORM")
            and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"))


def run_window(spec: ModelSpec, settings: SamplerSettings, prompt: str | None = None,
               screenshot: str | None = None, open_path: str | None = None) -> int:
    doc = None
    if open_path:  # read before the window opens: a file it cannot show is one line and exit status 2
        from app.core import session_file

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
    from app.ui.main_window import MainWindow

    window = MainWindow(spec=spec)
    if screenshot or settings != SamplerSettings():
        window.sampler.set_settings(settings)
        window.sampler.lock.setChecked(settings.seed is not None or window.sampler.lock.isChecked())
    if prompt is not None:
        window.prompt.set_prompt(prompt)
    window.show()
    if doc is not None:  # drawn after the first paint: drawing a run builds the charts (pyqtgraph's import)
        QTimer.singleShot(0, lambda: window.sessions.show_file(doc, open_path))
    if screenshot:
        return _screenshot(app, window, screenshot, run=doc is None)
    return app.exec()


def _screenshot(app: QApplication, window, path: str, run: bool = True) -> int:  # noqa: ANN001 - MainWindow
    result = {"code": 0}
    window.sessions.ask = lambda: "discard"  # a screenshot's run is nothing to keep: no question on close

    def save() -> None:
        window.grab().save(path)
        print(f"saved {path}", file=sys.stderr)
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
