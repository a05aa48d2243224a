"""The application's collector (app/ui/viewmodel/collector.py): Python's cyclic garbage collector runs on the UI thread
only, so a cycle that holds Qt objects is never destroyed on the model thread; what a run freezes is thawed at its
end."""

from __future__ import annotations

import gc
import threading

from app.ui.viewmodel.collector import collector
from app.ui.viewmodel.playground import Playground


class Cycle:
    """A reference cycle that notes the thread it was finalized on."""

    def __init__(self, finalized: list[str]) -> None:
        self.me, self.finalized = self, finalized

    def __del__(self) -> None:
        self.finalized.append(threading.current_thread().name)


def test_cycles_are_collected_on_the_ui_thread_however_much_another_thread_allocates(qtbot):
    collector()
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


def test_the_collector_is_the_applications_one(qapp):
    assert collector() is collector() and collector().parent() is qapp


def test_a_run_freezes_what_exists_and_thaws_it_when_it_ends(qtbot):
    c, pg = collector(), Playground()
    try:
        c.follow(pg)
        pg.busy_changed.emit(True)
        assert c.frozen and gc.get_freeze_count() > 0
        pg.busy_changed.emit(False)
        assert not c.frozen and gc.get_freeze_count() == 0
    finally:
        pg.worker.close()
