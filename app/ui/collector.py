"""Python's cyclic garbage collector, run on the UI thread only.

A reference cycle that holds Qt objects (a closed window or dialog and the lambdas connected to it) must be
destroyed on the UI thread. With automatic collection, whichever thread allocates when a threshold is crossed
collects, and on the model thread that destroys widgets off the UI thread: the test suite deadlocked so (the
model thread, loading a model, collecting a closed window while the UI thread waited for the GIL). So while a
`Playground` exists, automatic collection is off and a UI-thread timer collects each generation when Python's own
thresholds say it would have (the recipe PyDev published for PyQt applications).
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QTimer

INTERVAL_MS = 100


class Collector(QObject):
    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        self.threshold = gc.get_threshold()
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


def collect_on_ui_thread() -> None:
    """Install the collector once per application (it lives as long as the QApplication)."""
    app = QCoreApplication.instance()
    if app is not None and app.findChild(Collector) is None:
        Collector(app)
