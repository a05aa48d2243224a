"""A thinking model's budget, on the host: the think span followed token by token (`record.spans.SpanTracker`) and
what the budget does about it. Hard: once the span holds `think_budget` think tokens, its closing marker is due and
the decoder takes it as a forced step (`due`, then `taken`, recorded like a fork's); no thinking (`think` off) is a
hard budget of 0: a span the model opens anyway is closed at once. Soft: the closing marker's logit
is raised from `SOFT_START` of the budget on (`soft_raise`), handed to the stage `stages.apply_think_budget` as a (V,)
vector (`bias_vector`), so the record's change is the raise. It does not draw, and holds no device array.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from app.core.record.record import Sample
from app.core.record.spans import Markers, SpanTracker
from app.core.sampler.forcing import forced
from app.core.settings import SamplerSettings
from backends.ops import Array, ArrayOps

SOFT_START = 0.75  # the soft budget starts raising the closing marker at this share of the budget
SOFT_RAISE = 10.0  # nats it adds at the budget itself, growing on at the same rate past it
MAX_RAISE = 100.0  # (a logit bias's own limit)


def soft_raise(count: int, budget: int) -> float:
    """What the soft budget adds to the closing marker's logit after `count` think tokens: 0 before `SOFT_START` of
    the budget, `SOFT_RAISE` at the budget, on in a line past it, at most `MAX_RAISE`."""
    start = budget * SOFT_START
    if budget <= 0 or count < start:
        return 0.0
    return min(SOFT_RAISE * (count - start) / max(budget - start, 1e-9), MAX_RAISE)


@dataclass
class ThinkState:
    """One row's think span and budget: `push` each token taken (its span label), ask `due` before each step."""

    tracker: SpanTracker
    budget: int = 0  # 0: labels only
    soft: bool = False
    off: bool = False  # no thinking: the span is closed as soon as it opens (a hard budget of 0)
    closing: list[int] = field(default_factory=list)  # the closing marker's tokens still to force (hard)
    asked: int | None = None  # the token `due` handed the decoder for the step in hand
    forced: bool = False  # the last token pushed was the budget's

    @classmethod
    def start(cls, markers: Markers, prompt: Sequence[int], generated: Sequence[int],
              s: SamplerSettings) -> ThinkState:
        """A row about to draw after `prompt` and the tokens it has already `generated` (a branch's): the budget
        counts generated think tokens only (a template that opens the span for the model opens it at 0)."""
        tracker = SpanTracker.start(markers, prompt)
        tracker.count = 0
        for token in generated:
            tracker.push(token)
        return cls(tracker, s.think_budget, s.think_soft, off=not s.think)

    @property
    def markers(self) -> Markers:
        return self.tracker.markers

    def due(self) -> int | None:
        """The token a hard budget forces at the next step (the closing marker's next), else None."""
        t = self.tracker
        limit = 0 if self.off else self.budget if self.budget > 0 and not self.soft else None
        if limit is None:
            return None
        if not self.closing and t.thinking and t.count >= limit:
            self.closing = list(self.markers.close)
        self.asked = self.closing[0] if self.closing else None
        return self.asked

    def push(self, token: int) -> str:
        """Take the step's token (drawn, or the one `due` asked for); its label."""
        self.forced = self.asked is not None and token == self.asked
        if self.forced:
            self.closing.pop(0)
        self.asked = None
        return self.tracker.push(token)

    def bias(self) -> float:
        """A soft budget's raise of the closing marker for the next step (0 outside the think span)."""
        t = self.tracker
        return soft_raise(t.count, self.budget) if self.soft and t.thinking else 0.0

    def bias_vector(self, vocab: int) -> np.ndarray:
        """(V,) float32: `bias` at the closing marker's first token, 0 elsewhere."""
        vec = np.zeros(vocab, dtype=np.float32)
        first = self.markers.close[0] if self.markers.close else -1
        if 0 <= first < vocab:
            vec[first] = self.bias()
        return vec


def bias_vector(state: ThinkState | None, vocab: int) -> np.ndarray:
    """The soft budget's (V,) raise for a row's next step (zeros without a state: a step with no history)."""
    return np.zeros(vocab, dtype=np.float32) if state is None else state.bias_vector(vocab)


def taken(ops: ArrayOps, s: Sample, token: int, logits: Array) -> Sample:
    """`s` with the budget's `token` taken instead of the drawn one (`forcing.forced`); a token outside the record's
    candidates gets its raw log-probability and rank from the step's `logits` (V,), its probability under the stages
    not observed (NaN)."""
    try:
        return forced(s, token)
    except ValueError:
        x = np.asarray(ops.numpy(logits), dtype=np.float64).reshape(-1)
        m = x.max()
        logprob = float(x[token] - m - math.log(np.exp(x - m).sum()))
        rank = int((x > x[token]).sum() + ((x == x[token]) & (np.arange(x.size) < token)).sum())
        return replace(s.with_values(prob=math.nan, raw_logprob=logprob), token=int(token), rank=rank)
