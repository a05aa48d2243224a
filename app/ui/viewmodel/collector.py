"""The application's garbage-collector policy: Python's cyclic collector runs on the UI thread only, and while a run
streams, what already exists is frozen out of its scans (and thawed when the run ends).

A reference cycle that holds Qt objects (a closed window or dialog and the lambdas connected to it) must be
destroyed on the UI thread. With automatic collection, whichever thread allocates when a threshold is crossed
collects, and on the model thread that destroys widgets off the UI thread: the test suite deadlocked so (the
model thread, loading a model, collecting a closed window while the UI thread waited for the GIL). So the
application's `Collector` turns automatic collection off and a UI-thread timer collects each generation when
Python's own thresholds say it would have (the recipe PyDev published for PyQt applications). It is process-wide
state, so it belongs to the QApplication (`collector()`), not to a view-model: the window asks it to `follow` its
view-model. Every `gc.freeze()` here is paired with a `gc.unfreeze()`.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

from PySide6.QtCore import QCoreApplication, QObject, QTimer

if TYPE_CHECKING:
    from app.ui.viewmodel.playground import Playground

INTERVAL_MS = 100
FREEZE_EVERY = 1000  # steps of a streaming run


class Collector(QObject):
    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        self.threshold = gc.get_threshold()
        self.frozen = False  # what existed at a run's start is out of the collector's scans until the run ends
        gc.disable()
        self.timer = QTimer(self, interval=INTERVAL_MS)
        self.timer.timeout.connect(self.check)
        self.timer.start()

    def check(self) -> None:
        """Collect as `gc` would have: generation 0 past its threshold, then 1 and 2 when theirs are passed too."""
        counts = gc.get_count()
        for generation in range(3):
            if counts[generation] <= self.threshold[generation]:
                return
            gc.collect(generation)

    def freeze(self) -> None:
        """Move every object alive now into the permanent generation: never rescanned (nor freed if it becomes
        cyclic garbage) until `unfreeze`."""
        gc.freeze()
        self.frozen = True

    def unfreeze(self) -> None:
        """Give the frozen objects back to the collector (the oldest generation), to be collected when due."""
        if self.frozen:
            gc.unfreeze()
            self.frozen = False

    def follow(self, pg: Playground) -> None:
        """Freeze while `pg` is busy: at the start (what exists then, the window and earlier runs, is never rescanned
        mid-run: a ~100 ms gen-2 stall) and every `FREEZE_EVERY` steps of the run shown (the collector rescanned
        every live trace object: the UI's cost per token grew from 34 to 52 µs between tokens 1,000 and 10,000;
        traces hold no cycles, so refcounting still frees them); unfreeze when it is idle again."""
        pg.busy_changed.connect(lambda busy: self.freeze() if busy else self.unfreeze())

        def appended(steps: list) -> None:
            after = len(pg.steps)
            if pg.busy and after // FREEZE_EVERY > (after - len(steps)) // FREEZE_EVERY:
                self.freeze()

        pg.steps_appended.connect(appended)


def collector() -> Collector:
    """The application's collector, installed at the first call (it lives as long as the QApplication)."""
    app = QCoreApplication.instance()
    if app is None:
        raise RuntimeError("the garbage-collector policy needs a QApplication first")
    # kept on the application object: `findChild` would wrap every child of the application for Python (the style,
    # the session manager) and build their 12 enums (~7 ms of CPU before the first paint)
    if not isinstance(getattr(app, "logitlab_collector", None), Collector):
        app.logitlab_collector = Collector(app)
    return app.logitlab_collector
