"""The view-model's work in progress: nothing, a model load alone, one job (a request, or several submitted
together), or a plan's jobs one after another (a sweep, a prompt set); `busy` while any is. `begin` registers a job's
runs in the session, shows the first and submits them; the router says when a request has ended (`ended`) or a load
alone has (`loaded`), and the plan's next job starts on that same turn, else the view-model is idle. A request on
another model than the window's (`beside`) fails or loads on its own. It emits the view-model's signals, nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from app.ui.viewmodel.submitted import Submitted

if TYPE_CHECKING:
    from app.core.compare.job_plan import JobPlan
    from app.core.events import Request
    from app.ui.viewmodel.playground import Playground


class Jobs:
    def __init__(self, playground: Playground) -> None:
        self._pg = playground
        self._submitted = Submitted()  # the request(s) in progress
        self._load_only = False
        self._busy = False
        self._plan: JobPlan | None = None  # the plan whose jobs run one after another (`run_plan`)

    @property
    def busy(self) -> bool:
        return self._busy

    @property
    def loading_only(self) -> bool:
        """Busy with a model load alone: a run may be queued behind it."""
        return self._busy and self._load_only

    def load(self, request: Request) -> None:
        """Load `request`'s model alone (not while busy)."""
        if self._busy:
            return
        self._submitted, self._load_only = Submitted.of([request]), True
        self._set_busy(True)
        self._pg.worker.submit(request, load_only=True)

    def begin(self, requests: Sequence[Request], submit: Callable[[], object]) -> bool:
        """Start a job of `requests`, which `submit` hands to the model thread; refused (False) while another job is
        in progress (a load alone is not: the model thread queues the job behind it)."""
        if self._busy and not self._load_only:
            return False
        self._start(requests, submit)
        return True

    def run_plan(self, plan: JobPlan) -> bool:
        """Start `plan`'s first job (its next ones as each ends); refused (False) as `begin` is, or when the plan has
        no job at all."""
        if self._busy and not self._load_only:
            return False
        requests = plan.next_job()
        if not requests:
            return False
        self._plan = plan
        self._start(requests, lambda: self._pg.worker.submit_together(requests))
        return True

    def stop_plan(self) -> None:
        """The plan in progress starts no more jobs."""
        if self._plan is not None:
            self._plan.stop()

    def beside(self, request_id: int) -> bool:
        """A request of the job on another model than the window's (loaded beside it)."""
        return self._submitted.beside(request_id)

    def loaded(self, request_id: int) -> None:
        """A model loaded: the load alone in progress, if it was this one, has ended."""
        if self._load_only and self._submitted.has(request_id):
            self._set_busy(False)

    def ended(self, request_id: int) -> None:
        """A request ended (finished or failed): once every run of the job has, the plan's next job starts, else
        the view-model is idle."""
        if not (self._submitted.has(request_id) and self._submitted.ended(self._pg.session)):
            return
        plan = self._plan
        requests = plan.next_job() if plan is not None else ()
        if requests:
            self._start(requests, lambda: self._pg.worker.submit_together(requests))
            return
        self._plan = None
        self._set_busy(False)
        if plan is not None:
            self._pg.plan_ended.emit(plan)

    def _start(self, requests: Sequence[Request], submit: Callable[[], object]) -> None:
        """Register the requests' runs, show the first, be busy with them, `submit` them; then say so."""
        pg = self._pg
        self._submitted = Submitted.of(requests, pg.editing.model)
        runs = [pg.session.start(r) for r in requests]
        pg.display.select(runs[0][0])
        self._load_only = False
        self._busy = True
        pg.busy_changed.emit(True)  # also when a load was already running: now a run is
        submit()
        pg.run_started.emit(requests[0])
        pg.session_changed.emit()

    def _set_busy(self, busy: bool) -> None:
        if busy != self._busy:
            self._busy = busy
            self._pg.busy_changed.emit(busy)
