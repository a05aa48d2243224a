"""The model thread: one long-lived plain thread that owns the loaded model (load, generate, free).

Consumers `submit` requests (to generate, to load only, or to `score` a prompt's own tokens) and read `events`
(a queue); every failure becomes a `Failed` event on that same queue. The thread keeps the last run's KV cache
(`Prefix`), so a run sharing a prefix with it prefills only the rest. `cancel` stops the run in progress within
one step; `close` stops the thread and frees the model on the thread that loaded it (MLX streams are
thread-local). No Qt here: the window and the CLI both use it.

`submit_together` runs several requests as one job that streams together (side-by-side columns, sweep cells):
those on one model and prompt decode in one batch (`together.generate_together`), those on other models run
on models held beside the main one (each checked to fit beside those loaded), their events interleaved one
Step at a time. Models held beside are freed when a later job of one model does not name them, and on close.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from app.core.decoding.generation import Prefix, PromptError, build_prompt, generate
from app.core.decoding.quant_diff import DiffRequest, run_diff
from app.core.decoding.surprisal import score
from app.core.decoding.together import generate_together, groups, interleave
from app.core.events import Compiling, Event, Failed, Finished, Loaded, Loading, Request, Scored
from app.core.metrics import Metrics
from app.core.models.catalog import check_fits
from app.core.models.sources import Cancelled, ModelSpec, resolve
from app.core.remote.remote_run import load_remote
from app.core.runs.beam_run import BeamRequest, refuse_server, run_beam
from app.core.runs.speculative_run import run_speculative
from app.core.sampler.logit_bias import check_ids
from app.core.sampler.sampling import NoValidTokenError
from app.core.settings import SettingsError
from backends import LoadedModel, Model, ModelLoadError, connects, get_backend
from backends.base import CompileNote, Tokenizer, watch_compiles

log = logging.getLogger(__name__)
USER_ERRORS = (ModelLoadError, PromptError, NoValidTokenError, SettingsError)


@dataclass
class _Job:
    request: Request | BeamRequest | DiffRequest
    kind: Literal["generate", "load", "score", "beam", "diff", "together"] = "generate"
    cancel: threading.Event = field(default_factory=threading.Event)
    out: queue.Queue | None = None  # where its results and its failure go (None: the thread's `events`)
    together: tuple[Request, ...] = ()  # a "together" job's requests (the first is `request`)

    @property
    def requests(self) -> tuple[Request | BeamRequest | DiffRequest, ...]:
        return self.together or (self.request,)


@dataclass
class _Held:
    """A model held beside the thread's main one (a column's), with its own prefix cache and, where local, the
    folder or file it came from (what the memory check counts)."""

    model: Model
    path: Path | None
    prefix: Prefix = field(default_factory=Prefix)


class ModelThread:
    def __init__(self, memory: int | None = None) -> None:
        """`memory`: the bytes free for models, with none of this thread's loaded, that the memory check allows
        (None: what the system reports free, plus what this thread's models hold)."""
        self._memory = memory
        self.events: queue.Queue[Event] = queue.Queue()
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._live: list[_Job] = []  # queued or running, for cancel
        self._lock = threading.Lock()
        self._model: Model | None = None
        self._spec: ModelSpec | None = None
        self._path: Path | None = None  # the main model's folder or file (None: a server's)
        self._prefix = Prefix()
        self._held: dict[ModelSpec, _Held] = {}  # models beside the main one, for a job that runs together
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
        """A beam search (`app.core.runs.beam_run`): its events, or a `Failed`, go to `out`; loading to `events`."""
        return self._submit(_Job(request, "beam", out=out))

    def diff(self, request: DiffRequest, out: queue.Queue) -> int:
        """A quantization diff (`app.core.decoding.quant_diff`): its events, or a `Failed`, go to `out`; loading A to
        `events`. B is loaded on this thread and closed after; A too is freed when B would not fit beside it."""
        return self._submit(_Job(request, "diff", out=out))

    def submit_together(self, requests: Sequence[Request]) -> tuple[int, ...]:
        """One job of several requests that stream together (see the module's docstring); their ids. Each request
        makes the events it makes alone; a request whose model cannot be loaded (or does not fit beside the
        others) gets a `Failed`, and the others run. `cancel` of any of them cancels the job."""
        if not requests:
            raise ValueError("no requests to run together")
        if any(r.draft is not None for r in requests):
            raise ValueError("speculative decoding runs alone: submit the request by itself")
        self._submit(_Job(requests[0], "together", together=tuple(requests)))
        return tuple(r.id for r in requests)

    def _submit(self, job: _Job) -> int:
        request = job.request
        with self._lock:
            self._live.append(job)
        self._jobs.put(job)
        return request.id

    def cancel(self, request_id: int | None = None) -> None:
        """Cancel the job of the request with this id (a job run together: all of it; None: every queued or
        running one)."""
        with self._lock:
            for job in self._live:
                if request_id is None or any(r.id == request_id for r in job.requests):
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
            self._free_held()
            self._unload()
            self.stopped.set()
        if self._park:  # it holds nothing now and dies with the process
            threading.Event().wait()

    def _serve_all(self) -> None:
        while (job := self._jobs.get()) is not None:
            out = job.out or self.events
            try:
                self._serve(job)
            except (*USER_ERRORS, Cancelled) as e:
                _put_all(out, _failure(job.requests, e))
            except Exception as e:
                log.exception("generation failed")
                _put_all(out, _failure(job.requests, e))
            finally:
                with self._lock:
                    self._live.remove(job)

    def _serve(self, job: _Job) -> None:
        if job.kind == "together":
            return self._serve_together(job)
        if job.kind == "beam":
            refuse_server(job.request.model)  # (before connecting: the refusal does not depend on the server)
        self._free_held(keep=(job.request.model,))  # a job of one model: the others held go
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
            check_ids(job.request.settings.logit_bias, model.info.vocab_size)
            draft = self._ensure_draft(job, _local(model))
            for event in run_speculative(_local(model), draft, job.request, job.cancel):
                self.events.put(event)
        else:
            check_ids(job.request.settings.logit_bias, model.info.vocab_size)
            for event in generate(model, job.request, job.cancel, self._prefix):
                self.events.put(event)

    def _watch_compiles(self, model: Model, rid: int) -> None:
        """A decode step compiling during this job (torch with --compile) is said on `events` as `Compiling`."""

        def say(note: CompileNote) -> None:
            self.events.put(Compiling(rid, note.rows, note.seconds))

        watch_compiles(model, say)

    def _ensure(self, job: _Job) -> tuple[Model, bool]:
        """The model the job asks for, and whether it was opened just now (one held beside becomes the main)."""
        spec = job.request.model
        if self._model is not None and spec == self._spec:
            return self._model, False
        self._unload()
        if spec in self._held:
            held = self._held.pop(spec)
            self._model, self._spec, self._path, self._prefix = held.model, spec, held.path, held.prefix
            return held.model, False
        model, self._path = self._open(spec, job.request.id, job.cancel)
        self._model, self._spec = model, spec
        return model, True

    def _open(self, spec: ModelSpec, rid: int, cancel: threading.Event) -> tuple[Model, Path | None]:
        """A model (and its folder or file; None: a server), loaded with `Loading` and `Loaded` events."""
        t0 = time.perf_counter()
        self.events.put(Loading(rid, f"Finding {spec.label}…"))
        model, path = (load_remote(spec), None) if connects(spec.backend) else self._load(spec, rid, cancel)
        self.events.put(Loaded(rid, model.info, time.perf_counter() - t0, _shared_tokenizer(model)))
        return model, path

    def _load(self, spec: ModelSpec, rid: int, cancel: threading.Event) -> tuple[LoadedModel, Path]:
        """A local folder or file: found (downloaded if need be), checked to fit in memory beside the models
        loaded, loaded."""

        def progress(done: int, total: int) -> None:
            self.events.put(Loading(rid, f"Downloading {spec.label}…", done, total))

        path = resolve(spec.source, progress, cancel, offline=spec.offline)
        check_fits(path, self._loaded_paths(), self._memory)
        backend = get_backend(spec.backend, path)  # auto: torch for a .gguf file
        self._park |= backend.park_thread_on_exit
        self.events.put(Loading(rid, f"Loading {spec.label} with {backend.name}…"))
        return backend.load(path, spec.options), path

    def _loaded_paths(self) -> list[Path]:
        """The folders or files of the local models this thread holds (what a memory check counts)."""
        paths = [self._path, *(h.path for h in self._held.values())]
        return [p for p in paths if p is not None]

    def _ensure_draft(self, job: _Job, target: LoadedModel) -> LoadedModel:
        """The request's draft model, loaded on this thread with the target's backend (kept for the next run)."""
        spec = job.request.draft
        if self._draft is not None and spec == self._draft_spec:
            return self._draft
        self._unload_draft()
        path = resolve(spec.source, None, job.cancel, offline=spec.offline)
        check_fits(path, self._loaded_paths(), self._memory)  # (no `Loading` event: the window's status stays the
        # target's; the dock says it drafts)
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
        self._prefix = Prefix()
        if self._model is not None:
            self._model.close()
        self._model, self._spec, self._path = None, None, None

    def _free_held(self, keep: Sequence[ModelSpec] = ()) -> None:
        """Close the models held beside the main one, except those named in `keep`."""
        for spec in [s for s in self._held if s not in keep]:
            self._held.pop(spec).model.close()

    def _serve_together(self, job: _Job) -> None:
        """Each group of requests on one model and prompt in one batch; the groups' events interleaved."""
        models = self._models_for(job)
        streams = []
        for group in groups(job.together):  # groups on one model share its prefix cache: the first takes what it holds
            spec = group[0].model
            if spec in models:  # (else it failed to load, and said so)
                for request in group:
                    check_ids(request.settings.logit_bias, models[spec].info.vocab_size)
                prefix = self._prefix_of(spec)
                streams.append(_guarded(group, generate_together(models[spec], group, job.cancel, prefix)))
        for event in interleave(streams):
            self.events.put(event)

    def _models_for(self, job: _Job) -> dict[ModelSpec, Model]:
        """The job's models, by spec: the main one stays where the job names it (else its first model becomes
        the main one), the others are held beside it; one that fails to load fails its requests only."""
        specs = list(dict.fromkeys(r.model for r in job.together))
        self._free_held(keep=specs)
        main = self._spec if self._spec in specs else specs[0]
        models = {}
        for spec in sorted(specs, key=lambda s: s != main):
            named = [r for r in job.together if r.model == spec]
            try:
                if spec == main:
                    models[spec] = self._ensure(_Job(named[0], cancel=job.cancel))[0]
                else:
                    models[spec] = self._hold(spec, named[0].id, job.cancel)
                self._watch_compiles(models[spec], named[0].id)
            except (*USER_ERRORS, Cancelled) as e:
                _put_all(self.events, _failure(named, e))
        return models

    def _hold(self, spec: ModelSpec, rid: int, cancel: threading.Event) -> Model:
        """A model beside the main one, loaded now unless already held."""
        if spec not in self._held:
            model, path = self._open(spec, rid, cancel)
            self._held[spec] = _Held(model, path)
        return self._held[spec].model

    def _prefix_of(self, spec: ModelSpec) -> Prefix:
        """The prefix cache kept with the model of `spec` (the main one's, or a held one's)."""
        return self._prefix if spec == self._spec else self._held[spec].prefix


def _failure(requests: Sequence[Request | BeamRequest | DiffRequest], e: BaseException) -> Iterator[Event]:
    """What a failure says to each of the requests it ends: a `Failed` (a line a person can act on), or each of
    their runs `Finished` as "cancelled" (a download stopped)."""
    if isinstance(e, Cancelled):
        yield from (Finished(r.id, "cancelled", Metrics(), None, rid) for r in requests for rid in r.run_ids)
        return
    message = str(e) if isinstance(e, USER_ERRORS) else f"unexpected error: {type(e).__name__}: {e}"
    yield from (Failed(r.id, message, getattr(e, "opt_in", None)) for r in requests)


def _guarded(requests: Sequence[Request], events: Iterator[Event]) -> Iterator[Event]:
    """`events`, ended by a `Failed` for each of `requests` where they raise (the job's other streams go on)."""
    try:
        yield from events
    except USER_ERRORS as e:
        yield from _failure(requests, e)
    except Exception as e:
        log.exception("generation failed")
        yield from _failure(requests, e)


def _put_all(out: queue.Queue, events: Iterator[Event]) -> None:
    for event in events:
        out.put(event)


def _shared_tokenizer(model: Model) -> Tokenizer | None:
    """The tokenizer a `Loaded` event hands the UI: one that encodes here (a server's does not)."""
    return model.tokenizer if model.capabilities.tokenize else None


def _local(model: Model) -> LoadedModel:
    """`model`, where it has a local forward pass (what a prompt's surprisal needs)."""
    if not model.capabilities.forward:
        raise ModelLoadError("a model on a server has no local forward pass (no KV cache, no logits over a prompt)")
    return model  # type: ignore[return-value]  # (capabilities.forward: it is a LoadedModel)
