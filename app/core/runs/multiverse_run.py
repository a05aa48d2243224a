"""A multiverse as a request on the model thread: `ExploreRequest` in, `Explored` per round and `ExploreDone` out (a
`Failed` where it cannot run: a server's model, in one line). `run_multiverse` prefills the prompt and the run's first
tokens it looks ahead from (reusing the `Prefix` cache, which keeps that one-row cache for the next run) and grows the
tree from it (`decoding.multiverse`). Forking a node is `session.branches.path_request`'s. No Qt.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from app.core.decoding.generation import Prefix, PromptError, build_prompt
from app.core.decoding.multiverse import Explorer, LookAhead
from app.core.decoding.prefill import prefill
from app.core.events import Explored, ExploreDone, Message, Request, job_id
from app.core.models.sources import ModelSpec
from app.core.settings import SamplerSettings
from backends import connects
from backends.base import LoadedModel, Model, ModelLoadError

_ON_A_SERVER = ("a multiverse needs a local forward pass over the prefix's cache; {} runs on a server, which samples "
                "by itself: open a local model to look ahead")


class ExploreRefusedError(ModelLoadError):
    """A model that cannot grow a multiverse (no local forward pass)."""


@dataclass(frozen=True)
class ExploreRequest:
    model: ModelSpec = field(default_factory=ModelSpec)
    prompt: str = ""
    messages: tuple[Message, ...] | None = None
    prompt_ids: tuple[int, ...] | None = None
    start: tuple[int, ...] = ()  # a run's first tokens: the multiverse looks ahead from after them
    settings: SamplerSettings = field(default_factory=SamplerSettings)  # the chain of the sampled space
    look: LookAhead = field(default_factory=LookAhead)
    origin: tuple[int, int] | None = None  # (run id, step) of `start`, kept in the result; None: the prompt's end
    id: int = field(default_factory=job_id)  # it makes no run: its events never route to one

    @property
    def run_ids(self) -> tuple[int, ...]:
        return ()  # no run of the session: nothing to mark cancelled on a failure

    def as_request(self) -> Request:
        """The prompt part as a generation request (what `build_prompt` reads), under this one's id."""
        return Request(model=self.model, prompt=self.prompt, messages=self.messages, prompt_ids=self.prompt_ids,
                       settings=self.settings, id=self.id)


def run_multiverse(model: Model, request: ExploreRequest, cancel: threading.Event,
                   prefix: Prefix | None = None) -> Iterator[Explored | ExploreDone]:
    local = _local(model)
    ids, text = build_prompt(local.tokenizer, request.as_request(), local.info.context_length)
    context = ids + list(request.start)
    ctx = local.info.context_length
    if ctx and len(context) >= ctx:
        raise PromptError(f"the prompt and the run's first {len(request.start)} tokens are {len(context)} tokens; "
                          f"this model's context holds {ctx}")
    prefix = prefix if prefix is not None else Prefix()
    cache, reused = prefix.take(local, context)
    logits = prefill(local, cache, context, cancel, reused)
    prefix.keep(local, cache, context)  # (the explorer only forks it)
    settings = request.settings.with_(constraint=None)  # (a grammar follows one run's tokens: not a tree's)
    explorer = Explorer(local, cache, logits, ids, request.start, settings, request.look,
                        prefix_text=text + local.tokenizer.decode(list(request.start)), origin=request.origin)
    if logits is None:  # cancelled while prefilling
        yield ExploreDone(request.id, replace(explorer.tree, reason="cancelled"))
        return
    for tree in explorer.grow(cancel):
        yield (Explored if tree.reason == "running" else ExploreDone)(request.id, tree)


def refuse_server(spec: ModelSpec) -> None:
    """A model on a server is refused before anything connects to it."""
    if connects(spec.backend):
        raise ExploreRefusedError(_ON_A_SERVER.format(spec.label))


def _local(model: Model) -> LoadedModel:
    if not model.capabilities.forward or not model.capabilities.trim_fork:
        raise ExploreRefusedError(_ON_A_SERVER.format(model.info.name))
    return model  # type: ignore[return-value]  # (capabilities.forward: it is a LoadedModel)
