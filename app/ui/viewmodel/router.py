"""The view-model's one route for the model thread's events: one timer drains the queue about 60 times a second, each
event goes to the handler of its type (`handlers`), and the shown run's steps of a frame go to the views together.

Events are routed by run id into the `Session` (every run keeps its steps, also when another run is shown); the
views follow the run shown (`Display`). A load, a compile or a failure of a model beside the window's (a column's) is
that model's business: the model bar and the tokenizer stay the window's. The window's server (app.serve) tells its
requests on `Playground.served_events`, drained on the same tick: each `Served` registers its runs in the session,
and their events stream in as the window's own (a failure is the run's, never the window's). Nothing here starts a
job or draws.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, QTimer

from app.core.events import (
    Compiling,
    Drafted,
    Failed,
    Finished,
    Loaded,
    Loading,
    Prefilled,
    Scored,
    Speculated,
    Step,
    Stuck,
)
from app.serve.served import Served
from app.ui.viewmodel.submitted import fail_runs

if TYPE_CHECKING:
    from app.core.runs.model_thread import ModelThread
    from app.ui.viewmodel.playground import Playground

FRAME_MS = 16
MAX_EVENTS_PER_FRAME = 5000
Handler = Callable[[Any], None]


class EventRouter:
    def __init__(self, playground: Playground, worker: Callable[[], ModelThread | None], parent: QObject) -> None:
        """`worker`: the model thread if it has been made (None: no events yet)."""
        self._pg, self._worker = playground, worker
        self._steps: list[Step] = []  # the shown run's steps this frame
        self._recorded = False  # steps of any run reached the session this frame
        pg, window = playground, self._window_model
        self.handlers: dict[type, Handler] = {
            Step: self._step,
            Loading: window(lambda ev: pg.loading.emit(ev.message, ev.done, ev.total)),
            Loaded: window(self._loaded),
            Compiling: window(pg.compiling.emit),
            Prefilled: self._prefilled,
            Finished: self._finished,
            Failed: self._failed,
            Scored: pg.scored.emit,
            Drafted: pg.drafted.emit,
            Speculated: pg.drafted.emit,
            Stuck: lambda ev: pg.noticed.emit(f"{ev.message} (step {ev.step}): its constraint may let it pad or "
                                              "loop; Stop ends it"),
        }
        self.served_handlers: dict[type, Handler] = {  # the window's server's requests: runs, never the window's
            Served: self._served,
            Step: self._step,
            Prefilled: self._prefilled,
            Finished: self._finished,
            Failed: self._served_failed,
        }
        self._timer = QTimer(parent, interval=FRAME_MS, timerType=Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(self.drain)
        self._timer.start()

    def drain(self) -> None:
        """Take every waiting event, then emit at most one signal of each kind; the shown step follows if due."""
        worker = self._worker()
        if worker is not None:  # (no model thread yet: no events)
            self._take(worker.events, self.handlers)
        self._take(self._pg.served_events, self.served_handlers)
        if self._recorded:
            self._recorded = False
            self._pg.steps_recorded.emit()
        self._pg.display.follow()

    def _take(self, events: queue.Queue, handlers: dict[type, Handler]) -> None:
        """Route the events waiting in `events` (a frame's worth at most) by `handlers`; the shown steps go out."""
        for _ in range(MAX_EVENTS_PER_FRAME):
            try:
                ev = events.get_nowait()
            except queue.Empty:
                break
            if not isinstance(ev, Step):
                self._flush()  # the steps before it reach the views first
            handler = handlers.get(type(ev))
            if handler is not None:
                handler(ev)
        self._flush()

    def close(self) -> None:
        self._timer.stop()

    def _window_model(self, handler: Handler) -> Handler:
        """`handler` for the window's model only (a model beside it, a column's, loads on its own)."""
        return lambda ev: None if self._pg.jobs.beside(ev.request_id) else handler(ev)

    def _flush(self) -> None:
        steps, self._steps = self._steps, []
        self._pg.display.emit_steps(steps)

    def _step(self, ev: Step) -> None:
        self._recorded = True
        run = self._pg.session.get(ev.run_id)
        if run is not None and ev.trace is not None:
            run.steps.append(ev.trace)
        if run is self._pg.shown:
            self._steps.append(ev)

    def _loaded(self, ev: Loaded) -> None:
        pg = self._pg
        pg.info, pg.tokenizer = ev.info, ev.tokenizer
        pg.loaded.emit(ev.info)
        pg.jobs.loaded(ev.request_id)

    def _prefilled(self, ev: Prefilled) -> None:
        pg = self._pg
        for run in pg.session.of_request(ev.request_id):
            run.prefilled = ev
        if pg.shown is not None and pg.shown.request.id == ev.request_id:
            pg.live.prefilled(ev.seconds)
            pg.prefilled.emit(ev)

    def _finished(self, ev: Finished) -> None:
        pg = self._pg
        run = pg.session.get(ev.run_id)
        if run is not None:
            run.finished = ev
            pg.session_changed.emit()
        pg.jobs.ended(ev.request_id)
        if run is not None and run is pg.shown:
            pg.display.end(ev)

    def _served(self, served: Served) -> None:
        """A request the window's server took: its runs join the session, named by its route, before its events."""
        for run in self._pg.session.start(served.request):
            run.name = served.name
        self._pg.request_served.emit(served)
        self._pg.session_changed.emit()

    def _served_failed(self, ev: Failed) -> None:
        """A served request failed: its runs say why (its client has the error); the window goes on."""
        if fail_runs(self._pg.session, ev):
            self._pg.session_changed.emit()

    def _failed(self, ev: Failed) -> None:
        pg, jobs = self._pg, self._pg.jobs
        if fail_runs(pg.session, ev):
            pg.session_changed.emit()
        if not jobs.beside(ev.request_id):
            jobs.stop_plan()  # the window's model failed: it fails every job of the plan
        jobs.ended(ev.request_id)  # (a failed score: not a job's)
        if jobs.beside(ev.request_id):
            return  # the model beside the window's failed: its runs say why, the others go on
        if ev.opt_in:
            pg.opt_in_needed.emit(ev.message, ev.opt_in)
        else:
            pg.failed.emit(ev.message)
