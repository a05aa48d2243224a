"""While the window lives, Python's cyclic garbage collector runs on the UI thread only (app/ui/collector.py): a
cycle that holds Qt objects is never destroyed on the model thread."""

from __future__ import annotations

import gc
import threading

from app.ui.playground import Playground


class Cycle:
    """A reference cycle that notes the thread it was finalized on."""

    def __init__(self, finalized: list[str]) -> None:
        self.me, self.finalized = self, finalized

    def __del__(self) -> None:
        self.finalized.append(threading.current_thread().name)


def test_cycles_are_collected_on_the_ui_thread_however_much_another_thread_allocates(qtbot):
    pg = Playground()
    try:
        assert not gc.isenabled()
        finalized: list[str] = []
        Cycle(finalized)  # garbage now, freed only by the cyclic collector
        kept: list[list[int]] = []
        worker = threading.Thread(target=lambda: kept.extend([i] for i in range(50_000)), name="allocating")
        worker.start()  # far past generation 0's threshold: automatic collection would run on this thread
        worker.join()
        assert finalized == []
        qtbot.waitUntil(lambda: finalized == [threading.main_thread().name], timeout=5_000)
        kept.clear()
    finally:
        pg.worker.close()
