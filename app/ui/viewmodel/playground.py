"""The window's view-model: owns the model thread, the session and the work in progress; emits coalesced signals that
the widgets follow, and has the verbs they call (generate, stop, load, score, show_run, select_step). One concern per
collaborator: `EventRouter` (router.py) drains the thread's events, by type; `Jobs` (jobs.py) is what runs and what
next; `Display` (display.py) the run and step shown, and the preview; `LiveStats` (live_stats.py) the streaming
figures; `Branches` (branching.py) the tree's verbs. What the user edits is its `EditingState` (editing_state.py).
"""

from __future__ import annotations

import queue
from collections.abc import Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.core.events import Request, job_id
from app.core.models.sources import ModelSpec
from app.core.session.store import Run, Session
from app.core.settings import SamplerSettings, SettingsError
from app.ui.viewmodel.branching import Branches
from app.ui.viewmodel.display import Display
from app.ui.viewmodel.editing_state import EditingState
from app.ui.viewmodel.jobs import Jobs
from app.ui.viewmodel.live_stats import LiveStats
from app.ui.viewmodel.router import EventRouter

if TYPE_CHECKING:
    from app.core.compare.job_plan import JobPlan
    from app.core.record.trace import RunTrace, StepTrace
    from app.core.runs.model_thread import ModelThread

TOP_N = 20  # candidates each step records for the charts


