"""A job of the window's tools on the model thread (a beam search, a quantization diff): `start(kind, request)`
starts it with its own queue (its loading goes to the window's, which the model bar shows), a timer drains the
queue on the UI thread and emits each event in order as `event`. The view calls `done()` on the event that ends
its work; a job the thread ended without one (a cancelled download) is done once drained. It draws nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.runs.jobs import Job, JobRequest, waiting

if TYPE_CHECKING:
    from app.ui.viewmodel.playground import Playground

DRAIN_MS = 30


class ModelJob(QObject):
    event = Signal(object)  # each event of the job, in order
    running_changed = Signal(bool)

    def __init__(self, playground: Playground, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.playground = playground
        self.job: Job | None = None  # the job in progress; None when idle
        self._timer = QTimer(self, interval=DRAIN_MS)
        self._timer.timeout.connect(self.drain)

    @property
    def request(self) -> JobRequest | None:
        """The request in progress; None when idle."""
        return self.job.request if self.job is not None else None

    @property
    def running(self) -> bool:
        return self.job is not None

    def start(self, kind: str, request: JobRequest) -> None:
        """Start `request` as a `kind` job (a row of `app.core.runs.runners.RUNNERS`), then drain its queue on a
        timer until `done()`."""
        worker = self.playground.worker
        self.job = worker.start(Job(kind, (request,), status=worker.events))
        self._set_running(True)

    def stop(self) -> None:
        """Ask the model thread to cancel the job in progress; its last event still arrives through the queue."""
        if self.job is not None:
            self.job.cancel.set()

    def done(self) -> None:
        """The job ended (its last event was seen): stop draining and forget it."""
        if self.job is not None:
            self._set_running(False)

    def drain(self) -> None:
        """Emit every waiting event, in order; done once the thread has ended the job and all are emitted."""
        job = self.job
        if job is None:
            return
        for ev in waiting(job):
            self.event.emit(ev)
        if job is self.job and job.over:
            self.done()

    def _set_running(self, running: bool) -> None:
        if running:
            self._timer.start()
        else:
            self._timer.stop()
            self.job = None
        self.running_changed.emit(running)
