"""How many tokens the draft proposes next (an adaptive run, `draft_k` 0), from what the run has measured: the
drafts' acceptance, the seconds of a draft token, of a plain step (the target alone, one position) and what each
drafted position adds to the target's verification. Drafting pauses where no length is expected to pay, and the
run then takes plain steps (exact: the target's own draw) and says why; a probe round every so often measures again.

The expected gain of k drafts: a round keeps E(k) = 1 + α + … + α^k tokens (α: a draft's chance to be kept) for
k·draft + plain + k·verify seconds, against E(k) plain steps. Plain arithmetic on measured numbers: no models, no
clock of its own (`rounds.one_round` times what it does and reports it here).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from app.core.record.spec_record import K_MAX

K_START = 2  # the first draft length tried (rounds of it measure the draft before the pace chooses)
FIRST_DRAFTS = 3  # drafting rounds measured before the pace may pause
DECAY = 0.95  # each round's weight in the acceptance counts, against the rounds before
WINDOW = 9  # a cost is the median of its last this many measurements (one slow round on a busy machine is noise)
PROBE_FIRST, PROBE_MOST = 8, 64  # plain steps before a probe round, doubled after each probe that did not pay
KEEP_ABOVE = 0.97  # drafting goes on while its expected gain is above this (an estimate near 1 is noise: drafting
# that costs a little is paused only when it clearly does not pay); a paused run drafts again at a gain of 1
REMEASURE = 24  # drafting rounds between two plain steps that measure a plain step's cost again


@dataclass
class Pace:
    """An adaptive run's draft length, round by round: `k` for the next round (0: a plain step) and `note`, why
    drafting is paused ("" while it drafts)."""

    k: int = 0  # the first rounds are plain steps: they measure what drafting must beat
    note: str = ""
    plain: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))  # a plain step's seconds: the
    # target over one position, its distribution, draw and record
    draft: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))  # one draft token's: its forward,
    # distribution and draw
    verify: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))  # what each drafted position adds
    # to the target's side of a round
    kept: float = 0.0  # drafts kept and judged, counts decayed round by round
    judged: float = 0.0
    rounds: int = 0
    drafting_rounds: int = 0
    waited: int = 0  # plain steps since drafting paused (or since its last probe)
    wait: int = PROBE_FIRST
    since_plain: int = 0  # drafting rounds since the last plain step

    @property
    def plain_s(self) -> float | None:
        return statistics.median(self.plain) if self.plain else None

    @property
    def draft_s(self) -> float | None:
        return statistics.median(self.draft) if self.draft else None

    @property
    def verify_s(self) -> float:
        return max(0.0, statistics.median(self.verify)) if self.verify else 0.0

    @property
    def acceptance(self) -> float:
        """A draft's chance to be kept, as measured (before any: one half)."""
        return (self.kept + 0.5) / (self.judged + 1.0)

    def gain(self, k: int) -> float | None:
        """Expected tokens/s of k drafts per round over plain decoding's (None: not measured yet)."""
        return self._gains([k])[0][0] if self.plain and self.draft else None

    def best(self) -> tuple[int, float]:
        """The draft length expected to gain most, and its gain (1.0 before any measurement)."""
        if not (self.plain and self.draft):
            return K_START, 1.0
        gain, k = max(self._gains(range(1, K_MAX + 1)))
        return k, gain

    def _gains(self, ks: Iterable[int]) -> list[tuple[float, int]]:
        a, plain, draft, verify = self.acceptance, self.plain_s, self.draft_s, self.verify_s
        assert plain is not None and draft is not None
        return [((k + 1 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)) * plain / (k * draft + plain + k * verify), k)
                for k in ks]

    def measured(self, k: int, accepted: int, draft_s: float, target_s: float) -> None:
        """After a round of `k` drafts (0: a plain step) of which `accepted` were kept: its seconds drafting and on
        the target's side (the verifying forward, the distributions, the rule, the records); sets the next `k`.
        The run's first round is not measured (its first step after the prefill runs on cold caches)."""
        self.rounds += 1
        if k == 0 and self.rounds > 1:
            self.plain.append(target_s)
        elif k:
            self.drafting_rounds += 1
            self.draft.append(draft_s / k)
            if self.plain_s is not None:
                self.verify.append((target_s - self.plain_s) / k)
            self.kept = DECAY * self.kept + accepted
            self.judged = DECAY * self.judged + accepted + (accepted < k)
        self.k = self._next(k)

    def _next(self, k: int) -> int:
        if self.plain_s is None:
            return 0
        if self.drafting_rounds < FIRST_DRAFTS:
            return K_START
        best, gain = self.best()
        self.since_plain = 0 if k == 0 else self.since_plain + 1
        if gain >= (1.0 if self.note else KEEP_ABOVE):
            self.note, self.waited, self.wait = "", 0, PROBE_FIRST
            return 0 if self.since_plain >= REMEASURE else best  # (now and then a plain step: its cost moves too)
        if k and self.note:  # a probe that did not pay: wait longer before the next one
            self.wait = min(PROBE_MOST, 2 * self.wait)
        self.note = f"drafting paused: acceptance {self.acceptance:.0%} does not pay"
        self.waited = 0 if k else self.waited + 1
        return best if self.waited >= self.wait else 0  # (a probe: measure again)

