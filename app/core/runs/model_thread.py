"""The model thread: one long-lived plain thread that owns the loaded models (load, run, free on that thread: MLX
streams are thread-local). `start(job)` queues a `Job`; the thread serves one at a time by its row of the runner
table (`runners.RUNNERS`: it knows no strategy), puts its events, and any failure as a `Failed`, in the job's queue,
then marks it ended. `cancel` stops a job within one step; `close` frees the models and stops. The window's verbs
(`submit`, `score`, `submit_together`) start jobs on `events`, the queue it drains. No Qt.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator, Sequence

from app.core.events import Event, Request
from app.core.models.sources import Cancelled
from app.core.runs.context import ThreadContext
from app.core.runs.jobs import Job
from app.core.runs.runners import RUNNERS, USER_ERRORS, failure, kind_of

log = logging.getLogger(__name__)


class ModelThread:
    def __init__(self, memory: int | None = None) -> None:
        """`memory`: the bytes free for models, with none of this thread's loaded, that the memory check allows
        (None: what the system reports free, plus what this thread's models hold)."""
        self.events: queue.Queue[Event] = queue.Queue()
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._live: list[Job] = []  # queued or running, for cancel
        self._lock = threading.Lock()
        self._context = ThreadContext(memory)
        self.stopped = threading.Event()  # set once the thread has freed the models and serves no more
        self._thread = threading.Thread(target=self._run, name="logitlab-model", daemon=True)
        self._thread.start()

    def start(self, job: Job) -> Job:
        """Queue `job` for its runner; its events (a `Failed` where it cannot run) go to `job.out`, loading to
        `job.status` where it has one. The job, to `stream` or to cancel."""
        if job.kind not in RUNNERS:
            raise ValueError(f"no runner for a {job.kind!r} job (runners: {', '.join(RUNNERS)})")
        with self._lock:
            self._live.append(job)
        self._jobs.put(job)
        return job

    def submit(self, request: Request, load_only: bool = False) -> int:
        """Run `request` (`load_only`: load its model only), its events on `events`; its id."""
        return self.start(Job("load" if load_only else kind_of(request), (request,), self.events)).request.id

    def score(self, request: Request) -> int:
        """The prompt's own log-probabilities (a `Scored` event on `events`), through the model the request names."""
        return self.start(Job("score", (request,), self.events)).request.id

    def submit_together(self, requests: Sequence[Request]) -> tuple[int, ...]:
        """One job of several requests that stream together, on `events`; their ids. Those on one model and prompt
        decode in one batch, those on other models run on models held beside the main one (freed when a later job
        does not name them), their events interleaved one step at a time. A request whose model cannot be loaded
        (or does not fit beside the others) gets a `Failed`, and the others run; `cancel` of any cancels all."""
        if not requests:
            raise ValueError("no requests to run together")
        if any(r.draft is not None for r in requests):
            raise ValueError("speculative decoding runs alone: submit the request by itself")
        return self.start(Job("together", tuple(requests), self.events)).ids

    def cancel(self, request_id: int | None = None) -> None:
        """Cancel the job of the request with this id (a job run together: all of it; None: every queued or
        running one)."""
        with self._lock:
            for job in self._live:
                if request_id is None or request_id in job.ids:
                    job.cancel.set()

    def close(self, timeout: float = 10.0) -> bool:
        """Cancel, free the models and stop serving; True if that happened in time."""
        self.cancel()
        self._jobs.put(None)
        return self.stopped.wait(timeout)

    def _run(self) -> None:
        try:
            while (job := self._jobs.get()) is not None:
                self._serve(job)
        finally:
            self._context.close()
            self.stopped.set()
        if self._context.park:  # it holds nothing now and dies with the process
            threading.Event().wait()

    def _serve(self, job: Job) -> None:
        """Run the job's runner, its events and then any failure into its queue; then it has ended."""
        try:
            for event in RUNNERS[job.kind](self._context, job):
                job.put(event)
        except (*USER_ERRORS, Cancelled) as e:
            _put_all(job, failure(job.requests, e))
        except Exception as e:
            log.exception("generation failed")
            _put_all(job, failure(job.requests, e))
        finally:
            with self._lock:
                self._live.remove(job)
            job.end()


def _put_all(job: Job, events: Iterator[Event]) -> None:
    for event in events:
        job.put(event)
