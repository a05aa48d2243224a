"""The branch verbs of the session's tree: fork the shown run at a step (with a token, or re-drawn), fork at an
uncertain step, replay it under the edited settings, find where a branch left its parent, rename and delete runs.

The view-model (`Playground`) owns one as `playground.branches` and it works through it: it reads the editing
state and the session as the view-model does, and starts or shows runs with the view-model's verbs. It holds no
run lifecycle, no event routing and no request of its own beyond the branch it builds.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject, Signal

from app.core.events import Finished, Prefilled, Request, Step
from app.core.metrics import Metrics
from app.core.settings import MAX_SEED, SamplerSettings

if TYPE_CHECKING:
    from PySide6.QtCore import SignalInstance

    from app.core.session import Run, Session
    from app.core.trace import RunTrace
    from app.ui.editing_state import EditingState


class Runner(Protocol):
    """What the branch verbs need of the view-model: its state and session, and the verbs that start or show a
    run (a Protocol, so that this module does not import the view-model that owns it)."""

    editing: EditingState
    session: Session
    refused: SignalInstance
    session_changed: SignalInstance
    cleared: SignalInstance
    run_started: SignalInstance

    @property
    def busy(self) -> bool: ...
    @property
    def loading_only(self) -> bool: ...
    def generate(self, request: Request) -> bool: ...
    def show_run(self, run_id: int) -> None: ...
    def checked_settings(self) -> SamplerSettings | None: ...


class Branches(QObject):
    diverged = Signal(int)  # the first step where the shown branch's token differs from its parent's

    def __init__(self, runner: Runner, top_n: int, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._runner = runner
        self._top_n = top_n  # candidates each step of a branch records, as the view-model's runs do
        self._diverged_in: Run | None = None  # the run shown whose divergence from its parent was found
        runner.run_started.connect(lambda _request: setattr(self, "_diverged_in", None))  # the views start afresh

    @property
    def _trace(self) -> RunTrace | None:
        run = self._runner.editing.run
        return run.trace if run is not None else None

    @property
    def branch_step(self) -> int | None:
        """The step where the shown run left its parent (its steps before are the parent's); None for a root."""
        run = self._runner.editing.run
        return run.parent[1] if run is not None and run.parent is not None else None

    def fork(self, step: int, token: int | None) -> bool:
        """Branch the shown run at `step` under the state's settings and model: with `token` taken there and the
        parent's seed (its uniforms go on: only the token differs), or, `token` None, re-drawn from there with a
        new seed. Refused (False; `refused` says why) while a run is in progress, or for a run without a trace."""
        from app.core.branches import branch_request  # (numpy's, as below: not before the window's first paint)

        trace, r = self._trace, self._runner
        settings = r.checked_settings()
        if trace is None or settings is None or not 0 <= step < len(trace.steps):
            return False
        seed = trace.seed if token is not None else secrets.randbelow(MAX_SEED + 1)
        request = branch_request(trace, step, settings.with_(seed=seed), kind="regenerate" if token is None else
                                 "fork", force=token, spec=r.editing.model, top_n=self._top_n)
        if not r.generate(request):
            r.refused.emit("A branch starts from a finished run: wait for this one, or stop it (Esc).")
            return False
        return True

    def regenerate(self, step: int) -> bool:
        """Branch the shown run at `step`, re-drawn from there with a new seed."""
        return self.fork(step, None)

    def fork_uncertain(self, step: int) -> None:
        """Continue the shown run from `step` with the runner-up token there (a mark on the timeline)."""
        from app.core.branches import runner_up

        run = self._runner.editing.run
        steps = run.steps if run is not None else []
        if 0 <= step < len(steps) and (token := runner_up(steps[step].sample)) is not None:
            self.fork(step, token)

    def replay(self) -> bool:
        """Re-run the shown run under the state's settings with its seed: off the model while its record decides
        the draws, with the model from the first step where it does not, or after the first token that differs."""
        from app.core.branches import replay, replay_finished, replay_request

        trace, r = self._trace, self._runner
        if trace is None or (r.busy and not r.loading_only):
            return False
        settings = r.checked_settings()
        if settings is None:
            return False
        result = replay(trace, settings)
        request = replay_request(trace, settings, result, spec=r.editing.model, top_n=self._top_n)
        reason = replay_finished(trace, result, settings)
        if reason is None:
            return r.generate(request)
        self._finish_here(request, trace, reason)
        return True

    def _finish_here(self, request: Request, parent: RunTrace, reason: str) -> None:
        """A run made without the model (a replay the record decided to its end): finished as it starts."""
        from app.core.trace import RunTrace

        run = self._runner.session.start(request)[0]
        steps = list(request.inherited)
        trace = RunTrace(prompt_ids=list(parent.prompt_ids), settings=request.settings, seed=parent.seed, steps=steps,
                         run_id=run.id, parent=request.parent, model=parent.model, finish_reason=reason,
                         prompt_text=parent.prompt_text, branch=request.branch)
        trace.metrics = Metrics(prompt_tokens=len(parent.prompt_ids), generated_tokens=len(steps))
        run.prefilled = Prefilled(request.id, tuple(parent.prompt_ids), parent.prompt_text, parent.seed, 0.0)
        run.steps, run.finished = steps, Finished(request.id, reason, trace.metrics, trace, run.id)
        self._runner.session_changed.emit()
        self._runner.show_run(run.id)

    def find_divergence(self, steps: list[Step]) -> None:
        """Emit `diverged` once, at the first of the shown branch's steps whose token differs from its parent's
        (the view-model calls this after the views took `steps`)."""
        run, k = self._runner.editing.run, self.branch_step
        if k is None or self._diverged_in is run:
            return
        parent = self._runner.session.get(run.parent[0])
        theirs = parent.steps if parent is not None else []
        for s in steps:
            if s.step >= k and (s.step >= len(theirs) or theirs[s.step].token_id != s.token_id):
                self._diverged_in = run
                self.diverged.emit(s.step)
                return

    def rename(self, run_id: int, name: str) -> None:
        run = self._runner.session.get(run_id)
        if run is not None and run.name != name.strip():
            run.name = name.strip()
            self._runner.session_changed.emit()

    def delete(self, run_id: int) -> bool:
        """Delete a run and the branches that grew from it; refused (False) while one of them runs."""
        r = self._runner
        doomed = r.session.subtree(run_id)
        if not doomed or any(d.running for d in doomed):
            return False
        for d in doomed:
            del r.session.runs[d.id]
        if r.editing.run in doomed:
            r.editing.select(None)
            parent = doomed[0].parent
            rest = r.session.get(parent[0]) if parent is not None else None
            rest = rest or next(reversed(r.session.runs.values()), None)
            if rest is not None and rest.finished is not None:
                r.show_run(rest.id)
            else:
                r.cleared.emit()
        r.session_changed.emit()
        return True
