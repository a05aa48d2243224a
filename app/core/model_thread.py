"""The model thread: one long-lived plain thread that owns the loaded model (load, generate, free).

Consumers `submit` requests and read `events` (a queue); every failure becomes a `Failed` event on that same
queue. `cancel` stops the run in progress within one step; `close` stops the thread and frees the model on
the thread that loaded it (MLX streams are thread-local). No Qt here: the window and the CLI both use it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field

from app.core.catalog import check_fits
from app.core.events import Event, Failed, Finished, Loaded, Loading, Request
from app.core.generation import PromptError, generate
from app.core.metrics import Metrics
from app.core.models import Cancelled, ModelSpec, resolve
from app.core.sampling import NoValidTokenError
from app.core.settings import SettingsError
from backends import LoadedModel, ModelLoadError, get_backend

log = logging.getLogger(__name__)
USER_ERRORS = (ModelLoadError, PromptError, NoValidTokenError, SettingsError)


@dataclass
class _Job:
    request: Request
    load_only: bool = False
    cancel: threading.Event = field(default_factory=threading.Event)


class ModelThread:
    def __init__(self) -> None:
        self.events: queue.Queue[Event] = queue.Queue()
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._live: list[_Job] = []  # queued or running, for cancel
        self._lock = threading.Lock()
        self._model: LoadedModel | None = None
        self._spec: ModelSpec | None = None
        self._used_mlx = False
        self.stopped = threading.Event()  # set once the thread has freed the model and serves no more
        self._thread = threading.Thread(target=self._run, name="logitlab-model", daemon=True)
        self._thread.start()

    @property
    def model(self) -> LoadedModel | None:
        """The loaded model, for reading its info only; never call it from another thread."""
        return self._model

    def submit(self, request: Request, load_only: bool = False) -> int:
        job = _Job(request, load_only)
        with self._lock:
            self._live.append(job)
        self._jobs.put(job)
        return request.id

    def cancel(self) -> None:
        with self._lock:
            for job in self._live:
                job.cancel.set()

    def close(self, timeout: float = 10.0) -> bool:
        """Cancel, free the model and stop serving; True if that happened in time."""
        self.cancel()
        self._jobs.put(None)
        return self.stopped.wait(timeout)

    def _run(self) -> None:
        try:
            self._serve_all()
        finally:
            self._unload()
            self.stopped.set()
        if self._used_mlx:
            # A thread that ran MLX and then exits sometimes aborts the process ("terminate called without an
            # active exception", mlx 0.32.4). Park it instead: it holds nothing now and dies with the process.
            threading.Event().wait()

    def _serve_all(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                self._serve(job)
            except USER_ERRORS as e:
                self.events.put(Failed(job.request.id, str(e), getattr(e, "opt_in", None)))
            except Cancelled:
                self.events.put(Finished(job.request.id, "cancelled", Metrics(), None))
            except Exception as e:
                log.exception("generation failed")
                self.events.put(Failed(job.request.id, f"unexpected error: {type(e).__name__}: {e}"))
            finally:
                with self._lock:
                    self._live.remove(job)

    def _serve(self, job: _Job) -> None:
        model, loaded_now = self._ensure(job)
        if job.load_only:
            if not loaded_now:
                self.events.put(Loaded(job.request.id, model.info, 0.0))  # already loaded: say so anyway
            return
        for event in generate(model, job.request, job.cancel):
            self.events.put(event)

    def _ensure(self, job: _Job) -> tuple[LoadedModel, bool]:
        """The model the job asks for, and whether it was loaded just now."""
        spec, rid = job.request.model, job.request.id
        if self._model is not None and spec == self._spec:
            return self._model, False
        self._unload()
        t0 = time.perf_counter()
        self.events.put(Loading(rid, f"Finding {spec.label}…"))

        def progress(done: int, total: int) -> None:
            self.events.put(Loading(rid, f"Downloading {spec.label}…", done, total))

        path = resolve(spec.source, progress, job.cancel)
        check_fits(path)
        backend = get_backend(spec.backend)
        self._used_mlx |= backend.name == "mlx"
        self.events.put(Loading(rid, f"Loading {spec.label} with {backend.name}…"))
        self._model, self._spec = backend.load(path, spec.options), spec
        self.events.put(Loaded(rid, self._model.info, time.perf_counter() - t0))
        return self._model, True

    def _unload(self) -> None:
        if self._model is not None:
            self._model.close()
        self._model, self._spec = None, None
