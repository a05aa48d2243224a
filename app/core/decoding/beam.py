"""Beam search over a local model's batched forward, with a named record of every step's cut.

`BeamSearch` follows transformers' `_beam_search` rule for rule (greedy; docs/beam.md spells the rules out): the
live beams are the rows of one batch, and the cache's rows follow the kept beams through the backend's `reorder`
(nothing is prefilled again). The records (`BeamStep`, `Candidate`, `Hypothesis`) and the events that carry them
(`BeamStarted`, `BeamStepped`, `BeamFinished`, sent by `beam_run`) live here; no text, no threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from app.core.settings import SettingsError
from backends.base import LoadedModel

if TYPE_CHECKING:
    from app.core.record.trace import StepTrace
    from app.core.sampler.constraint import Matcher

MAX_WIDTH = 8
# length ** penalty stays a float32 for any length max_tokens allows (100,000 ** 5 = 1e25; ** 8 would overflow)
MAX_LENGTH_PENALTY = 5.0
Fate = Literal["kept", "finished", "pruned"]
EarlyStopping = bool | Literal["never"]
NEG = -1.0e9  # transformers' "impossible" score: the score of an empty finished slot


@dataclass(frozen=True)
class BeamSettings:
    """What a beam search is asked for (transformers' names: num_beams, length_penalty, early_stopping,
    no_repeat_ngram_size, max_new_tokens)."""

    width: int = 4
    length_penalty: float = 1.0
    early_stopping: EarlyStopping = False
    no_repeat_ngram: int = 0  # 0: off
    max_tokens: int = 32

    def __post_init__(self) -> None:
        if not 1 <= self.width <= MAX_WIDTH:
            raise SettingsError(f"beam width must be 1 to {MAX_WIDTH}, got {self.width}")
        if self.early_stopping not in (True, False, "never"):
            raise SettingsError(f'early stopping must be true, false or "never", got {self.early_stopping!r}')
        if self.no_repeat_ngram < 0:
            raise SettingsError(f"no-repeat n-gram size must be 0 (off) or more, got {self.no_repeat_ngram}")
        if self.max_tokens < 1:
            raise SettingsError(f"max tokens must be at least 1, got {self.max_tokens}")
        if not -MAX_LENGTH_PENALTY <= self.length_penalty <= MAX_LENGTH_PENALTY:  # (NaN too)
            raise SettingsError(f"length penalty must be a number from {-MAX_LENGTH_PENALTY:g} to "
                                f"{MAX_LENGTH_PENALTY:g}, got {self.length_penalty}")


@dataclass(frozen=True)
class Candidate:
    """One extension of a live beam that the step considered."""

    beam: int  # the live beam it extends (its row at this step)
    token: int
    logprob: float  # log p(token | beam), after the no-repeat ban (-inf where banned)
    cumulative: float  # the beam's cumulative log-probability plus `logprob`: what the cut ranks by
    fate: Fate  # kept (a live beam next step), finished (filed as a hypothesis now), pruned
    row: int | None = None  # kept: its row (live beam index) at the next step
    score: float | None = None  # finished: cumulative / len ** length_penalty


@dataclass(frozen=True)
class BeamStep:
    """Step `step`: each live beam's best `shortlist` extensions (every one that could make the cut), best first."""

    step: int
    cumulative: tuple[float, ...]  # each live beam's cumulative log-probability before this step
    candidates: tuple[Candidate, ...]
    shortlist: int  # K: the cut ranks the best K extensions over all beams; the rest are pruned outright


@dataclass(frozen=True)
class Hypothesis:
    """A finished beam: its generated tokens (the end-of-text token included when it ended on one)."""

    tokens: tuple[int, ...]
    logprob: float  # the sum of its tokens' log-probabilities
    score: float  # logprob / len(tokens) ** length_penalty: what the hypotheses are ranked by
    step: int  # the step it finished on
    reason: Literal["eos", "length"]


@dataclass(frozen=True)
class BeamResult:
    hypotheses: tuple[Hypothesis, ...]  # best first, at most `width`
    steps: int
    reason: Literal["done", "length", "cancelled"]  # done: no live beam could do better (or early stopping)


@dataclass(frozen=True)
class BeamStarted:
    request_id: int
    prompt_ids: tuple[int, ...]
    prompt_text: str
    max_tokens: int  # after the context's cap


