"""How many tokens the draft proposes next in an adaptive run (`draft_k` 0), from what it measured: the drafts'
acceptance α and the seconds of a plain step, of a draft token and of what a drafted position adds to the verify.
k drafts keep E(k) = 1 + α + … + α^k tokens a round; the run drafts the k that gains most over plain steps, and
where none pays it pauses for plain steps (exact: the target's own draws), says why and probes now and then. Plain
arithmetic on measured numbers: no models, no clock of its own (`rounds.one_round` reports what it timed).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from app.core.record.spec_record import K_MAX

K_START = 1  # the first draft length tried: the round that measures the draft costs least at one
FIRST_DRAFTS = 1  # drafting rounds measured before the pace may pause (a draft that never pays costs each one)
DECAY = 0.95  # each round's weight in the acceptance counts, against the rounds before
WINDOW = 9  # a cost is the lower quartile of its last this many measurements: a machine others load only ever
# slows a round down (its caches, its descheduled threads), so the lower measurements are the cost
PROBE_FIRST, PROBE_MOST = 16, 128  # plain steps before a probe round, doubled after each probe that did not pay
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
    def verify_s(self) -> float:
        return max(0.0, low(self.verify)) if self.verify else 0.0

    @property
    def acceptance(self) -> float:
        """A draft's chance to be kept, as measured (before any: one half)."""
        return (self.kept + 0.5) / (self.judged + 1.0)

    @property
    def hopeful(self) -> float:
        """The acceptance with one more kept draft than measured: what a pause must hold against (one unlucky round
        early on is not a verdict; a draft that never pays still falls below it within a round or two)."""
        return (self.kept + 1.5) / (self.judged + 2.0)

    def gain(self, k: int, acceptance: float | None = None) -> float | None:
        """Expected tokens/s of k drafts per round over plain decoding's (None: not measured yet)."""
        if not (self.plain and self.draft):
            return None
        a, plain, draft, verify = self.acceptance if acceptance is None else acceptance, *self._costs()
        tokens = k + 1 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)
        return tokens * plain / (k * draft + plain + k * verify)

    def best(self) -> tuple[int, float]:
        """The draft length expected to gain most, and the gain it may have at the `hopeful` acceptance."""
        if not (self.plain and self.draft):
            return K_START, 1.0
        _, k = max((self.gain(k) or 0.0, k) for k in range(1, K_MAX + 1))
        return k, self.gain(k, self.hopeful) or 0.0

    def _costs(self) -> tuple[float, float, float]:
        return low(self.plain), low(self.draft), self.verify_s

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
            if self.plain and self.drafting_rounds > 1:  # (the first verify runs new shapes: not measured)
                self.verify.append((target_s - low(self.plain)) / k)
            self.kept = DECAY * self.kept + accepted
            self.judged = DECAY * self.judged + accepted + (accepted < k)
        self.k = self._next(k)

    def _next(self, k: int) -> int:
        if not self.plain:
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


def low(seconds: deque[float]) -> float:
    """The lower quartile of some measurements (the least of one or two)."""
    return sorted(seconds)[len(seconds) // 4]
