"""What a branch is made of, without the model: the requests for a fork, a regeneration and a replay, and the
replay's off-model part.

`replay(trace, settings)` re-draws a recorded run under other settings with the same uniform per step, from each
step's recorded top-256 raw logits, for as long as those decide the draw exactly (`decided_by_record`: the tokens
the new settings keep are all among the recorded ones); the model takes over from the first step where they do
not, or after the first step whose token differs. `branch_request` makes the request that continues it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.core.events import FinishReason, Request
from app.core.models.sources import ModelSpec
from app.core.record.multiverse import Multiverse
from app.core.record.trace import RunTrace, Sample, StepTrace
from app.core.sampler.pipeline import History, apply_penalties
from app.core.sampler.sampling import RECORD_K
from app.core.sampler.step_view import resample_step
from app.core.settings import SamplerSettings, StageOrder
from backends.ops import NUMPY


@dataclass(frozen=True)
class Replay:
    """A run re-drawn off the model: `samples[i]` is step i under the new settings, for every step the record
    decided, up to and including the first whose token differs from the run's (`diverged`)."""

    samples: tuple[Sample, ...]
    diverged: int | None  # the first step whose token differs, or None

    @property
    def exact(self) -> int:
        return len(self.samples)

    def steps(self, trace: RunTrace) -> list[StepTrace]:
        """The re-drawn steps that kept the run's tokens, as steps of a new trace (texts from the run's)."""
        upto = len(self.samples) if self.diverged is None else self.diverged
        return [_restep(trace.steps[i], self.samples[i]) for i in range(upto)]


def replay(trace: RunTrace, settings: SamplerSettings) -> Replay:
    samples: list[Sample] = []
    for i, st in enumerate(trace.steps):
        s = st.sample
        if s.is_partial or s.u is None or not decided_by_record(trace, i, settings):
            break
        new = resample_step(trace, i, settings)
        samples.append(new)
        if new.token != st.token_id:
            return Replay(tuple(samples), i)
    return Replay(tuple(samples), None)


def decided_by_record(trace: RunTrace, i: int, settings: SamplerSettings) -> bool:
    """Whether step i's recorded top-K raw logits decide its draw under `settings` exactly: every token the
    settings could keep is recorded. Conservative: the unrecorded tail's logits are only known to be at most
    the K-th recorded one, `tail`, and penalties (when they only lower logits) cannot lift them above it."""
    logits = np.asarray(trace.steps[i].sample.top_logits, dtype=np.float32)  # (K,) descending
    if settings.think_budget > 0 or not settings.think:
        return False  # a think budget (no thinking: one of 0) forces or raises its marker by the span's count, which
        # a re-sample does not keep
    if len(logits) < RECORD_K:
        return True  # the whole vocabulary was recorded
    if settings.needs_whole_vocabulary():
        return False  # a stage before top-k cuts on the whole vocabulary's distribution, or a bias lifts a token
    if settings.uses_penalties and (settings.repetition_penalty < 1 or settings.frequency_penalty < 0
                                    or settings.presence_penalty < 0):
        return False  # a penalty that raises logits could lift an unrecorded token
    tail = float(logits[-1])
    x = _penalized(trace, i, settings, logits)
    if settings.greedy:
        return float(x.max()) > tail
    if 0 < settings.top_k < RECORD_K:
        return float(np.sort(x)[::-1][settings.top_k - 1]) > tail
    if settings.top_p < 1:
        return False  # top-p alone cuts on the whole vocabulary's mass, which a re-sample over the record renormalizes
    if settings.min_p > 0:
        t = settings.temperature if settings.order == StageOrder.TEMPERATURE_FIRST else 1.0
        return (tail - float(x.max())) / t < math.log(settings.min_p)
    return False  # pure temperature sampling: the tail has mass


def _penalized(trace: RunTrace, i: int, settings: SamplerSettings, logits: np.ndarray) -> np.ndarray:
    if not settings.uses_penalties:
        return logits
    ids = trace.steps[i].sample.top_ids
    where = {int(t): j for j, t in enumerate(ids)}
    local = lambda seq: [where[int(t)] for t in seq if int(t) in where]
    h = History.start(NUMPY, len(ids), local(trace.prompt_ids), local(trace.token_ids[:i]))
    return apply_penalties(NUMPY, logits, settings, h.context, h.generated)


