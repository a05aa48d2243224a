"""What the model thread holds for its runners: the main model (and the prefix cache kept with it), models held
beside it for a job run together, the speculative draft, a diff's variant B; loading each with `Loading` and
`Loaded` said on the job, and a decode step's compiles said as `Compiling`.

Every method runs on the model thread (MLX streams are thread-local): models are loaded, used and freed there.
It serves no job itself (`runners`) and owns no thread (`model_thread`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.core.decoding.generation import Prefix
from app.core.events import Compiling, Loaded, Loading
from app.core.models.catalog import check_fits
from app.core.models.sources import ModelSpec, resolve
from app.core.remote.remote_run import load_remote
from app.core.runs.jobs import Job, JobRequest
from backends import LoadedModel, Model, ModelLoadError, connects, get_backend
from backends.base import CompileNote, Tokenizer, watch_compiles


@dataclass
class _Held:
    """A model held beside the thread's main one (a column's), with its own prefix cache and, where local, the
    folder or file it came from (what the memory check counts)."""

    model: Model
    path: Path | None
    prefix: Prefix = field(default_factory=Prefix)


class ThreadContext:
    def __init__(self, memory: int | None = None) -> None:
        """`memory`: the bytes free for models, with none of these loaded, that the memory check allows (None: what
        the system reports free, plus what these models hold)."""
        self._memory = memory
        self._model: Model | None = None
        self._spec: ModelSpec | None = None
        self._path: Path | None = None  # the main model's folder or file (None: a server's)
        self.prefix = Prefix()  # the main model's cache of the last run's prompt
        self._held: dict[ModelSpec, _Held] = {}  # models beside the main one, for a job that runs together
        self._draft: LoadedModel | None = None  # speculative decoding's draft model, beside the target
        self._draft_spec: ModelSpec | None = None
        self.park = False  # a backend used asks its thread never to exit (see Backend.park_thread_on_exit)

    @property
    def main_spec(self) -> ModelSpec | None:
        return self._spec

    def has(self, spec: ModelSpec) -> bool:
        """Loaded already: the main model, or one held beside it."""
        return (self._model is not None and spec == self._spec) or spec in self._held

    def ensure(self, job: Job, request: JobRequest) -> Model:
        """The main model, the one `request` names: kept, taken from those held beside, else opened (the one it
        replaces is freed); its compiles are said on `job` as `request`'s."""
        spec = request.model
        if self._model is None or spec != self._spec:
            self.unload()
            if spec in self._held:
                held = self._held.pop(spec)
                self._model, self._path, self.prefix = held.model, held.path, held.prefix
            else:
                self._model, self._path = self._open(spec, job, request.id)
            self._spec = spec
        self._watch(self._model, job, request.id)
        return self._model

    def hold(self, job: Job, request: JobRequest) -> Model:
        """The model `request` names, beside the main one: loaded now unless already held."""
        spec = request.model
        if spec not in self._held:
            self._held[spec] = _Held(*self._open(spec, job, request.id))
        model = self._held[spec].model
        self._watch(model, job, request.id)
        return model

    def prefix_of(self, spec: ModelSpec) -> Prefix:
        """The prefix cache kept with the model of `spec` (the main one's, or a held one's)."""
        return self.prefix if spec == self._spec else self._held[spec].prefix

    def free_held(self, keep: Sequence[ModelSpec] = ()) -> None:
        """Close the models held beside the main one, except those named in `keep`."""
        for spec in [s for s in self._held if s not in keep]:
            self._held.pop(spec).model.close()

    def draft(self, job: Job, spec: ModelSpec, target: LoadedModel) -> LoadedModel:
        """The draft model `spec`, loaded with the target's backend (kept for the next run). No `Loading` event:
        the window's status stays the target's; the speculative view says it drafts."""
        if self._draft is not None and spec == self._draft_spec:
            return self._draft
        self._unload_draft()
        path = resolve(spec.source, None, job.cancel, offline=spec.offline)
        check_fits(path, self._loaded_paths(), self._memory)
        self._draft = get_backend(target.info.backend, path).load(path, spec.options)
        self._draft_spec = spec
        return self._draft

    def load_variant(self, spec: ModelSpec, path: Path) -> LoadedModel:
        """A diff's variant B, beside the main model (which stays the one `ensure` knows); its caller closes it."""
        backend = get_backend(spec.backend, path)
        self.park |= backend.park_thread_on_exit
        return backend.load(path, spec.options)

    def unload(self) -> None:
        """Free the main model, its prefix cache and the draft."""
        self._unload_draft()
        self.prefix = Prefix()
        if self._model is not None:
            self._model.close()
        self._model, self._spec, self._path = None, None, None

    def close(self) -> None:
        """Free every model held (the thread's last act)."""
        self.free_held()
        self.unload()

    def _open(self, spec: ModelSpec, job: Job, rid: int) -> tuple[Model, Path | None]:
        """A model (and its folder or file; None: a server), loaded with `Loading` and `Loaded` said on `job`."""
        t0 = time.perf_counter()
        job.say(Loading(rid, f"Finding {spec.label}…"))
        model, path = (load_remote(spec), None) if connects(spec.backend) else self._load(spec, job, rid)
        job.say(Loaded(rid, model.info, time.perf_counter() - t0, shared_tokenizer(model)))
        return model, path

    def _load(self, spec: ModelSpec, job: Job, rid: int) -> tuple[LoadedModel, Path]:
        """A local folder or file: found (downloaded if need be), checked to fit in memory beside the models
        loaded, loaded."""

        def progress(done: int, total: int) -> None:
            job.say(Loading(rid, f"Downloading {spec.label}…", done, total))

        path = resolve(spec.source, progress, job.cancel, offline=spec.offline)
        check_fits(path, self._loaded_paths(), self._memory)
        backend = get_backend(spec.backend, path)  # auto: torch for a .gguf file
        self.park |= backend.park_thread_on_exit
        job.say(Loading(rid, f"Loading {spec.label} with {backend.name}…"))
        return backend.load(path, spec.options), path

    def _watch(self, model: Model, job: Job, rid: int) -> None:
        """A decode step compiling during this job (torch with --compile) is said on it as `Compiling`."""

        def say(note: CompileNote) -> None:
            job.say(Compiling(rid, note.rows, note.seconds))

        watch_compiles(model, say)

    def _loaded_paths(self) -> list[Path]:
        """The folders or files of the local models held (what a memory check counts)."""
        paths = [self._path, *(h.path for h in self._held.values())]
        return [p for p in paths if p is not None]

    def _unload_draft(self) -> None:
        if self._draft is not None:
            self._draft.close()
        self._draft, self._draft_spec = None, None


def shared_tokenizer(model: Model) -> Tokenizer | None:
    """The tokenizer a `Loaded` event hands the UI: one that encodes here (a server's does not)."""
    return model.tokenizer if model.capabilities.tokenize else None


def local(model: Model) -> LoadedModel:
    """`model`, where it has a local forward pass (what a prompt's surprisal, a diff, a draft need)."""
    if not model.capabilities.forward:
        raise ModelLoadError("a model on a server has no local forward pass (no KV cache, no logits over a prompt)")
    return model  # type: ignore[return-value]  # (capabilities.forward: it is a LoadedModel)
