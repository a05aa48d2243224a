"""A job that runs on the model thread with its own event queue (a beam search, a quantization diff): the queue the
thread fills, the timer that drains it on the UI thread, and the request in progress.

`start(request, submit)` hands the request and the queue to the model thread (`submit`, e.g. `worker.beam`); each
drained event is emitted as `event`; the view decides which event ends the job and calls `done()`. It draws nothing.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

from PySide6.QtCore import QObject, QTimer, Signal

if TYPE_CHECKING:
    from app.ui.viewmodel.playground import Playground

DRAIN_MS = 30


class JobRequest(Protocol):
    """What the job needs of a request: the id the model thread cancels it by."""

    id: int


R = TypeVar("R", bound=JobRequest)


class ModelJob(QObject):
    event = Signal(object)  # each event the model thread put in the queue, in order
    running_changed = Signal(bool)

    def __init__(self, playground: Playground, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.playground = playground
        self.request: JobRequest | None = None  # the request in progress; None when idle
        self._queue: queue.Queue = queue.Queue()
        self._timer = QTimer(self, interval=DRAIN_MS)
        self._timer.timeout.connect(self.drain)

    @property
    def running(self) -> bool:
        return self.request is not None

    def start(self, request: R, submit: Callable[[R, queue.Queue], object]) -> None:
        """Submit the request with this job's queue, then drain the queue on a timer until `done()`."""
        self.request = request
        submit(request, self._queue)
        self._set_running(True)

    def stop(self) -> None:
        """Ask the model thread to cancel the request in progress; its last event still arrives through the queue."""
        if self.request is not None:
            self.playground.worker.cancel(self.request.id)

    def done(self) -> None:
        """The job ended (its last event was seen): stop draining and forget the request."""
        self._set_running(False)

    def drain(self) -> None:
        """Emit every waiting event, in order."""
        while True:
            try:
                ev = self._queue.get_nowait()
            except queue.Empty:
                return
            self.event.emit(ev)

    def _set_running(self, running: bool) -> None:
        if running:
            self._timer.start()
        else:
            self._timer.stop()
            self.request = None
        self.running_changed.emit(running)
