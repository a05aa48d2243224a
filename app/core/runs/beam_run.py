"""A beam search as a request on the model thread: `BeamRequest` in, `BeamStarted` / `BeamStepped` /
`BeamFinished` events out (a `Failed` where it cannot run).

`run_beam(model, request, cancel, prefix)` checks that the model has a local forward pass (a server's model
samples by itself: refused in one line), prefills the prompt (reusing the `Prefix` cache, which keeps the
prompt's one-row cache for the next run), runs `BeamSearch` on a copy of it, and makes each finished hypothesis
openable as a run of its own kind: each step records the model's distribution and the token the beam took in it,
with its probability under the model, no sampler stage (`hypothesis_steps`), so that it can be shown and forked
like any other run. No Qt.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.decoding.beam import (
    BeamEvent,
    BeamFinished,
    BeamResult,
    BeamSearch,
    BeamSettings,
    BeamStarted,
    BeamStepped,
    Hypothesis,
)
from app.core.decoding.generation import Prefix, build_prompt
from app.core.decoding.prefill import prefill
from app.core.events import Message, Request, job_id
from app.core.models.sources import ModelSpec
from app.core.record.trace import StepTrace
from app.core.sampler.constraint import matcher_for
from app.core.sampler.forcing import taken
from app.core.sampler.sampling import start_sample
from app.core.settings import SamplerSettings
from app.core.stage_inputs import Constraint
from backends import connects
from backends.base import LoadedModel, Model, ModelLoadError

GREEDY = SamplerSettings(temperature=0.0)


class BeamRefusedError(ModelLoadError):
    """A model that cannot run a beam search (no local forward pass)."""


@dataclass(frozen=True)
class BeamRequest:
    model: ModelSpec = field(default_factory=ModelSpec)
    prompt: str = ""
    messages: tuple[Message, ...] | None = None
    prompt_ids: tuple[int, ...] | None = None
    settings: BeamSettings = field(default_factory=BeamSettings)
    ignore_eos: bool = False
    eos_ids: frozenset[int] | None = None  # the tokens that end a beam (None: the tokenizer's end-of-text tokens)
    top_n: int = 20  # candidates per step in an opened hypothesis' steps
    openable: bool = True  # record each hypothesis' steps, to open it as a run (the command line does not)
    constraint: Constraint | None = None  # what every beam must match (each beam its own matcher)
    think: bool = True  # False: the chat template is told not to think (the settings' `think`)
    id: int = field(default_factory=job_id)  # it makes no run: its events never route to one

    @property
    def run_ids(self) -> tuple[int, ...]:
        return ()  # no run of the session: nothing to mark cancelled on a failure

    def as_request(self) -> Request:
        """The prompt part as a generation request (what `build_prompt` reads), under this one's id: no run id taken."""
        return Request(model=self.model, prompt=self.prompt, messages=self.messages, prompt_ids=self.prompt_ids,
                       settings=SamplerSettings(think=self.think), id=self.id)




def run_beam(model: Model, request: BeamRequest, cancel: threading.Event,
             prefix: Prefix | None = None) -> Iterator[BeamEvent]:
    local = _local(model)
    ids, text = build_prompt(local.tokenizer, request.as_request(), local.info.context_length)
    ctx = local.info.context_length
    steps = min(request.settings.max_tokens, ctx - len(ids)) if ctx else request.settings.max_tokens
    prefix = prefix if prefix is not None else Prefix()
    prompt_cache, logits = _prefill(local, prefix, ids, cancel)
    if logits is None:
        yield BeamFinished(request.id, BeamResult((), 0, "cancelled"), (), ())
        return
    yield BeamStarted(request.id, tuple(ids), text, steps)
    eos = frozenset() if request.ignore_eos else request.eos_ids or local.tokenizer.eos_ids
    grammar = None if request.constraint is None else matcher_for(request.constraint, local.tokenizer,
                                                                  int(logits.shape[-1]), len(ids))
    search = BeamSearch(local, ids, logits, local.fork(prompt_cache, 1), request.settings, eos, steps, grammar)
    texts: dict[int, str] = {}
    for step in search.steps(cancel):
        yield BeamStepped(request.id, step, _texts(local, (c.token for c in step.candidates), texts))
    result = search.result
    assert result is not None
    runs = tuple(hypothesis_steps(local, prompt_cache, logits, h, eos, request.top_n, texts)
                 for h in result.hypotheses) if request.openable else ()
    prefix.keep(local, prompt_cache, ids)
    said = tuple(local.tokenizer.decode([t for t in h.tokens if t not in eos]) for h in result.hypotheses)
    yield BeamFinished(request.id, result, said, runs)