@dataclass(frozen=True)
class BeamStepped:
    request_id: int
    step: BeamStep
    texts: dict[int, str]  # display text of every token this step's record names


@dataclass(frozen=True)
class BeamFinished:
    request_id: int
    result: BeamResult
    texts: tuple[str, ...]  # per hypothesis (best first): its text (an end-of-text token not shown)
    runs: tuple[tuple[StepTrace, ...], ...]  # per hypothesis: its steps as a beam run's (empty: cannot open)


BeamEvent = BeamStarted | BeamStepped | BeamFinished


@dataclass
class _Live:
    tokens: list[tuple[int, ...]]  # per row
    scores: np.ndarray  # (rows,) float32 cumulative log-probabilities, best first
    finished: list[Hypothesis] = field(default_factory=list)  # best first, at most width
    open: bool = True  # transformers' is_early_stop_heuristic_unsatisfied


class BeamSearch:
    """One beam search from a prefilled prompt. `steps()` yields a `BeamStep` per step; `result` after it.

    `logits` (1, V) are the prompt's last position's; `cache` holds the prompt in one row, and is reordered into
    `width` rows as the search goes (the caller passes a cache it may give up). `max_tokens` is the length limit
    after any context cap. A constraint's `grammar` (a matcher after the prompt) constrains every beam: each row has
    its own copy, which follows the row's beam as the rows are reordered, and the tokens it does not allow are
    banned (-inf, as a ban of no-repeat's).
    """

    def __init__(self, model: LoadedModel, prompt_ids: Sequence[int], logits: Any, cache: Any,
                 settings: BeamSettings, eos_ids: frozenset[int], max_tokens: int | None = None,
                 grammar: Matcher | None = None) -> None:
        self.model, self.cache, self.settings = model, cache, settings
        self._grammars = [grammar] if grammar is not None else []  # per row
        self.prompt = list(prompt_ids)
        self.eos = np.array(sorted(eos_ids), dtype=np.int64)
        self.max_tokens = max_tokens if max_tokens is not None else settings.max_tokens
        self.shortlist = max(2, 1 + len(eos_ids)) * settings.width
        self._logits = logits
        self._live = _Live([()], np.zeros(1, dtype=np.float32))
        self.result: BeamResult | None = None

    def steps(self, cancel: threading.Event | None = None) -> Iterator[BeamStep]:
        live = self._live
        for t in range(self.max_tokens):
            if cancel is not None and cancel.is_set():
                self.result = BeamResult(tuple(live.finished), t, "cancelled")
                return
            logp = self._logprobs(self.model.ops.numpy(self._logits))  # (rows, V)
            step, kept = self._cut(t, logp)
            yield step
            if self._stop(t, step):
                self.result = BeamResult(tuple(live.finished), t + 1, "length" if t + 1 >= self.max_tokens
                                         else "done")
                return
            self.model.reorder(self.cache, [c.beam for c in kept])
            self._logits = self.model.forward([[c.token] for c in kept], self.cache)
        self.result = BeamResult(tuple(live.finished), self.max_tokens, "length")

    def _logprobs(self, logits: np.ndarray) -> np.ndarray:
        """log-softmax per row in float32, then the no-repeat n-gram ban (-inf), as transformers' processor."""
        x = np.asarray(logits, dtype=np.float32)
        x = x - x.max(axis=-1, keepdims=True)
        logp = x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
        n = self.settings.no_repeat_ngram
        if n:
            for row, tokens in enumerate(self._live.tokens):
                logp[row, banned_tokens(self.prompt + list(tokens), n)] = -np.inf
        for row, (tokens, grammar) in enumerate(zip(self._live.tokens, self._grammars, strict=False)):
            logp[row, grammar.mask([*self.prompt, *tokens])[: logp.shape[1]] == 0] = -np.inf
        return logp

    def _cut(self, t: int, logp: np.ndarray) -> tuple[BeamStep, list[Candidate]]:
        """The step's record and the kept candidates (in row order of the next step)."""
        live, w, k = self._live, self.settings.width, self.shortlist
        cum = logp + live.scores[:, None]  # (rows, V)
        vocab = cum.shape[1]
        top = _top(cum.reshape(-1), k)  # flat indices, best first
        beams, tokens = top // vocab, top % vocab
        ends = np.isin(tokens, self.eos) | (t + 1 >= self.max_tokens)
        order = [j for j in range(k) if not ends[j]] + [j for j in range(k) if ends[j]]
        kept = order[:w]
        filed = self._file(t, cum.reshape(-1)[top], beams, tokens, ends)
        fates: dict[tuple[int, int], Candidate] = {}
        for row, j in enumerate(kept):
            b, tok = int(beams[j]), int(tokens[j])
            fates[b, tok] = Candidate(b, tok, float(logp[b, tok]), float(cum[b, tok]), "kept", row=row)
        for j, score in filed.items():
            b, tok = int(beams[j]), int(tokens[j])
            fates[b, tok] = Candidate(b, tok, float(logp[b, tok]), float(cum[b, tok]), "finished", score=score)
        step = BeamStep(t, tuple(float(x) for x in live.scores), _record(logp, cum, k, fates), k)
        kept_c = [fates[int(beams[j]), int(tokens[j])] for j in kept]
        if self._grammars:  # each row's matcher follows its beam (a beam kept twice: copied)
            old, self._grammars = self._grammars, []
            for i, c in enumerate(kept_c):
                taken = any(d.beam == c.beam for d in kept_c[:i])
                self._grammars.append(old[c.beam].fork() if taken else old[c.beam])
        live.tokens = [live.tokens[c.beam] + (c.token,) for c in kept_c]
        live.scores = cum.reshape(-1)[top[kept]].astype(np.float32)
        return step, kept_c

    def _file(self, t: int, top_cum: np.ndarray, beams: np.ndarray, tokens: np.ndarray,
              ends: np.ndarray) -> dict[int, float]:
        """File the shortlist's first `width` that ended as hypotheses, keeping the best `width`; returns the
        ones filed now that stayed (shortlist index -> score)."""
        s, live = self.settings, self._live
        full = len(live.finished) >= s.width
        if not live.open or (full and s.early_stopping is True):
            return {}
        norm = np.float32((t + 1) ** s.length_penalty)
        new = {j: Hypothesis(live.tokens[int(beams[j])] + (int(tokens[j]),), float(top_cum[j]),
                             float(np.float32(top_cum[j]) / norm), t, "eos" if np.isin(tokens[j], self.eos) else
                             "length") for j in range(s.width) if ends[j]}
        merged = sorted([*live.finished, *new.values()], key=lambda h: -h.score)[: s.width]
        live.finished = merged
        return {j: h.score for j, h in new.items() if any(h is m for m in merged)}

    def _stop(self, t: int, step: BeamStep) -> bool:
        """transformers' stopping rule after step t: no improvement possible, all finished with early stopping,
        or every shortlisted extension ended (the length limit)."""
        s, live = self.settings, self._live
        full = len(live.finished) >= s.width
        span = self.max_tokens if s.early_stopping == "never" and s.length_penalty > 0 else t + 1
        best = np.float32(live.scores[0]) / np.float32(span ** s.length_penalty)
        worst = min(h.score for h in live.finished) if full else NEG
        live.open = live.open and bool(best > worst)
        return not live.open or (full and s.early_stopping is True) or t + 1 >= self.max_tokens


def _top(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest of `x`, largest first (ties: the lower index first)."""
    k = min(k, x.size)
    part = np.argpartition(-x, k - 1)[:k]
    part.sort()
    return part[np.argsort(-x[part], kind="stable")]


def _record(logp: np.ndarray, cum: np.ndarray, k: int, fates: dict[tuple[int, int], Candidate]) -> tuple:
    """Every live beam's best k extensions by cumulative score (all that could make the cut), best first."""
    out = []
    for b in range(cum.shape[0]):
        for tok in _top(cum[b], k).tolist():
            out.append(fates.get((b, tok)) or Candidate(b, tok, float(logp[b, tok]), float(cum[b, tok]), "pruned"))
    return tuple(sorted(out, key=lambda c: -c.cumulative))


def banned_tokens(seq: Sequence[int], n: int) -> list[int]:
    """Tokens that would repeat an n-gram already in `seq` (transformers' NoRepeatNGramLogitsProcessor)."""
    if len(seq) + 1 < n:
        return []
    key = tuple(seq[len(seq) - n + 1:]) if n > 1 else ()
    return [seq[i + n - 1] for i in range(len(seq) - n + 1) if tuple(seq[i:i + n - 1]) == key]
