"""A session: the runs a person made, keyed by run id, each with its parent (run id, step) when it branched.

Plain data walked by small helpers (as Loom's tree utilities): the view-model routes a run's events here and
views draw from it. A run is filled as its events arrive: the request, the prompt once prefilled, its steps,
and the finished trace. No Qt, no models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.core.events import Finished, Prefilled, Request
from app.core.session.run_group import RunGroup
from app.core.session.view_records import Views

if TYPE_CHECKING:
    from app.core.compare.prompt_sets import PromptSet
    from app.core.record.trace import RunTrace, StepTrace


@dataclass
class Run:
    id: int
    request: Request
    sequence: int = 0  # which of the request's samples
    prefilled: Prefilled | None = None
    steps: list[StepTrace] = field(default_factory=list)
    finished: Finished | None = None
    name: str = ""  # the user's name for this branch ("" : labelled by its first tokens)

    @property
    def parent(self) -> tuple[int, int] | None:
        return self.request.parent

    @property
    def trace(self) -> RunTrace | None:
        return self.finished.trace if self.finished is not None else None

    @property
    def running(self) -> bool:
        return self.finished is None


@dataclass
class Session:
    runs: dict[int, Run] = field(default_factory=dict)  # in the order they were started
    groups: list[RunGroup] = field(default_factory=list)  # runs compared together (side by side), oldest first
    prompt_set: PromptSet | None = None  # the prompt set and its last run's results (None: none)
    views: Views = field(default_factory=Views)  # what the beam, speculative, sweep and samples views showed

    def start(self, request: Request) -> list[Run]:
        """Register the runs of a request (one per sample)."""
        new = [Run(rid, request, i) for i, rid in enumerate(request.run_ids)]
        self.runs.update((r.id, r) for r in new)
        return new

    def get(self, run_id: int) -> Run | None:
        return self.runs.get(run_id)

    def of_request(self, request_id: int) -> list[Run]:
        return [r for r in self.runs.values() if r.request.id == request_id]

    def finished_traces(self, request_id: int) -> list[RunTrace] | None:
        """The traces of a request's samples in sample order, once every one has ended (None before, or for none)."""
        runs = self.of_request(request_id)
        if not runs or any(r.running for r in runs):
            return None
        return [r.trace for r in sorted(runs, key=lambda r: r.sequence) if r.trace is not None]

    def children(self, run_id: int) -> list[Run]:
        return [r for r in self.runs.values() if r.parent is not None and r.parent[0] == run_id]

    def subtree(self, run_id: int) -> list[Run]:
        """The run and every run that branched from it, transitively (the run first)."""
        run = self.runs.get(run_id)
        if run is None:
            return []
        out = [run]
        for r in out:  # grows while walked: breadth first
            out.extend(self.children(r.id))
        return out
