"""A job of the model thread: the runner that serves it (`kind`, a row of `runners.RUNNERS`), its requests, the
queue its events go to, and two flags (`cancel`: asked to stop; `ended`: its last event is in its queue).

`stream(job)` yields a job's events until it has ended: the one loop the command line reads a job with (the end
is the thread's word, set once the runner returned or failed, so no reader guesses it from the events). No
thread and no model here.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from app.core.events import Event
from app.core.models.sources import ModelSpec

POLL_S = 0.1  # `stream` wakes this often while it waits (Ctrl+C gets through)
_WOKEN = object()  # put in a job's own queue as it ends, so that a reader waiting on it sees the end at once


class JobRequest(Protocol):
    """What the thread needs of any request: its id (events and `cancel` name it), its model, its runs' ids."""

    @property
    def id(self) -> int: ...

    @property
    def model(self) -> ModelSpec: ...

    @property
    def run_ids(self) -> tuple[int, ...]: ...


@dataclass(eq=False)
class Job:
    kind: str  # its runner's row in `runners.RUNNERS`
    requests: tuple[JobRequest, ...]
    out: queue.Queue | None = None  # its events (None: a queue of its own; the window's jobs: the thread's `events`)
    status: queue.Queue | None = None  # its loading events (Loading, Loaded, Compiling); None: `out`
    cancel: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)  # set after its last event is in `out`

    def __post_init__(self) -> None:
        if not self.requests:
            raise ValueError(f"a {self.kind} job needs a request")
        self._own = self.out is None
        if self._own:
            self.out = queue.Queue()

    def end(self) -> None:
        """Its last event is in `out`: it has ended. A reader blocked on a queue of its own wakes now (a marker
        `stream` and `waiting` skip), not at its next poll."""
        self.ended.set()
        if self._own:
            self.out.put(_WOKEN)

    @property
    def request(self) -> JobRequest:
        """The first request (the only one, but in a job run together)."""
        return self.requests[0]

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(r.id for r in self.requests)

    def put(self, event: Event) -> None:
        self.out.put(event)

    def say(self, event: Event) -> None:
        """A loading event: to `status` where the job has one, else with its other events."""
        (self.out if self.status is None else self.status).put(event)

    @property
    def over(self) -> bool:
        """Ended, and every event of it taken from `out` (`out` its own queue)."""
        return self.ended.is_set() and self.out.empty()


def stream(job: Job, poll: float = POLL_S) -> Iterator[Event]:
    """The job's events as they come, until it has ended and all are taken (its `out` must be its own queue)."""
    while not job.over:
        try:
            event = job.out.get(timeout=poll)
        except queue.Empty:  # (a timeout, so that Ctrl+C gets through while it waits)
            continue
        if event is not _WOKEN:
            yield event


def waiting(job: Job) -> Iterator[Event]:
    """The job's events in `out` now, none waited for (a timer's drain)."""
    while True:
        try:
            event = job.out.get_nowait()
        except queue.Empty:
            return
        if event is not _WOKEN:
            yield event
