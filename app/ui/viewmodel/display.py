"""What the views show: the run shown (the editing state's selection), the step of it they all draw, and what the
edited settings would have drawn there (`preview_changed`, while the view-model is idle).

A run is shown by replaying its events (`replay`: started, prefilled, its steps so far, finished if it has); the steps
of a run streaming come through `emit_steps`, and its latest step is shown at most every `CHART_MS` (the router's
frame calls `follow`), a pinned one at once. It emits the view-model's signals; it starts nothing and routes no event.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from app.core.events import Step

if TYPE_CHECKING:
    from app.core.events import Finished
    from app.core.sampler.step_view import Preview
    from app.core.session.store import Run
    from app.core.settings import SamplerSettings
    from app.ui.viewmodel.playground import Playground

CHART_MS = 100  # the shown step follows a streaming run at most 10 times a second; the text every frame


class Display:
    def __init__(self, playground: Playground) -> None:
        self._pg = playground
        self._due: float | None = None  # when the latest step is next shown (None: no new step since)
        playground.editing.settings_changed.connect(lambda s: None if playground.busy else self.preview(s))

    @property
    def selected(self) -> int | None:
        """The step pinned in the shown run (None: follow the latest step)."""
        return self._pg.editing.step

    @property
    def streaming(self) -> bool:
        """The run shown is still running."""
        return self._pg.shown is not None and self._pg.shown.running

    @property
    def following(self) -> bool:
        """The views follow the latest step of a run still streaming (nothing is pinned)."""
        return self.selected is None and self.streaming

    def select(self, run: Run | None) -> None:
        """Show `run` from now on (None: none); a step due for the last one is not shown."""
        self._pg.editing.select(run)
        self._due = None

    def replay(self, run: Run) -> None:
        """Draw `run` as its events would have: started, prefilled, every step so far, and finished if it has."""
        pg = self._pg
        self.select(run)
        pg.run_started.emit(run.request)
        if run.prefilled is not None:
            pg.prefilled.emit(run.prefilled)
        kv = run.finished.metrics.kv_cache_bytes if run.finished is not None else 0
        self.emit_steps([Step(run.request.id, st.step, st.token_id, st.text, st, kv, run.id) for st in run.steps])
        if run.finished is not None:
            self.end(run.finished)

    def emit_steps(self, steps: list[Step]) -> None:
        """The shown run's new steps to the views (once per frame at most); the step they draw follows soon."""
        if not steps:
            return
        pg = self._pg
        pg.steps_appended.emit(steps)
        pg.branches.find_divergence(steps)  # after the views took the steps: they mark the one that differs
        if self._due is None:
            self._due = time.monotonic() + CHART_MS / 1000
        pg.live.add(steps)

    def follow(self) -> None:
        """A frame: show the latest step if it is due."""
        if self._due is not None and time.monotonic() >= self._due:
            self.show_step()

    def show_step(self) -> None:
        """Tell the views which step to show now: the one pinned, else the latest."""
        self._due = None
        steps = self._pg.steps
        if steps:
            j = len(steps) - 1 if self.selected is None else self.selected
            self._pg.step_shown.emit(j, steps[j])

    def end(self, ev: Finished) -> None:
        """The shown run has finished: its last redraw, now, with every step in (never skipped), and why it ended
        if in error (its tokens stay shown)."""
        self._due = None
        self._pg.finished.emit(ev)
        self.show_step()
        if ev.message:
            self._pg.run_error.emit(ev.message)

    def preview(self, settings: SamplerSettings) -> None:
        """Show what `settings` would have drawn at the selected step, without the model."""
        steps, trace = self._pg.steps, self._pg.trace
        if not steps or trace is None:
            return
        j = len(steps) - 1 if self.selected is None else self.selected
        same = settings.pipeline() == trace.settings.pipeline()
        sample = steps[j].sample
        if same or sample.is_partial or sample.is_taken:  # a server's or a beam's step cannot be re-drawn: as it was
            preview: Preview | None = None
        else:
            from app.core.sampler.step_view import make_preview  # numpy's import: not before the window's first paint

            preview = make_preview(trace, j, settings)  # one record, over the recorded logits
        self._pg.preview_changed.emit(preview, steps[j])
