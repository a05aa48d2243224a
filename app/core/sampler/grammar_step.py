"""What a row's grammar did at one step, for its record, and what a constrained run watches for: `Allowed` (the mask a
`constraint.Matcher` made, turned into the step's `GrammarStep`), `Check` (it, and for a constraint placed
"on_reject" how the step is drawn again), `Replayed` (a recorded step's grammar for a re-sample) and `stuck` (a run
that makes only whitespace or one pattern). Reads llguidance's masks; compiles nothing, draws nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from app.core.record.record import GrammarStep, Sample
from backends.ops import Array, ArrayOps

if TYPE_CHECKING:
    from app.core.sampler.constraint import GrammarEnded

STUCK_TOKENS = 32  # a constrained run that makes only whitespace or one repeat this long is stuck


_ONES: dict[int, np.ndarray] = {}


def ones(vocab: int) -> np.ndarray:
    """(V,) uint8 ones, read-only, one array per vocabulary: the mask of a grammar that cuts nothing."""
    if vocab not in _ONES:
        ones = np.ones(vocab, dtype=np.uint8)
        ones.flags.writeable = False
        _ONES[vocab] = ones
    return _ONES[vocab]


@dataclass(frozen=True)
class Allowed:
    """What a row's grammar allowed at one step: its mask and where it ran; `record` adds that to the step's record."""

    place: str
    mask: np.ndarray  # (V,) uint8
    legal: int
    ops: ArrayOps
    logits: Array  # the row's raw logits (V,): the most probable allowed token, where none was recorded

    def allows(self, token: int) -> bool:
        return bool(self.mask[token])

    def record(self, s: Sample, removed: float | None, rejected: int | None = None) -> Sample:
        """`s` with its `GrammarStep`: the favourite is the model's top token; the best allowed the first allowed of
        the recorded top-K raw candidates, else (none of them allowed) the whole vocabulary's, read from the logits.
        `removed`: the probability its stage removed (None: it did not run, a draw it accepted after the fact)."""
        top = s.top_ids.astype(np.int64)
        legal_top = self.mask[top].astype(bool)
        logits = s.top_logits
        assert logits is not None
        if legal_top.any():
            at = int(np.argmax(legal_top))
            best, margin = int(top[at]), float(logits[0]) - float(logits[at])
        else:
            best, value = self._best_outside()
            margin = float(logits[0]) - value
        grammar = GrammarStep(self.place, self.legal, removed, int(top[0]), best, margin, legal_top, rejected)
        return replace(s, grammar=grammar)

    def _best_outside(self) -> tuple[int, float]:
        """The most probable allowed token of the whole vocabulary, and its raw logit (-inf: none is)."""
        ops = self.ops
        x = ops.numpy(self.logits).astype(np.float32)  # (a rare step: read once, on the host)
        x = np.where(self.mask > 0, np.nan_to_num(x, nan=-np.inf), -np.inf)
        i = int(np.argmax(x))
        return i, float(x[i])


def stuck(pieces: Sequence[str], tokens: Sequence[int], n: int = STUCK_TOKENS) -> str | None:
    """Why a constrained run's last `n` tokens look stuck: only whitespace, or one short pattern repeated (the same
    1 to n/4 tokens over and over); None when they do not (or fewer than `n` were made)."""
    if len(tokens) < n:
        return None
    if all(p and p.isspace() for p in pieces[-n:]):
        return f"the last {n} tokens were only whitespace"
    last = list(tokens[-n:])
    for period in range(1, n // 4 + 1):
        if all(last[i] == last[i - period] for i in range(period, n)):
            return f"the last {n} tokens repeat a pattern of {period} token{'s' * (period > 1)}"
    return None


class Replayed:
    """A recorded step's grammar as a re-sample's matcher (`sampling.resample`), over the step's top-K candidates in
    the re-sample's `order`: the recorded candidates it allowed (`GrammarStep.legal_top`), no other."""

    def __init__(self, grammar: GrammarStep, place: str, order: np.ndarray) -> None:
        self._mask = grammar.legal_top[order].astype(np.uint8)
        self.place, self.legal = place, grammar.legal

    def mask(self, ids: Sequence[int]) -> np.ndarray:
        return self._mask

    def end(self, ids: Sequence[int]) -> GrammarEnded | None:
        return None

    def allowed(self, ops: ArrayOps, logits: Array) -> Allowed:
        return Allowed(self.place, self._mask, self.legal, ops, logits)


def replayed(grammar: GrammarStep | None, settings: Any, order: np.ndarray) -> Replayed | None:
    """A re-sample's matcher where the step recorded its grammar and the settings still constrain (None otherwise:
    without a record of what it allowed, the grammar stage of a re-sample cuts nothing)."""
    c = settings.constraint
    if grammar is None or c is None:
        return None
    if not grammar.legal_top.any():
        raise ValueError(f"the grammar allowed none of this step's {len(grammar.legal_top)} recorded candidates (it "
                         f"allowed {grammar.legal} others): re-sampling it needs the model")
    return Replayed(grammar, c.place, order)


@dataclass(frozen=True)
class Check:
    """A row's grammar at a step (`sampling.finish` reads it): what it allowed; for a constraint placed "on_reject",
    how to draw the step again with the grammar first when it refuses the drawn token (`redraw`, given that token)."""

    allowed: Allowed
    redraw: Callable[[int], Sample | int] | None = None


def rejected(out: Sample | int, token: int) -> Sample | int:
    """A redrawn step's outcome, its record saying which token the grammar refused first."""
    if not isinstance(out, Sample) or out.grammar is None:
        return out
    return replace(out, grammar=replace(out.grammar, rejected=token))
