"""The answer a thinking model would give if it stopped thinking here: at steps of a run's think span (every K think
tokens, the span's own end, and any step asked for), the span is closed — its closing marker and what the template
puts before the answer appended — and the answer read: the first answer token's distribution, and each of a user's
answers' log-probability (the sum over its tokens), renormalized over the list.

`run_probes` walks the run's prefix once through the chunked forward (`prefill.ChunkedForward`, reusing the `Prefix`
cache a run leaves); at each probe the cache is forked into one row per answer, which take the closing tokens and
the answer in one batched all-positions forward, then the fork is dropped. Raw model distributions: no sampler
stage runs. Events: a `Probed` per probe, then `ProbesDone` (where the leading answer changed, where it settled).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from app.core.decoding.generation import Prefix
from app.core.decoding.prefill import ChunkedForward
from app.core.decoding.surprisal import log_softmax, top_k
from app.core.events import job_id
from app.core.models.sources import ModelSpec
from app.core.record.spans import THINK, Markers, SpanTracker, find_markers
from backends.base import LoadedModel

MAX_PROBES = 512  # probes of one run (a K of 1 over a long span would be a forward per token)
MAX_ANSWERS = 16  # scored per probe in one forward of (answers, tokens, vocabulary) logits


class ProbeError(ValueError):
    """Probes that cannot run: a model without reasoning markers, a run without a think span, an empty answer."""


@dataclass(frozen=True)
class ProbeRequest:
    """Probe the run whose steps drew `tokens` after `prompt_ids`: every `every` think tokens (0: none), its span's end,
    and the steps `at` (each: close the span before that step's token)."""

    model: ModelSpec = field(default_factory=ModelSpec)
    prompt_ids: tuple[int, ...] = ()
    tokens: tuple[int, ...] = ()
    every: int = 16
    at: tuple[int, ...] = ()
    answers: tuple[str, ...] = ()  # scored as whole sequences; none: the first token's distribution only
    markers: tuple[str, ...] = ()  # a custom pair (the settings' think_markers); (): the tokenizer's own
    top_n: int = 20  # first-token candidates kept per probe
    run_id: int = 0  # the run probed (its probes name it)
    id: int = field(default_factory=job_id)  # it makes no run: its events never route to one

    @property
    def run_ids(self) -> tuple[int, ...]:
        return ()


@dataclass(frozen=True)
class ThinkProbe:
    """One probe: the span closed before step `step` (after `think_tokens` think tokens). `top_ids`/`top_logprobs`
    the answer's first token, most likely first; `close_logprob` how likely the model was to close the span there
    itself; `answer_logprobs` each answer's whole log-probability (NaN where an answer was not given)."""

    step: int
    think_tokens: int
    top_ids: np.ndarray  # (N,) int
    top_logprobs: np.ndarray  # (N,) float32
    close_logprob: float
    answers: tuple[str, ...] = ()
    answer_logprobs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # (J,)

    @property
    def answer_probs(self) -> np.ndarray:
        """(J,) each answer's probability renormalized over the list (a softmax of the log-probabilities)."""
        lp = np.asarray(self.answer_logprobs, dtype=np.float64)
        if lp.size == 0:
            return lp
        e = np.exp(lp - lp.max())
        return e / e.sum()

    def first_prob(self, token: int) -> float | None:
        """The first answer token's probability for `token`, where it is among the kept candidates."""
        at = np.flatnonzero(self.top_ids == token)
        return float(math.exp(self.top_logprobs[at[0]])) if at.size else None

    @property
    def leading(self) -> str | int:
        """The answer it leans to: the likeliest of the list, else the likeliest first token's id."""
        if self.answers:
            return self.answers[int(np.argmax(self.answer_logprobs))]
        return int(self.top_ids[0])


@dataclass(frozen=True)
class Probed:
    request_id: int
    run_id: int
    probe: ThinkProbe
    total: int  # probes of the request


@dataclass(frozen=True)
class ProbesDone:
    request_id: int
    run_id: int
    probes: tuple[ThinkProbe, ...]
    changed: tuple[int, ...]  # steps whose probe leads with another answer than the probe before
    settled: int | None  # the step from which the leading answer no longer changed (None: no probe)
    cancelled: bool = False


def probe_points(markers: Markers, prompt: Sequence[int], tokens: Sequence[int], every: int,
                 at: Sequence[int] = ()) -> list[tuple[int, int]]:
    """(step, think tokens before it) of each probe: every `every` think tokens from the span's start, its end (the
    step whose token begins the closing marker, or the run's end where it never closed) and the steps `at` that are
    in the span; in step order, each once."""
    t = SpanTracker.start(markers, prompt)
    thinking, counts = t.thinking, {}
    t.count = 0
    for step, token in enumerate([*tokens, None]):
        if thinking:
            counts[step] = t.count
        if token is None or (thinking and _closes(t, token)):
            break
        t.push(token)
        thinking = t.thinking
    if not counts:
        return []
    last = max(counts)
    wanted = {s for s, c in counts.items() if every > 0 and c % every == 0} | {last} | {s for s in at if s in counts}
    return [(s, counts[s]) for s in sorted(wanted)][:MAX_PROBES]


def _closes(t: SpanTracker, token: int) -> bool:
    """Whether `token` begins the closing marker (a probe at its step is where the model closed the span itself)."""
    close = t.markers.close
    return bool(close) and token == close[0] and t.state == THINK


def run_probes(model: LoadedModel, request: ProbeRequest, cancel: threading.Event,
               prefix: Prefix | None = None) -> Iterator[Probed | ProbesDone]:
    markers = find_markers(model.tokenizer, request.markers)
    if markers is None:
        raise ProbeError("this model has no reasoning markers (<think>…</think> or gpt-oss's channels): give the "
                         "pair it uses (--think-markers OPEN CLOSE, or the sampler's think markers)")
    points = probe_points(markers, request.prompt_ids, request.tokens, request.every, request.at)
    if not points:
        raise ProbeError("this run has no think span to probe: its model never opened one")
    answers = _answers(model, request.answers)
    prefix = prefix if prefix is not None else Prefix()
    ids = [*request.prompt_ids, *request.tokens[: points[-1][0]]]
    # the cache a run left may hold more than the first probe's prefix: taken up to it (and its last token computed)
    cache, done = prefix.take(model, ids[: len(request.prompt_ids) + points[0][0]])
    last = np.zeros(0, dtype=np.float32)
    probes: list[ThinkProbe] = []
    for step, count in points:
        end = len(request.prompt_ids) + step
        if end > done:
            logits = ChunkedForward(model, cache, ids[:end], cancel, start=done).last()
            if logits is None:
                break
            done, last = end, np.asarray(model.ops.numpy(logits), dtype=np.float32).reshape(-1)
        if cancel.is_set():
            break
        probe = _probe(model, cache, markers, answers, request, step, count, last)
        probes.append(probe)
        yield Probed(request.id, request.run_id, probe, len(points))
    prefix.keep(model, cache, ids[:done])
    yield ProbesDone(request.id, request.run_id, tuple(probes), changed_at(probes), settled_at(probes),
                     len(probes) < len(points))


def _answers(model: LoadedModel, answers: Sequence[str]) -> list[tuple[int, ...]]:
    if len(answers) > MAX_ANSWERS:
        raise ProbeError(f"{len(answers)} answers: at most {MAX_ANSWERS} are scored")
    out = [tuple(model.tokenizer.encode(a, add_special_tokens=False)) for a in answers]
    for i, ids in enumerate(out):
        if not ids:
            raise ProbeError(f"answer {i + 1} is empty: give each answer's text")
    return out


def _probe(model: LoadedModel, cache: object, markers: Markers, answers: list[tuple[int, ...]],
           request: ProbeRequest, step: int, count: int, last: np.ndarray) -> ThinkProbe:
    """One probe over `cache` (holding the run up to `step`; `last` its last position's logits): a fork of a row per
    answer (one without answers) takes the closing tokens and its answer in one forward."""
    closing = markers.closing
    rows = [closing + a for a in answers] or [closing]
    width = max(len(r) for r in rows)
    batch = [list(r) + [r[-1]] * (width - len(r)) for r in rows]  # a pad after the end: causal, it changes nothing
    fork = model.fork(cache, len(rows))
    logits = np.asarray(model.ops.numpy(model.forward(batch, fork, "all")), dtype=np.float32)  # (R, T, V)
    first = log_softmax(logits[0, len(closing) - 1][None, :])[0]
    best = top_k(first[None, :], min(request.top_n, first.size))[0]
    scores = np.array([_sequence_logprob(logits[j], len(closing), answers[j]) for j in range(len(answers))],
                      dtype=np.float32)
    close_lp = float(log_softmax(last[None, :])[0, markers.close[0]]) if markers.close else math.nan
    return ThinkProbe(step, count, best.astype(np.int64), first[best].astype(np.float32), close_lp,
                      tuple(request.answers), scores)


def _sequence_logprob(row: np.ndarray, start: int, answer: tuple[int, ...]) -> float:
    """log p(answer) from one row's all-positions logits (T, V), the answer's first token at position `start`."""
    lp = log_softmax(row[start - 1: start - 1 + len(answer)])
    return float(lp[np.arange(len(answer)), list(answer)].sum())


def changed_at(probes: Sequence[ThinkProbe]) -> tuple[int, ...]:
    """The steps whose probe leads with another answer than the probe before it (where it changed its mind)."""
    return tuple(b.step for a, b in itertools.pairwise(probes) if a.leading != b.leading)


def settled_at(probes: Sequence[ThinkProbe]) -> int | None:
    """The first probe's step from which the leading answer stays the last probe's: more thinking after it did not
    change the answer (None without probes)."""
    if not probes:
        return None
    final, step = probes[-1].leading, probes[-1].step
    for p in reversed(probes):
        if p.leading != final:
            break
        step = p.step
    return step
