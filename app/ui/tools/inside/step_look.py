"""What the lens and attention views share: the step they look at (the one the window shows, `step_shown`) and their job
on the model thread (`lens` or `attention`, `app.core.decoding.inside`) for the shown run at that step, each answer
kept by (run, step) so that going back to a step shows it again without the model. Draws nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.decoding.inside import InsideRequest, Looked
from app.core.events import Failed
from app.ui.viewmodel.model_job import ModelJob

if TYPE_CHECKING:
    from app.core.record.trace import StepTrace
    from app.ui.viewmodel.playground import Playground

BUSY = "A run is in progress: wait for it, or stop it, then look inside."
STREAM_MS = 250  # while a run streams, the step looked at is redrawn at most this often (the latest then)
NO_STEP = "Select a step of a run (click a token, or a step on the timeline) to look inside the model there."


class StepLook(QObject):
    step_changed = Signal(object)  # the StepTrace now looked at (None: none)
    looked = Signal(object)  # the answer for it: a LensGrid or an AttentionMap
    failed = Signal(str)  # why a look could not be made (a line a person can act on)
    running_changed = Signal(bool)

    def __init__(self, playground: Playground, kind: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.playground, self.kind = playground, kind
        self.trace: StepTrace | None = None
        self.run_id: int | None = None
        self.results: dict[tuple[int, int], Any] = {}  # (run id, step) -> its answer
        self.job = ModelJob(playground, self)
        self.job.event.connect(self._on_event)
        self.job.running_changed.connect(self.running_changed)
        self._asked: tuple[int, int] | None = None
        self._later = QTimer(self, singleShot=True, interval=STREAM_MS)  # steps streaming in: one redraw a while
        self._later.timeout.connect(lambda: self.step_changed.emit(self.trace))
        playground.step_shown.connect(self._follow)
        playground.cleared.connect(lambda: self._follow(-1, None))
        if playground.steps:  # opened on a run already shown: its selected (or last) step
            steps = playground.steps
            j = playground.editing.step
            j = len(steps) - 1 if j is None else min(j, len(steps) - 1)
            self._follow(j, steps[j])

    @property
    def running(self) -> bool:
        return self.job.running

    @property
    def result(self) -> Any:
        """The answer kept for the step looked at (None: not looked at yet)."""
        if self.trace is None or self.run_id is None:
            return None
        return self.results.get((self.run_id, self.trace.step))

    def _follow(self, _i: int, trace: StepTrace | None) -> None:
        run = self.playground.shown
        if trace is self.trace and (run.id if run else None) == self.run_id:
            return
        self.trace, self.run_id = trace, (run.id if run is not None and trace is not None else None)
        if not self.playground.busy:
            self._later.stop()
            self.step_changed.emit(trace)
        elif not self._later.isActive():
            self._later.start()

    def request(self) -> InsideRequest | None:
        """The look at the step shown, for the shown run's model and tokens (None: no step shown)."""
        run = self.playground.shown
        if run is None or self.trace is None:
            return None
        prompt = run.prefilled.prompt_ids if run.prefilled is not None else (
            run.trace.prompt_ids if run.trace is not None else ())
        tokens = tuple(st.token_id for st in run.steps)
        return InsideRequest(model=run.request.model, prompt_ids=tuple(prompt), tokens=tokens, step=self.trace.step)

    def look(self) -> bool:
        """Start the job at the step shown; False (and why, in `failed`) where it cannot start now."""
        if self.running:
            return False
        if self.playground.busy:
            self.failed.emit(BUSY)
            return False
        request = self.request()
        if request is None:
            self.failed.emit(NO_STEP)
            return False
        self._asked = (self.run_id, request.step)  # type: ignore[assignment]
        self.job.start(self.kind, request)
        return True

    def stop(self) -> None:
        self.job.stop()

    def _on_event(self, ev: object) -> None:
        if isinstance(ev, Looked):
            self.job.done()
            if ev.result is not None and self._asked is not None:
                self.results[self._asked] = ev.result
                if self._asked == (self.run_id, self.trace.step if self.trace else None):
                    self.looked.emit(ev.result)
        elif isinstance(ev, Failed):
            self.job.done()
            self.failed.emit(ev.message)
