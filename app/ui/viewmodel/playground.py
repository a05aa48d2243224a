"""The window's view-model: owns the model thread and the session, drains events ~60 times a second, emits
coalesced signals.

Events are routed by run id into the `Session` (every run keeps its steps, also when another run is shown);
the widgets follow the run being shown. Widgets never touch the core or a model: they receive what they show
through these signals and call the few verbs here (generate, stop, load, score, select_step); the branch verbs
(fork, replay, rename, delete…) are its `branches` (app/ui/viewmodel/branching.py). One job at a time (a request, or
several together: `generate_together`), or a plan of jobs run one after another (`run_plan`: a sweep, a prompt
set); `busy` says so.
What the user edits (prompt, settings, model, the selection) is its `EditingState`: requests and branches read it,
and a change of settings previews the selected step.
Process-wide state is not its business: the application's collector (app/ui/viewmodel/collector.py) keeps Python's
garbage collection on the UI thread, as a model thread must never destroy Qt objects.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QTimer, Signal

from app.core.events import (
    Compiling,
    Drafted,
    Failed,
    Finished,
    Loaded,
    Loading,
    Prefilled,
    Request,
    Scored,
    Speculated,
    Step,
    job_id,
)
from app.core.metrics import decode_rate
from app.core.models.sources import ModelSpec
from app.core.session.store import Run, Session
from app.core.settings import SamplerSettings, SettingsError
from app.ui.viewmodel.branching import Branches
from app.ui.viewmodel.editing_state import EditingState
from app.ui.viewmodel.submitted import Submitted, fail_runs

if TYPE_CHECKING:
    from app.core.compare.job_plan import JobPlan
    from app.core.record.trace import RunTrace, StepTrace
    from app.core.runs.model_thread import ModelThread
    from app.core.sampler.step_view import Preview

FRAME_MS = 16
TOP_N = 20  # candidates each step records for the charts
CHART_MS = 100  # the shown step follows a streaming run at most 10 times a second; the text every frame
MAX_EVENTS_PER_FRAME = 5000


class Playground(QObject):
    loading = Signal(str, int, int)  # message, bytes done, bytes total
    loaded = Signal(object)  # ModelInfo
    compiling = Signal(object)  # Compiling: the decode step compiles (--compile), then how long it took
    run_started = Signal(object)  # Request
    prefilled = Signal(object)  # Prefilled
    steps_appended = Signal(list)  # list[Step], once per frame at most
    steps_recorded = Signal()  # steps of any run reached the session this frame (the shown run's: also above)
    step_shown = Signal(int, object)  # index, StepTrace: the step every view shows (the latest, at most
    # 1000 / CHART_MS times a second while streaming, or the one selected); chart, header, cursor and the
    # output's selected token all draw from this one record, so they never disagree
    preview_changed = Signal(object, object)  # step_view.Preview (or None), StepTrace it re-samples
    finished = Signal(object)  # Finished, of the run shown
    scored = Signal(object)  # Scored: the prompt's own token log-probabilities
    drafted = Signal(object)  # Drafted (a speculative round) or Speculated (its run's summary)
    failed = Signal(str)  # a request failed (a load, a run that could not start): a line a person can act on
    run_error = Signal(str)  # the run shown ended in error, its tokens kept (a server cut its stream…): why
    opt_in_needed = Signal(str, str)  # message, the LoadOptions flag that would allow it
    busy_changed = Signal(bool)
    plan_ended = Signal(object)  # the JobPlan `run_plan` ran has given its last job (done or stopped), all ended
    session_replaced = Signal()  # another whole session was opened (or a new, empty one begun)
    session_changed = Signal()  # a run was added, finished, renamed or deleted: the branch tree redraws
    cleared = Signal()  # nothing is shown (an empty session, or the last run deleted): the views' empty state
    refused = Signal(str)  # a verb could not start (settings not valid, a branch of a run still going): why

    def __init__(self, parent: QObject | None = None, worker: ModelThread | None = None,
                 editing: EditingState | None = None) -> None:
        super().__init__(parent)
        self.editing = editing if editing is not None else EditingState(self)
        self._worker = worker  # anything with ModelThread's interface (benchmarks feed synthetic runs); None: the
        # model thread, made by `start_worker` just after the window's first paint, or at its first use if sooner
        self.tokenizer = None  # the loaded model's tokenizer (thread-safe, pure CPU): for counting tokens
        self.info = None
        self.session = Session()
        self._submitted = Submitted()  # the request(s) in progress
        self.branches = Branches(self, TOP_N, self)  # fork, replay, rename, delete: the verbs of the session's tree
        self._load_only = False
        self._busy = False
        self._plan: JobPlan | None = None  # the plan whose jobs run one after another (`run_plan`)
        self._prefill_s = 0.0
        self._decode_s = 0.0  # summed step times after the first token
        self._kv_bytes: int | None = 0
        self._timer = QTimer(self, interval=FRAME_MS, timerType=Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(self.drain)
        self._timer.start()
        self._follow = QTimer(self, singleShot=True, interval=CHART_MS)
        self._follow.timeout.connect(self.show_step)
        self.editing.settings_changed.connect(lambda settings: None if self._busy else self.preview(settings))

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
    def selected(self) -> int | None:
        """The step pinned in the shown run (None: follow the latest step)."""
        return self.editing.step

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
        return self._busy

    @property
    def loading_only(self) -> bool:
        """Busy with a model load alone: a run may be queued behind it."""
        return self._busy and self._load_only

    def _set_busy(self, busy: bool) -> None:
        if busy != self._busy:
            self._busy = busy
            self.busy_changed.emit(busy)

    def load(self, spec: ModelSpec) -> None:
        if self._busy:
            return
        request = Request(model=spec, id=job_id())  # a load makes no run: the first run is still run 1
        self._submitted, self._load_only = Submitted.of([request]), True
        self._set_busy(True)
        self.worker.submit(request, load_only=True)

    def generate(self, request: Request) -> bool:
        """Start a run; refused (False) while another is loading, running or winding down."""
        if self._busy and not self._load_only:
            return False  # a load alone may still be running: the model thread queues the run behind it
        self._begin([request], lambda: self.worker.submit(request))
        return True

    def generate_together(self, requests: Sequence[Request]) -> bool:
        """Start several requests as one job (`ModelThread.submit_together`: those sharing the model and prompt
        decode in one batch, those naming another model run beside it): every run is the session's, the first
        one shown, and the view-model is busy until all have ended. Refused (False) as `generate` is."""
        if not requests or (self._busy and not self._load_only):
            return False
        self._begin(requests, lambda: self.worker.submit_together(tuple(requests)))
        return True

    def run_plan(self, plan: JobPlan) -> bool:
        """Run `plan`'s jobs one after another, each as `generate_together` runs it, the next one started as soon as
        the last has ended (busy throughout); `plan_ended` says when it has no more. Refused (False) as `generate`
        is, or when the plan has no job at all."""
        if self._busy and not self._load_only:
            return False
        requests = plan.next_job()
        if not requests:
            return False
        self._plan = plan
        self._begin(requests, lambda: self.worker.submit_together(requests))
        return True

    def _job_ended(self) -> None:
        """The job in progress has ended: the plan's next one starts on this same turn, else the view-model is idle."""
        plan = self._plan
        requests = plan.next_job() if plan is not None else ()
        if requests:
            self._begin(requests, lambda: self.worker.submit_together(requests))
            return
        self._plan = None
        self._set_busy(False)
        if plan is not None:
            self.plan_ended.emit(plan)

    def _begin(self, requests: Sequence[Request], submit: Callable[[], object]) -> None:
        """Register the requests' runs, show the first, be busy with them, `submit` them; then say so."""
        self._submitted = Submitted.of(requests, self.editing.model)
        runs = [self.session.start(r) for r in requests]
        self.editing.select(runs[0][0])
        self._follow.stop()
        self._load_only = False
        self._busy = True
        self.busy_changed.emit(True)  # also when a load was already running: now a run is
        submit()
        self.run_started.emit(requests[0])
        self.session_changed.emit()

    def make_request(self, settings: SamplerSettings | None = None) -> Request:
        """The editing state as a request: its model, its prompt in its mode, and `settings` (None: the state's,
        with the next run's seed; raises `SettingsError` while they are not valid)."""
        e = self.editing
        if settings is None:
            settings = e.valid_settings().with_(seed=e.next_run_seed())
        return Request(model=e.model, prompt=e.prompt.text, messages=e.prompt.chat_messages, settings=settings,
                       top_n=TOP_N)

    def generate_edited(self) -> bool:
        """Start a run of what the editing state holds (False, with `refused`'s reason, when it cannot start)."""
        settings = self.checked_settings()
        return settings is not None and self.generate(self.make_request(settings.with_(
            seed=self.editing.next_run_seed())))

    def score_edited(self) -> int:
        """Score the prompt as a generation would see it (model, prompt, messages), behind any run in progress;
        the request's id (its `Scored` answer carries it)."""
        e = self.editing
        request = Request(model=e.model, prompt=e.prompt.text, messages=e.prompt.chat_messages, id=job_id())
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
        if self._busy and not self._load_only:
            return False
        self.session = session
        self.editing.select(None)
        self._follow.stop()
        self.session_replaced.emit()
        run = session.get(shown) if shown is not None else None
        if run is not None and run.finished is not None:
            self._show_finished(run)
        else:
            self.cleared.emit()
        return True

    def _show_finished(self, run: Run) -> None:
        """Draw a finished run as its events would have: started, prefilled, every step, finished."""
        self.editing.select(run)
        self.run_started.emit(run.request)
        if run.prefilled is not None:
            self.prefilled.emit(run.prefilled)
        kv = run.finished.metrics.kv_cache_bytes
        self._emit_steps([Step(run.request.id, st.step, st.token_id, st.text, st, kv, run.id) for st in run.steps])
        self._follow.stop()
        self.finished.emit(run.finished)
        self.show_step()
        if run.finished.message:
            self.run_error.emit(run.finished.message)

    # runs of the session ----------------------------------------------------------------------------------
    def show_run(self, run_id: int) -> None:
        """Show another run of the session: the views redraw it from its steps; a running one goes on streaming."""
        run = self.session.get(run_id)
        if run is None or run is self.shown:
            return
        if run.finished is not None:
            self._show_finished(run)
            return
        self.editing.select(run)
        self.run_started.emit(run.request)
        if run.prefilled is not None:
            self.prefilled.emit(run.prefilled)
        self._emit_steps([Step(run.request.id, st.step, st.token_id, st.text, st, 0, run.id) for st in run.steps])

    def stop(self) -> None:
        """Stop the run in progress, and the plan it belongs to (its jobs not started are not run)."""
        if self._plan is not None:
            self._plan.stop()
        if self._worker is not None:  # (no model thread yet: nothing runs)
            self._worker.cancel()

    def close(self) -> None:
        self._timer.stop()
        self.worker.close(timeout=10)

    def select_step(self, i: int | None) -> None:
        """Pin step i (None: follow the latest)."""
        if i is not None and not 0 <= i < len(self.steps):
            return
        self.editing.select(self.shown, i)
        self.show_step()

    @property
    def streaming(self) -> bool:
        """The run shown is still running."""
        return self.shown is not None and self.shown.running

    @property
    def following(self) -> bool:
        """The views follow the latest step of a run still streaming (nothing is pinned)."""
        return self.selected is None and self.streaming

    def show_step(self) -> None:
        """Tell the views which step to show now: the one pinned, else the latest."""
        if self.steps:
            j = len(self.steps) - 1 if self.selected is None else self.selected
            self.step_shown.emit(j, self.steps[j])

    def preview(self, settings: SamplerSettings) -> None:
        """Show what `settings` would have drawn at the selected step, without the model."""
        if not self.steps or self.trace is None:
            return
        j = len(self.steps) - 1 if self.selected is None else self.selected
        same = settings.pipeline() == self.trace.settings.pipeline()
        sample = self.steps[j].sample
        if same or sample.is_partial or sample.is_taken:  # a server's or a beam's step cannot be re-drawn: as it was
            preview: Preview | None = None
        else:
            from app.core.sampler.step_view import make_preview  # numpy's import: not before the window's first paint

            preview = make_preview(self.trace, j, settings)  # one record, over the recorded logits
        self.preview_changed.emit(preview, self.steps[j])

    def drain(self) -> None:
        """Take every waiting event, then emit at most one signal of each kind."""
        if self._worker is None:  # no model thread yet: no events
            return
        new_steps: list[Step] = []
        recorded = False
        for _ in range(MAX_EVENTS_PER_FRAME):
            try:
                ev = self.worker.events.get_nowait()
            except queue.Empty:
                break
            if isinstance(ev, Step):
                recorded = True
                run = self.session.get(ev.run_id)
                if run is not None and ev.trace is not None:
                    run.steps.append(ev.trace)
                if run is self.shown:
                    new_steps.append(ev)
            else:
                self._emit_steps(new_steps)
                new_steps = []
                self._handle(ev)
        self._emit_steps(new_steps)
        if recorded:
            self.steps_recorded.emit()

    def _emit_steps(self, steps: list[Step]) -> None:
        if not steps:
            return
        self.steps_appended.emit(steps)
        self.branches.find_divergence(steps)  # after the views took the steps: they mark the one that differs
        if not self._follow.isActive():
            self._follow.start()
        self._kv_bytes = steps[-1].kv_bytes
        self._decode_s += sum(s.trace.seconds for s in steps if s.trace is not None and s.step > 0)

    def live_stats(self) -> tuple[int, float | None, float | None, int | None]:
        """(tokens, decode tokens/s, TTFT seconds, KV bytes) of the run in progress (None: not measured)."""
        n = len(self.steps)
        rate = decode_rate(n, self._decode_s)
        ttft = self._prefill_s + self.steps[0].seconds if self.steps else None
        return n, rate, ttft, self._kv_bytes

    def _current(self, request_id: int) -> bool:
        return self._submitted.has(request_id)

    def _handle(self, ev: object) -> None:
        if isinstance(ev, (Loading, Loaded, Compiling)) and self._submitted.beside(ev.request_id):
            return  # a model beside the window's (a column's): the model bar and tokenizer stay the window's
        if isinstance(ev, Loading):
            self.loading.emit(ev.message, ev.done, ev.total)
        elif isinstance(ev, Loaded):
            self.info, self.tokenizer = ev.info, ev.tokenizer
            self.loaded.emit(ev.info)
            if self._load_only and self._current(ev.request_id):
                self._set_busy(False)
        elif isinstance(ev, Compiling):
            self.compiling.emit(ev)
        elif isinstance(ev, Prefilled):
            for run in self.session.of_request(ev.request_id):
                run.prefilled = ev
            if self.shown is not None and self.shown.request.id == ev.request_id:
                self._prefill_s, self._decode_s = ev.seconds, 0.0
                self.prefilled.emit(ev)
        elif isinstance(ev, Finished):
            run = self.session.get(ev.run_id)
            if run is not None:
                run.finished = ev
                self.session_changed.emit()
            if self._current(ev.request_id) and self._submitted.ended(self.session):
                self._job_ended()
            if run is not None and run is self.shown:
                self._follow.stop()  # the last redraw is due now, with every step in: never skipped
                self.finished.emit(ev)
                self.show_step()
                if ev.message:  # a run that ended in error says why (its tokens stay shown)
                    self.run_error.emit(ev.message)
        elif isinstance(ev, Scored):
            self.scored.emit(ev)
        elif isinstance(ev, (Drafted, Speculated)):
            self.drafted.emit(ev)
        elif isinstance(ev, Failed):
            if fail_runs(self.session, ev):
                self.session_changed.emit()
            if self._plan is not None and not self._submitted.beside(ev.request_id):
                self._plan.stop()  # the window's model failed: it fails every job of the plan
            if self._current(ev.request_id) and self._submitted.ended(self.session):  # (a failed score: no)
                self._job_ended()
            if self._submitted.beside(ev.request_id):
                return  # the model beside the window's failed: its runs say why, the others go on
            if ev.opt_in:
                self.opt_in_needed.emit(ev.message, ev.opt_in)
            else:
                self.failed.emit(ev.message)