def _restep(st: StepTrace, sample: Sample) -> StepTrace:
    texts = dict(zip(st.sample.top_ids.tolist(), st.top_texts, strict=False))
    top = tuple(texts.get(t, "") for t in sample.top_ids[: st.top_n].tolist())
    return StepTrace(st.step, sample, st.text, top, 0.0)


def branch_request(trace: RunTrace, step: int, settings: SamplerSettings, *, kind: str, force: int | None = None,
                   spec: ModelSpec | None = None, top_n: int = 20, then: tuple[int, ...] = ()) -> Request:
    """The request that continues `trace` from `step`: its first `step` steps inherited, `force` taken there (and
    `then` at the steps after, one each: a multiverse path). The seed is `settings.seed` (the caller decides: the
    parent's, to go on with its uniforms, or a new one)."""
    return Request(model=spec or ModelSpec(), prompt_ids=tuple(trace.prompt_ids), settings=settings, top_n=top_n,
                   inherited=tuple(trace.steps[:step]), force=force, force_after=then, parent=(trace.run_id, step),
                   branch=kind)


def path_request(tree: Multiverse, node: int, settings: SamplerSettings, *, spec: ModelSpec | None = None,
                 parent: RunTrace | None = None, top_n: int = 20) -> Request:
    """The run that takes multiverse node `node`'s path after the tree's prefix, then goes on drawing under
    `settings`: a fork of `parent` (the run the tree looked ahead from) at the step it looked from, its steps before
    inherited and its seed's uniforms going on; or, from the prompt's end, a new run of the prompt. It draws at least
    the path."""
    path = tree.path_ids(node)
    if not path:
        raise ValueError("the root is the prefix itself: pick a node after it")
    k = len(tree.start)
    s = settings.with_(max_tokens=max(settings.max_tokens, k + len(path)))
    if parent is not None:
        return branch_request(parent, k, s.with_(seed=parent.seed), kind="fork", force=path[0], spec=spec,
                              top_n=top_n, then=path[1:])
    return Request(model=spec or ModelSpec(), prompt_ids=tree.prompt_ids, settings=s, top_n=top_n, force=path[0],
                   force_after=path[1:])


def replay_request(trace: RunTrace, settings: SamplerSettings, r: Replay, *, spec: ModelSpec | None = None,
                   top_n: int = 20) -> Request:
    """The model's part of a replay: the re-drawn steps inherited, the diverging token forced (the model
    records that step again, with the same uniform, and detokenizes it)."""
    steps = r.steps(trace)
    force = r.samples[r.diverged].token if r.diverged is not None else None
    return Request(model=spec or ModelSpec(), prompt_ids=tuple(trace.prompt_ids), settings=settings.with_(
        seed=trace.seed), top_n=top_n, inherited=tuple(steps), force=force, parent=(trace.run_id, len(steps)),
        branch="replay")


def replay_finished(trace: RunTrace, r: Replay, settings: SamplerSettings) -> FinishReason | None:
    """How a replay ends when the record decided it to the end with the run's own tokens (no model needed):
    the same end of text or stop string, or max tokens reached; None when the model must go on."""
    if r.diverged is not None or r.exact < len(trace.steps):
        return None
    if trace.finish_reason in ("eos", "stop"):
        return trace.finish_reason
    return "length" if settings.max_tokens <= len(trace.steps) else None


def uncertain_steps(entropies: Sequence[float], share: float = 0.05, above: float | None = None) -> list[int]:
    """The steps where the model was least sure: entropy above `above` (nats), or else the top `share` of the
    steps by entropy (at least one when any step had a choice). Steps without an entropy (NaN) never count."""
    h = np.asarray(entropies, dtype=np.float64)
    ok = np.isfinite(h) & (h > 0)
    if above is not None:
        return np.flatnonzero(ok & (h > above)).tolist()
    n = min(int(ok.sum()), max(1, math.ceil(share * len(h))))
    order = np.argsort(-np.where(ok, h, -np.inf), kind="stable")[:n]
    return sorted(order.tolist())


def runner_up(sample: Sample) -> int | None:
    """The most probable token (by the model's raw distribution) other than the one drawn."""
    return next((int(t) for t in sample.top_ids if int(t) != sample.token), None)