def refuse_server(spec: ModelSpec) -> None:
    """A model on a server is refused before anything connects to it: no answer of the server's could give it a
    local forward pass (a server that never answers would otherwise hold the refusal for its whole timeout)."""
    if connects(spec.backend):
        raise BeamRefusedError(_ON_A_SERVER.format(spec.label))


def _local(model: Model) -> LoadedModel:
    if not model.capabilities.forward:
        raise BeamRefusedError(_ON_A_SERVER.format(model.info.name))
    return model  # type: ignore[return-value]  # (capabilities.forward: it is a LoadedModel)


_ON_A_SERVER = ("beam search needs a local forward pass over the model's rows; {} runs on a server, which samples "
                "by itself: open a local model for beam search")


def _prefill(model: LoadedModel, prefix: Prefix, ids: list[int], cancel: threading.Event) -> tuple[Any, Any]:
    """The prompt's one-row cache and its last position's logits (None if cancelled between chunks)."""
    cache, reused = prefix.take(model, ids)
    logits = prefill(model, cache, ids, cancel, reused)
    if logits is None:
        prefix.keep(model, cache, ids)
    return cache, logits


def hypothesis_steps(model: LoadedModel, prompt_cache: Any, prompt_logits: Any, h: Hypothesis,
                     eos: frozenset[int], top_n: int, known: dict[int, str]) -> tuple[StepTrace, ...]:
    """The hypothesis as a recorded beam run: step i's record is the model's distribution after the prompt and the
    first i tokens (one all-positions forward on a copy of the prompt's cache), the token the beam took in it with
    its probability under the model; no sampler stage ran (`forcing.taken`)."""
    rows = [prompt_logits[0]]
    if len(h.tokens) > 1:
        after = model.forward([list(h.tokens[:-1])], model.fork(prompt_cache, 1), positions="all")[0]  # (L-1, V)
        rows += [after[i] for i in range(len(h.tokens) - 1)]
    decoder, out = model.tokenizer.stream(), []
    for i, (token, logits) in enumerate(zip(h.tokens, rows, strict=True)):
        sample = start_sample(model.ops, logits, GREEDY, 0.5, top_n=top_n).result()  # (its raw row and logits)
        if token not in sample.top_ids:
            return ()  # taken below the record's top candidates (a no-repeat ban): no run to open
        sample = taken(sample, token)
        piece = "" if token in eos else decoder.add(token)
        if i == len(h.tokens) - 1:
            piece += decoder.flush()
        top = sample.top_ids[:top_n].tolist()
        out.append(StepTrace(i, sample, piece, tuple(_texts(model, top, known)[t] for t in top), 0.0))
    return tuple(out)


def open_request(started: BeamStarted, steps: Sequence[StepTrace], spec: ModelSpec, top_n: int = 20) -> Request:
    """The request that opens a hypothesis as a run of the session: its steps inherited, nothing more to draw
    (the model thread prefills them, mostly from its cached prompt, and finishes the run)."""
    return Request(model=spec, prompt_ids=started.prompt_ids, settings=GREEDY.with_(max_tokens=len(steps)),
                   top_n=top_n, inherited=tuple(steps), branch="beam")


def _texts(model: LoadedModel, tokens: Iterator[int] | Sequence[int], known: dict[int, str]) -> dict[int, str]:
    """Display texts of `tokens`, kept in `known` across steps; returns `known`'s entries for these tokens."""
    out = {}
    for t in tokens:
        if t not in known:
            known[t] = model.tokenizer.token_text(t)
        out[t] = known[t]
    return out
