"""The served model on one `ModelThread`: loaded once (`load`), then each request a job of the runner table
(plain, score) whose events an asyncio handler reads (`events`) without a thread of its own: the job's queue wakes
the loop as the model thread puts each event, and keeps each finished run (`Keeper`) whether or not anyone still
reads. A reader that stops (its client gone) cancels the job: the run ends within one step, kept as cancelled.
The window's host runs on the window's thread (given, not closed here) and tells an `observer` queue of each run's
job: a `Served` notice, then its events (served.py); the command's host owns its thread and tells no one.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.core.events import Event, Failed, Finished, Loaded, Request
from app.core.models.sources import ModelSpec
from app.core.runs.jobs import Job, stream, waiting
from app.core.runs.model_thread import ModelThread
from app.core.session.session_file import EncodedTraces, SavedRun, SavedSession, save
from app.serve.served import Served
from backends.base import ModelLoadError

if TYPE_CHECKING:
    from backends.base import ModelInfo, Tokenizer

CHECK_S = 0.1  # how often a reader waiting for events asks whether its client is still there


class Keeper:
    """Every finished run of this server, written to a session file (atomically) as each one finishes; None: kept
    nowhere. Thread-safe: the model thread adds, the command writes once more at exit."""

    def __init__(self, path: Path | None, spec: ModelSpec) -> None:
        self.path, self.spec = path, spec
        self._runs: list[SavedRun] = []
        self._lock = threading.Lock()
        self._cache = EncodedTraces()

    def add(self, request: Request, finished: Finished, name: str) -> None:
        if self.path is None or finished.trace is None:
            return
        trace = replace(finished.trace, run_id=finished.run_id)
        with self._lock:
            self._runs.append(SavedRun(name, trace, request.id if request.n > 1 else None))
            self._write()

    def write(self) -> None:
        with self._lock:
            self._write()

    def _write(self) -> None:
        if self.path is not None:
            shown = self._runs[-1].id if self._runs else None
            save(SavedSession(model=self.spec.source, backend=self.spec.backend, runs=tuple(self._runs),
                              shown=shown), self.path, self._cache)


class Relay(queue.Queue):
    """A job's event queue that wakes an asyncio loop on each event, keeps the job's finished runs and hands each
    event to the observer too (None: no one)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, keeper: Keeper, request: Request, name: str,
                 observer: queue.Queue | None = None) -> None:
        super().__init__()
        self.loop, self.keeper, self.request, self.name, self.observer = loop, keeper, request, name, observer
        self.ready = asyncio.Event()

    def put(self, item: Event, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        if isinstance(item, Finished):
            self.keeper.add(self.request, item, self.name)
        if self.observer is not None:
            self.observer.put(item)
        self.wake()

    def wake(self) -> None:
        """Wake the reader, once until it next looks (it clears `ready` before it drains, so nothing is missed)."""
        if self.ready.is_set():
            return
        with contextlib.suppress(RuntimeError):  # (the loop closed: the server is stopping)
            self.loop.call_soon_threadsafe(self.ready.set)


class Ended(threading.Event):
    """A job's `ended` flag that wakes its reader as the thread sets it (no reader waits a poll for the end)."""

    def __init__(self, relay: Relay) -> None:
        super().__init__()
        self.relay = relay

    def set(self) -> None:
        super().set()
        self.relay.wake()


class Host:
    """One model served: its spec, what loading it said (info, tokenizer), its thread and its keeper. `thread`: a
    model thread to run on (the window's: its own jobs queue beside the server's; not closed by `close`), None: one
    of its own. `observer`: a queue told of every run's job (a `Served`, then its events), None: no one."""

    def __init__(self, spec: ModelSpec, keeper: Keeper | None = None, memory: int | None = None,
                 thread: ModelThread | None = None, observer: queue.Queue | None = None) -> None:
        self.spec = spec
        self.keeper = keeper if keeper is not None else Keeper(None, spec)
        self._owns_thread = thread is None
        self.thread = thread if thread is not None else ModelThread(memory)
        self.observer = observer
        self.info: ModelInfo | None = None
        self.tokenizer: Tokenizer | None = None

    @property
    def name(self) -> str:
        """The model's id in /v1/models and in every answer."""
        return self.info.name if self.info is not None else self.spec.source

    def load(self) -> None:
        """Load the model now (a `ModelLoadError` where it cannot be), so that the first request does not wait."""
        for event in stream(self.thread.start(Job("load", (Request(model=self.spec),)))):
            if isinstance(event, Loaded):
                self.info, self.tokenizer = event.info, event.tokenizer
            elif isinstance(event, Failed):
                raise ModelLoadError(event.message)
        if self.info is None or self.tokenizer is None:
            raise ModelLoadError(f"{self.spec.source} did not load")

    def use(self, spec: ModelSpec, info: ModelInfo, tokenizer: Tokenizer) -> None:
        """Serve `spec`, which the thread has loaded already (the window's model): no load job, nothing waited for."""
        self.spec, self.info, self.tokenizer = spec, info, tokenizer

    def start(self, kind: str, request: Request, name: str, client: str = "") -> tuple[Job, Relay]:
        """Queue a job of `kind` for `request`; a job that makes runs (not a score) is told to the observer first."""
        observer = self.observer if kind != "score" else None
        relay = Relay(asyncio.get_running_loop(), self.keeper, request, name, observer)
        if observer is not None:
            observer.put(Served(request, name, client, time.time()))  # before the thread can put any event
        return self.thread.start(Job(kind, (request,), relay, ended=Ended(relay))), relay

    def close(self) -> None:
        """Close the host's own thread (a thread it was given stays its owner's)."""
        if self._owns_thread:
            self.thread.close()


async def events(job: Job, relay: Relay, gone: Callable[[], Awaitable[bool]]) -> AsyncIterator[Event]:
    """The job's events as the model thread puts them, until it has ended. Its reader stopping early (a client
    that disconnected: `gone`, or the handler cancelled) cancels the job; the thread still ends and keeps it."""
    checked = time.monotonic()
    try:
        while True:
            relay.ready.clear()
            got = list(waiting(job))
            for event in got:
                yield event
            if job.over:
                return
            if time.monotonic() - checked > CHECK_S:
                checked = time.monotonic()
                if await gone():
                    return
            if not got:
                with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                    await asyncio.wait_for(relay.ready.wait(), CHECK_S)
    finally:
        if not job.over:
            job.cancel.set()
