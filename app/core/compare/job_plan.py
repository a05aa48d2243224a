"""Plans of jobs that the view-model runs one after another (`Playground.run_plan`): a sweep's batches of cells, a
prompt set's prompts. A plan holds its items; asked for the next job, it gives the requests to submit together (none:
it is done or stopped) and marks the items started. The view-model asks as soon as a job has ended, on the same turn,
so no other view's bookkeeping can come between two jobs of a plan. A plan never waits, draws or talks to the model
thread; the views read its items to draw. No Qt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from app.core.compare.prompt_sets import PromptResult
from app.core.compare.statistics import Cell, Comparison
from app.core.events import Message, Request
from app.core.models.sources import ModelSpec
from app.core.settings import SamplerSettings

T = TypeVar("T")


@dataclass(eq=False)
class JobPlan:
    """Jobs one after another; `stop` ends the plan after the job in progress."""

    stopped: bool = field(default=False, init=False)
    jobs: int = field(default=0, init=False)  # jobs given so far

    def stop(self) -> None:
        self.stopped = True

    def next_job(self) -> tuple[Request, ...]:
        """The requests of the next job (submitted together); () when the plan is done or stopped."""
        job = () if self.stopped else self._next()
        self.jobs += bool(job)
        return job

    def _next(self) -> tuple[Request, ...]:
        raise NotImplementedError


def as_request(base: Request, settings: SamplerSettings, n: int, prompt: str | None = None,
               model: ModelSpec | None = None) -> Request:
    """A new request like `base` (its model, prompt or chat, top-N) under `settings`, `n` samples; `prompt` replaces
    the text (in chat mode: the user's message after `base`'s system messages), `model` the model."""
    messages = base.messages
    if prompt is not None and messages is not None:
        messages = (*(m for m in messages if m.role == "system"), Message("user", prompt))
    return Request(model=model or base.model, prompt=base.prompt if prompt is None else prompt, messages=messages,
                   settings=settings, top_n=base.top_n, n=n)


def cell_batches(cells: Sequence[T], n: int, rows: int) -> list[Sequence[T]]:
    """The cells in consecutive batches of at most `rows` samples (`n` per cell; at least one cell a batch): how a
    sweep's cells decode together, in the window and on the command line."""
    per = max(1, rows // n)
    return [cells[i: i + per] for i in range(0, len(cells), per)]


@dataclass
class CellRun:
    """A cell of a sweep: its settings, its request once started, its statistics once done."""

    cell: Cell
    request: Request | None = None
    result: Comparison | None = None
    stopped: bool = False  # its samples were cancelled (or failed) before they ended: no statistics


@dataclass(eq=False)
class SweepPlan(JobPlan):
    """The cells in batches of at most `batch_rows` rows (a cell of `n` samples is n rows and is never split)."""

    cells: list[CellRun] = field(default_factory=list)
    base: Request = field(default_factory=Request)
    n: int = 1
    batch_rows: int = 64

    def _next(self) -> tuple[Request, ...]:
        batch = next((b for b in cell_batches(self.cells, self.n, self.batch_rows) if b[0].request is None), [])
        for cr in batch:
            cr.request = as_request(self.base, cr.cell.settings, self.n)
        return tuple(cr.request for cr in batch if cr.request is not None)


@dataclass(frozen=True)
class Target:
    """One settings a prompt set runs under, and its label in the results and their exports."""

    label: str
    settings: SamplerSettings
    model: ModelSpec | None = None  # None: the window's


@dataclass
class PromptRun:
    """One prompt of the set under one target: its row, its request once started, its samples' results once done."""

    index: int
    prompt: str
    target: Target
    request: Request | None = None
    results: tuple[PromptResult, ...] | None = None


@dataclass(eq=False)
class PromptSetPlan(JobPlan):
    """Each prompt under every target as one job: the targets on one model decode in one batch, a target on another
    model runs beside it (no model is reloaded between targets)."""

    runs: list[PromptRun] = field(default_factory=list)
    base: Request = field(default_factory=Request)
    n: int = 1

    def _next(self) -> tuple[Request, ...]:
        waiting = [r for r in self.runs if r.request is None]
        batch = [r for r in waiting if r.index == waiting[0].index] if waiting else []
        for r in batch:
            r.request = as_request(self.base, r.target.settings, self.n, r.prompt, r.target.model)
        return tuple(r.request for r in batch if r.request is not None)
