"""The branch verbs of the session's tree: fork the shown run at a step (with a token, or re-drawn), fork a
multiverse node's path, fork at an uncertain step, replay it under the edited settings, continue an edited output,
find where a branch left its parent, rename and delete runs, and undo a delete or an edit.

The view-model (`Playground`) owns one as `playground.branches` and it works through it: it reads the editing
state and the session as the view-model does, and starts or shows runs with the view-model's verbs. It holds no
run lifecycle, no event routing and no request of its own beyond the branch it builds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject, Signal

from app.core.events import Finished, Prefilled, Request, Step
from app.core.metrics import Metrics
from app.core.session.edits import EDIT, edited_text
from app.core.settings import MAX_SEED, SamplerSettings
from backends.base import ModelLoadError

if TYPE_CHECKING:
    from PySide6.QtCore import SignalInstance

    from app.core.record.multiverse import Multiverse
    from app.core.record.trace import RunTrace
    from app.core.session.edits import EditedPrompt
    from app.core.session.store import Run, Session
    from app.ui.viewmodel.editing_state import EditingState
    from backends.base import Tokenizer


class Runner(Protocol):
    """What the branch verbs need of the view-model: its state and session, and the verbs that start or show a
    run (a Protocol, so that this module does not import the view-model that owns it)."""

    editing: EditingState
    session: Session
    tokenizer: Tokenizer | None
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
    edit_undone = Signal(str)  # an edit's run was undone: the text it continued, to edit again

    def __init__(self, runner: Runner, top_n: int, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._runner = runner
        self._top_n = top_n  # candidates each step of a branch records, as the view-model's runs do
        self._diverged_in: Run | None = None  # the run shown whose divergence from its parent was found
        runner.run_started.connect(lambda _request: setattr(self, "_diverged_in", None))  # the views start afresh
        self._undo: list[Deleted | Edited] = []  # what Undo takes back, the latest last

    @property
    def _trace(self) -> RunTrace | None:
        run = self._runner.editing.run
        return run.trace if run is not None else None

    @property
    def branch_step(self) -> int | None:
        """The step where the shown run left its parent (its steps before are the parent's); None for a root, and
        for an edit (its steps are all its own: what it kept of its parent is in its prompt)."""
        run = self._runner.editing.run
        if run is None or run.parent is None or run.request.branch == EDIT:
            return None
        return run.parent[1]

    def fork(self, step: int, token: int | None) -> bool:
        """Branch the shown run at `step` under the state's settings and model: with `token` taken there and the
        parent's seed (its uniforms go on: only the token differs), or, `token` None, re-drawn from there with a
        new seed. Refused (False; `refused` says why) while a run is in progress, or for a run without a trace."""
        import secrets  # (its hashlib and OpenSSL: ~7 ms, not before the window's first paint)

        from app.core.session.branches import branch_request  # (numpy's, as below: not before the window's first paint)

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

    def fork_path(self, tree: Multiverse, node: int) -> bool:
        """A multiverse node's path taken, then drawn on under the state's settings and model: a fork of the run
        it looked ahead from, at the step it looked from (`branches.path_request`), or a new run of the prompt.
        Refused (False; `refused` says why) while a run is in progress, or when that run is gone."""
        from app.core.session.branches import path_request

        r = self._runner
        parent = None
        if tree.origin is not None:
            run = r.session.get(tree.origin[0])
            if run is None or run.trace is None:
                r.refused.emit("The run this multiverse looked ahead from is gone: run it again from a run shown.")
                return False
            parent = run.trace
        settings = r.checked_settings()
        if settings is None:
            return False
        request = path_request(tree, node, settings, spec=r.editing.model, parent=parent, top_n=self._top_n)
        if not r.generate(request):
            r.refused.emit("A branch starts from a finished run: wait for this one, or stop it (Esc).")
            return False
        return True

    def regenerate(self, step: int) -> bool:
        """Branch the shown run at `step`, re-drawn from there with a new seed."""
        return self.fork(step, None)

    def fork_uncertain(self, step: int) -> None:
        """Continue the shown run from `step` with the runner-up token there (a mark on the timeline)."""
        from app.core.session.branches import runner_up

        run = self._runner.editing.run
        steps = run.steps if run is not None else []
        if 0 <= step < len(steps) and (token := runner_up(steps[step].sample)) is not None:
            self.fork(step, token)

    def replay(self) -> bool:
        """Re-run the shown run under the state's settings with its seed: off the model while its record decides
        the draws, with the model from the first step where it does not, or after the first token that differs."""
        from app.core.session.branches import replay, replay_finished, replay_request

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

    def continue_edit(self, text: str) -> bool:
        """Continue `text`, an edit of the shown run's output, as a new run (a child marked "edit") under the
        state's settings and model with the next run's seed; refused (False; `refused` says why) while a run is in
        progress, without a finished run or a tokenizer, or with settings that are not valid."""
        from app.core.session.edits import edit_request  # (the core's tokenized prompt: not before the first paint)

        trace, r = self._trace, self._runner
        if trace is None:
            r.refused.emit("Only a finished run's output can be edited and continued.")
            return False
        if r.tokenizer is None:
            r.refused.emit("The model is not loaded yet: an edit is tokenized by it. Load it (the model bar), then "
                           "continue.")
            return False
        settings = r.checked_settings()
        if settings is None:
            return False
        if r.busy and not r.loading_only:
            r.refused.emit("An edit continues once the run in progress is done: wait for it, or stop it (Esc).")
            return False
        try:
            request = edit_request(trace, text, r.tokenizer, settings.with_(seed=r.editing.next_run_seed()),
                                   spec=r.editing.model, top_n=self._top_n)
        except ModelLoadError as e:  # a server's tokenizer: it cannot encode here
            r.refused.emit(f"Cannot continue an edit on this model: {e}")
            return False
        if not r.generate(request):
            return False
        self._undo.append(Edited(r.session, request.run_ids[0], text))
        return True

    def edit_prompt(self, text: str) -> EditedPrompt | None:
        """What continuing `text`, an edit of the shown run's output, would prompt with (None: no finished run or
        no tokenizer that encodes here): the editor says how many of the run's tokens it keeps as it is typed."""
        from app.core.session.edits import edited_prompt

        trace, tok = self._trace, self._runner.tokenizer
        if trace is None or tok is None:
            return None
        try:
            return edited_prompt(trace.prompt_ids, trace.token_ids, [s.text for s in trace.steps], text, tok,
                                 trimmed_end=trace.finish_reason == "stop")
        except ModelLoadError:  # a server's tokenizer
            return None

    @property
    def edited(self) -> tuple[str, int] | None:
        """The shown edit's text (what its prompt holds after its parent's) and how many of its first characters
        are its parent's tokens, kept; None for a run that is not an edit, or whose prompt is not known yet."""
        r = self._runner
        run = r.editing.run
        if run is None or run.parent is None or run.request.branch != EDIT or run.prefilled is None:
            return None
        parent = r.session.get(run.parent[0])
        if parent is None or parent.prefilled is None:
            return None
        tail = run.prefilled.prompt_ids[len(parent.prefilled.prompt_ids):]
        tok = r.tokenizer
        decode_tail = None if tok is None else lambda: tok.decode(tail)
        text = edited_text(run.prefilled.prompt_text, parent.prefilled.prompt_text, decode_tail)
        kept = "".join(st.text for st in parent.steps[: run.parent[1]])
        return text, len(kept) if text.startswith(kept) else 0

    def _finish_here(self, request: Request, parent: RunTrace, reason: str) -> None:
        """A run made without the model (a replay the record decided to its end): finished as it starts."""
        from app.core.record.trace import RunTrace

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
        self._undo.append(Deleted(r.session, list(r.session.runs), doomed, r.editing.run))
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

    @property
    def can_undo(self) -> bool:
        """A delete or an edit of this session's is there to undo."""
        return any(d.session is self._runner.session for d in self._undo)

    @property
    def undo_label(self) -> str:
        """What Undo would take back: "Undo delete", "Undo edit" (or "Undo", nothing)."""
        latest = next((d for d in reversed(self._undo) if d.session is self._runner.session), None)
        return {Deleted: "Undo delete", Edited: "Undo edit"}.get(type(latest), "Undo")

    def undo(self) -> bool:
        """Take back this session's latest delete (its runs put back) or edit (its run and what grew from it
        removed, `edit_undone` with its text); False if there is none, or the edit's run is still going."""
        r = self._runner
        while self._undo and self._undo[-1].session is not r.session:  # a session since closed: forgotten
            self._undo.pop()
        if not self._undo:
            return False
        latest = self._undo[-1]
        if isinstance(latest, Edited):
            return self._undo_edit(latest)
        self._undo.pop()
        self._put_back(latest)
        return True

    def _put_back(self, d: Deleted) -> None:
        """Put back the runs a delete removed, where they were in the session's order; show the run shown then."""
        r = self._runner
        back = {run.id: run for run in d.runs}
        order = [*d.order, *(i for i in r.session.runs if i not in d.order)]  # runs started since: after
        r.session.runs = {i: r.session.runs.get(i) or back[i] for i in order if i in r.session.runs or i in back}
        r.session_changed.emit()
        if d.shown is not None and d.shown.id in back and d.shown.finished is not None and not r.busy:
            r.show_run(d.shown.id)

    def _undo_edit(self, e: Edited) -> bool:
        """Remove an edit's run (and its branches) and show its parent, with the edit's text to edit again."""
        r = self._runner
        run = r.session.get(e.run_id)
        gone = r.session.subtree(e.run_id)
        if any(d.running for d in gone):
            r.refused.emit("The edit's run is still going: stop it (Esc) first, then undo.")
            return False
        self._undo.pop()
        for d in gone:
            del r.session.runs[d.id]
        parent = r.session.get(run.parent[0]) if run is not None and run.parent is not None else None
        if parent is not None and parent.finished is not None:
            r.editing.select(None)
            r.show_run(parent.id)
        elif r.editing.run in gone:
            r.editing.select(None)
            r.cleared.emit()
        r.session_changed.emit()
        self.edit_undone.emit(e.text)
        return True


@dataclass(frozen=True)
class Deleted:
    """A delete as Undo needs it: the session it was in, its runs' order before, the runs removed, the run shown."""

    session: Session
    order: list[int]
    runs: list[Run]
    shown: Run | None


@dataclass(frozen=True)
class Edited:
    """An edit continued, as Undo needs it: the session, the run it started, the text it continued."""

    session: Session
    run_id: int
    text: str
