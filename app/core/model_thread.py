"""The model thread: one long-lived plain thread that owns the loaded model (load, generate, free).

Consumers `submit` requests (to generate, to load only, or to `score` a prompt's own tokens) and read `events`
(a queue); every failure becomes a `Failed` event on that same queue. The thread keeps the last run's KV cache
(`Prefix`), so a run sharing a prefix with it prefills only the rest. `cancel` stops the run in progress within
one step; `close` stops the thread and frees the model on the thread that loaded it (MLX streams are
thread-local). No Qt here: the window and the CLI both use it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from app.core.beam_run import BeamRequest, run_beam
from app.core.catalog import check_fits
from app.core.events import Compiling, Event, Failed, Finished, Loaded, Loading, Request, Scored
from app.core.generation import Prefix, PromptError, build_prompt, generate
from app.core.metrics import Metrics
from app.core.models import Cancelled, ModelSpec, resolve
from app.core.quant_diff import DiffRequest, run_diff
from app.core.remote_run import load_remote
from app.core.sampling import NoValidTokenError
from app.core.settings import SettingsError
from app.core.speculative_run import run_speculative
from app.core.surprisal import score
from backends import LoadedModel, Model, ModelLoadError, connects, get_backend
from backends.base import CompileNote, Tokenizer, watch_compiles

log = logging.getLogger(__name__)
USER_ERRORS = (ModelLoadError, PromptError, NoValidTokenError, SettingsError)


@dataclass
class _Job:
    request: Request | BeamRequest | DiffRequest
    kind: Literal["generate", "load", "score", "beam", "diff"] = "generate"
    cancel: threading.Event = field(default_factory=threading.Event)
    out: queue.Queue | None = None  # where its results and its failure go (None: the thread's `events`)


class ModelThread:
    def __init__(self) -> None:
        self.events: queue.Queue[Event] = queue.Queue()
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._live: list[_Job] = []  # queued or running, for cancel
        self._lock = threading.Lock()
        self._model: Model | None = None
        self._spec: ModelSpec | None = None
        self._prefix = Prefix()
        self._draft: LoadedModel | None = None  # speculative decoding's draft model, beside the target
        self._draft_spec: ModelSpec | None = None
        self._park = False  # the backend used asks its thread never to exit (see Backend.park_thread_on_exit)
        self.stopped = threading.Event()  # set once the thread has freed the model and serves no more
        self._thread = threading.Thread(target=self._run, name="logitlab-model", daemon=True)
        self._thread.start()

    def submit(self, request: Request, load_only: bool = False) -> int:
        return self._submit(_Job(request, "load" if load_only else "generate"))

    def score(self, request: Request) -> int:
        """The prompt's own log-probabilities (a `Scored` event), through the model the request names."""
        return self._submit(_Job(request, "score"))

    def beam(self, request: BeamRequest, out: queue.Queue) -> int:
        """A beam search (`app.core.beam_run`): its events, or a `Failed`, go to `out`; loading to `events`."""
        return self._submit(_Job(request, "beam", out=out))

    def diff(self, request: DiffRequest, out: queue.Queue) -> int:
        """A quantization diff (`app.core.quant_diff`): its events, or a `Failed`, go to `out`; loading A to
        `events`. B is loaded on this thread and closed after; A too is freed when B would not fit beside it."""
        return self._submit(_Job(request, "diff", out=out))

    def _submit(self, job: _Job) -> int:
        request = job.request
        with self._lock:
            self._live.append(job)
        self._jobs.put(job)
        return request.id

    def cancel(self, request_id: int | None = None) -> None:
        """Cancel the request with this id (None: every queued or running one)."""
        with self._lock:
            for job in self._live:
                if request_id is None or job.request.id == request_id:
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
        if self._park:  # it holds nothing now and dies with the process
            threading.Event().wait()

    def _serve_all(self) -> None:
        while (job := self._jobs.get()) is not None:
            out = job.out or self.events
            try:
                self._serve(job)
            except USER_ERRORS as e:
                out.put(Failed(job.request.id, str(e), getattr(e, "opt_in", None)))
            except Cancelled:
                for rid in job.request.run_ids:
                    out.put(Finished(job.request.id, "cancelled", Metrics(), None, rid))
            except Exception as e:
                log.exception("generation failed")
                out.put(Failed(job.request.id, f"unexpected error: {type(e).__name__}: {e}"))
            finally:
                with self._lock:
                    self._live.remove(job)

    def _serve(self, job: _Job) -> None:
        model, loaded_now = self._ensure(job)
        self._watch_compiles(model, job.request.id)
        if job.kind == "load":
            if not loaded_now:  # already loaded: say so anyway
                self.events.put(Loaded(job.request.id, model.info, 0.0, _shared_tokenizer(model)))
        elif job.kind == "score":
            ids, text = build_prompt(model.tokenizer, job.request, model.info.context_length)
            result = score(_local(model), ids, job.cancel)
            if result is not None:
                self.events.put(Scored(job.request.id, text, result))
        elif job.kind == "diff":
            for event in run_diff(_local(model), job.request, job.cancel, self._unload, self._load_variant):
                job.out.put(event)
        elif job.kind == "beam":
            for event in run_beam(model, job.request, job.cancel, self._prefix):
                job.out.put(event)
        elif job.request.draft is not None:
            draft = self._ensure_draft(job, _local(model))
            for event in run_speculative(_local(model), draft, job.request, job.cancel):
                self.events.put(event)
        else:
            for event in generate(model, job.request, job.cancel, self._prefix):
                self.events.put(event)

    def _watch_compiles(self, model: Model, rid: int) -> None:
        """A decode step compiling during this job (torch with --compile) is said on `events` as `Compiling`."""

        def say(note: CompileNote) -> None:
            self.events.put(Compiling(rid, note.rows, note.seconds))

        watch_compiles(model, say)

    def _ensure(self, job: _Job) -> tuple[Model, bool]:
        """The model the job asks for, and whether it was opened just now."""
        spec, rid = job.request.model, job.request.id
        if self._model is not None and spec == self._spec:
            return self._model, False
        self._unload()
        t0 = time.perf_counter()
        self.events.put(Loading(rid, f"Finding {spec.label}…"))
        model = load_remote(spec) if connects(spec.backend) else self._load(job)
        self._model, self._spec = model, spec
        self.events.put(Loaded(rid, model.info, time.perf_counter() - t0, _shared_tokenizer(model)))
        return model, True

    def _load(self, job: _Job) -> LoadedModel:
        """A local folder or file: found (downloaded if need be), checked to fit in memory, loaded."""
        spec, rid = job.request.model, job.request.id

        def progress(done: int, total: int) -> None:
            self.events.put(Loading(rid, f"Downloading {spec.label}…", done, total))

        path = resolve(spec.source, progress, job.cancel, offline=spec.offline)
        check_fits(path)
        backend = get_backend(spec.backend, path)  # auto: torch for a .gguf file
        self._park |= backend.park_thread_on_exit
        self.events.put(Loading(rid, f"Loading {spec.label} with {backend.name}…"))
        return backend.load(path, spec.options)

    def _ensure_draft(self, job: _Job, target: LoadedModel) -> LoadedModel:
        """The request's draft model, loaded on this thread with the target's backend (kept for the next run)."""
        spec = job.request.draft
        if self._draft is not None and spec == self._draft_spec:
            return self._draft
        self._unload_draft()
        path = resolve(spec.source, None, job.cancel, offline=spec.offline)
        check_fits(path)  # (no `Loading` event: the window's status stays the target's; the dock says it drafts)
        self._draft = get_backend(target.info.backend, path).load(path, spec.options)
        self._draft_spec = spec
        return self._draft

    def _load_variant(self, spec: ModelSpec, path: Path) -> LoadedModel:
        """A diff's variant B, beside the thread's model (which stays the one `_ensure` knows)."""
        backend = get_backend(spec.backend, path)
        self._park |= backend.park_thread_on_exit
        return backend.load(path, spec.options)

    def _unload_draft(self) -> None:
        if self._draft is not None:
            self._draft.close()
        self._draft, self._draft_spec = None, None

    def _unload(self) -> None:
        self._unload_draft()
        self._prefix.clear()
        if self._model is not None:
            self._model.close()
        self._model, self._spec = None, None


def _shared_tokenizer(model: Model) -> Tokenizer | None:
    """The tokenizer a `Loaded` event hands the UI: one that encodes here (a server's does not)."""
    return model.tokenizer if model.capabilities.tokenize else None


def _local(model: Model) -> LoadedModel:
    """`model`, where it has a local forward pass (what a prompt's surprisal needs)."""
    if not model.capabilities.forward:
        raise ModelLoadError("a model on a server has no local forward pass (no KV cache, no logits over a prompt)")
    return model  # type: ignore[return-value]  # (capabilities.forward: it is a LoadedModel)