class Playground(QObject):
    loading = Signal(str, int, int)  # message, bytes done, bytes total
    loaded = Signal(object)  # ModelInfo
    compiling = Signal(object)  # Compiling: the decode step compiles (--compile), then how long it took
    run_started = Signal(object)  # Request
    prefilled = Signal(object)  # Prefilled
    steps_appended = Signal(list)  # list[Step], once per frame at most
    steps_recorded = Signal()  # steps of any run reached the session this frame (the shown run's: also above)
    step_shown = Signal(int, object)  # index, StepTrace: the step every view shows (the latest, at most
    # 1000 / display.CHART_MS times a second while streaming, or the one selected); chart, header, cursor and the
    # output's selected token all draw from this one record, so they never disagree
    preview_changed = Signal(object, object)  # step_view.Preview (or None), StepTrace it re-samples
    finished = Signal(object)  # Finished, of the run shown
    scored = Signal(object)  # Scored: the prompt's own token log-probabilities
    drafted = Signal(object)  # Drafted (a speculative round) or Speculated (its run's summary)
    failed = Signal(str)  # a request failed (a load, a run that could not start): a line a person can act on
    run_error = Signal(str)  # the run shown ended in error, its tokens kept (a server cut its stream…): why
    noticed = Signal(str)  # a run said something worth a look while it goes on (a constrained run stuck): a line
    opt_in_needed = Signal(str, str)  # message, the LoadOptions flag that would allow it
    busy_changed = Signal(bool)
    plan_ended = Signal(object)  # the JobPlan `run_plan` ran has given its last job (done or stopped), all ended
    session_replaced = Signal()  # another whole session was opened (or a new, empty one begun)
    session_changed = Signal()  # a run was added, finished, renamed or deleted: the branch tree redraws
    cleared = Signal()  # nothing is shown (an empty session, or the last run deleted): the views' empty state
    refused = Signal(str)  # a verb could not start (settings not valid, a branch of a run still going): why
    request_served = Signal(object)  # app.serve.served.Served: the window's server took a request, its runs registered
    closing = Signal()  # `close` began: what runs on the model thread (the window's server) stops before it closes

    def __init__(self, parent: QObject | None = None, worker: ModelThread | None = None,
                 editing: EditingState | None = None) -> None:
        super().__init__(parent)
        self.editing = editing if editing is not None else EditingState(self)
        self._worker = worker  # anything with ModelThread's interface (benchmarks feed synthetic runs); None: the
        # model thread, made by `start_worker` just after the window's first paint, or at its first use if sooner
        self.tokenizer = None  # the loaded model's tokenizer (thread-safe, pure CPU): for counting tokens
        self.info = None
        self.session = Session()
        self.branches = Branches(self, TOP_N, self)  # fork, replay, rename, delete: the verbs of the session's tree
        self.jobs = Jobs(self)
        self.live = LiveStats()
        self.display = Display(self)
        self.live_lens = 0  # candidates each step of a new run records the live logit lens of (0: off; the lens view)
        self.served_events: queue.Queue = queue.Queue()  # the window's server tells its requests here (a `Served`,
        # then their events; app/serve/served.py), from its threads; the router drains it on its tick
        self.router = EventRouter(self, lambda: self._worker, self)

    @property
    def worker(self) -> ModelThread:
        """The model thread (started now if it was not yet)."""
        if self._worker is None:
            from app.core.runs.model_thread import ModelThread  # the core's heavy modules: not before the first paint

            self._worker = ModelThread()
        return self._worker

    def start_worker(self) -> None:
        """Start the model thread if it is not yet (the window calls this just after its first paint)."""
        self.worker  # noqa: B018 - the property starts it

    @property
    def shown(self) -> Run | None:
        """The run the views show (the latest started): the editing state's selected run."""
        return self.editing.run

    @property
    def steps(self) -> list[StepTrace]:
        """The shown run's steps so far."""
        return self.shown.steps if self.shown is not None else []

    @property
    def trace(self) -> RunTrace | None:
        """The shown run's finished trace."""
        return self.shown.trace if self.shown is not None else None

    @property
    def busy(self) -> bool:
        return self.jobs.busy

    @property
    def loading_only(self) -> bool:
        """Busy with a model load alone: a run may be queued behind it."""
        return self.jobs.loading_only

    def load(self, spec: ModelSpec) -> None:
        self.jobs.load(Request(model=spec, id=job_id()))  # a load makes no run: the first run is still run 1

    def generate(self, request: Request | None = None) -> bool:
        """Start a run of `request` (None: of what the editing state holds, with the next run's seed; False, with
        `refused`'s reason, when its settings are not valid); refused (False) while another is loading, running
        or winding down."""
        if request is None:
            settings = self.checked_settings()
            if settings is None:
                return False
            request = self.make_request(settings.with_(seed=self.editing.next_run_seed()))
        return self.jobs.begin([request], lambda: self.worker.submit(request))

    def generate_together(self, requests: Sequence[Request]) -> bool:
        """Start several requests as one job (`ModelThread.submit_together`: those sharing the model and prompt
        decode in one batch, those naming another model run beside it): every run is the session's, the first
        one shown, and the view-model is busy until all have ended. Refused (False) as `generate` is."""
        return bool(requests) and self.jobs.begin(requests, lambda: self.worker.submit_together(tuple(requests)))

    def run_plan(self, plan: JobPlan) -> bool:
        """Run `plan`'s jobs one after another, each as `generate_together` runs it, the next one started as soon as
        the last has ended (busy throughout); `plan_ended` says when it has no more. Refused (False) as `generate`
        is, or when the plan has no job at all."""
        return self.jobs.run_plan(plan)

    def make_request(self, settings: SamplerSettings | None = None) -> Request:
        """The editing state as a request: its model, its prompt in its mode, and `settings` (None: the state's,
        with the next run's seed; raises `SettingsError` while they are not valid)."""
        e = self.editing
        if settings is None:
            settings = e.valid_settings().with_(seed=e.next_run_seed())
        return Request(model=e.model, prompt=e.prompt.text, messages=e.prompt.chat_messages, settings=settings,
                       top_n=TOP_N, lens=self.live_lens)

    def score_edited(self) -> int:
        """Score the prompt as a generation would see it (model, prompt, messages), behind any run in progress;
        the request's id (its `Scored` answer carries it)."""
        e = self.editing
        request = Request(model=e.model, prompt=e.prompt.text, messages=e.prompt.chat_messages, id=job_id(),
                          settings=SamplerSettings(think=e.settings.think))  # (the template's switch: as a run's)
        self.worker.score(request)  # (the model thread queues it behind whatever it is doing)
        return request.id

    def checked_settings(self) -> SamplerSettings | None:
        """The state's settings, or None after `refused` said why they are not valid (the one place a settings
        error becomes a message)."""
        try:
            return self.editing.valid_settings()
        except SettingsError as e:
            self.refused.emit(str(e))
            return None

    def open_session(self, session: Session, shown: int | None = None) -> bool:
        """Replace the session by `session` (finished runs, as `session_file.to_session` makes them) and show run
        `shown` (None: none). Refused (False) while a run is in progress; a model load may go on."""
        if self.busy and not self.loading_only:
            return False
        self.session = session
        self.display.select(None)
        self.session_replaced.emit()
        run = session.get(shown) if shown is not None else None
        if run is not None and run.finished is not None:
            self.display.replay(run)
        else:
            self.cleared.emit()
        return True

    def show_run(self, run_id: int) -> None:
        """Show another run of the session: the views redraw it from its steps; a running one goes on streaming."""
        run = self.session.get(run_id)
        if run is not None and run is not self.shown:
            self.display.replay(run)

    def select_step(self, i: int | None) -> None:
        """Pin step i of the shown run (None: follow the latest)."""
        if i is not None and not 0 <= i < len(self.steps):
            return
        self.editing.select(self.shown, i)
        self.display.show_step()

    def stop(self) -> None:
        """Stop the run in progress, and the plan it belongs to (its jobs not started are not run)."""
        self.jobs.stop_plan()
        if self._worker is not None:  # (no model thread yet: nothing runs)
            self._worker.cancel()

    def close(self) -> None:
        """Stop what serves on the model thread (`closing`), the router, then the model thread (10 s at most)."""
        self.closing.emit()
        self.router.close()
        self.worker.close(timeout=10)
