"""What speculative decoding records (`speculative.py` makes these; events carry them; views draw them).

A `SpecRound` is one draft-then-verify round: each `DraftToken` the draft proposed with its probability under
the draft's and the target's final distributions (after the user's sampler stages) and whether the rejection
rule kept it, then the one token the target drew itself (from the residual after a rejection, else a bonus
token after all were kept). `SpecStats` are the running totals. Plain records: no models, no numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

K_MAX = 8  # the most tokens a draft proposes per round


@dataclass(frozen=True)
class DraftToken:
    """One token the draft proposed, and the verdict on it."""

    token: int
    text: str
    p_draft: float  # its probability in the draft's final distribution (what it was drawn from)
    p_target: float  # its probability in the target's final distribution at the same position
    accepted: bool  # kept by the rejection rule: accepted with probability min(1, p_target / p_draft)


@dataclass(frozen=True)
class SpecRound:
    """One round: up to k drafts verified by one target forward, then one token the target drew."""

    index: int  # 0-based round number in the run
    step: int  # the run's step of the first token this round adds
    drafts: tuple[DraftToken, ...]  # every proposal, in order; those after the first rejected are not judged
    drawn: int  # the target's own token after the kept drafts
    drawn_text: str
    p_drawn: float  # its probability in what it was drawn from: the normalized residual, or the target's
    residual: bool  # True: drawn from max(0, p_target - p_draft) after a rejection; False: a bonus token
    kept: int  # tokens this round added to the run (the kept drafts and the drawn one, cut at EOS / the limit)
    note: str = ""  # an adaptive run's pace, where it drafted nothing: why ("drafting paused: acceptance 20% …")

    @property
    def plain(self) -> bool:
        """A round without drafts: a plain step of the target (an adaptive run measuring it, or paused)."""
        return not self.drafts

    @property
    def accepted(self) -> int:
        """Drafts kept: the leading run of accepted ones."""
        n = 0
        for d in self.drafts:
            if not d.accepted:
                break
            n += 1
        return n

    @property
    def rejected(self) -> DraftToken | None:
        """The draft the rule rejected (the rest of the round's drafts were then discarded unjudged)."""
        return next((d for d in self.drafts if not d.accepted), None)


@dataclass(frozen=True)
class SpecStats:
    """Running totals of a speculative run."""

    rounds: int = 0
    drafted: int = 0  # draft tokens proposed
    accepted: int = 0  # draft tokens kept
    tokens: int = 0  # tokens added to the run
    target_forwards: int = 0
    draft_forwards: int = 0
    plain_rounds: int = 0  # rounds without drafts (an adaptive run's plain steps)
    note: str = ""  # the last round's `note`: why drafting is paused ("" while it drafts)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / proposed drafts; None before any draft."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_target_forward(self) -> float | None:
        return self.tokens / self.target_forwards if self.target_forwards else None

    def add(self, r: SpecRound, draft_forwards: int) -> SpecStats:
        return SpecStats(self.rounds + 1, self.drafted + len(r.drafts), self.accepted + r.accepted,
                         self.tokens + r.kept, self.target_forwards + 1, self.draft_forwards + draft_forwards,
                         self.plain_rounds + r.plain, r.note)


@dataclass(frozen=True)
class SpecSummary:
    """A finished speculative run: its totals and decode time, and plain decoding's of the same target and
    length when it was measured in the same request (None: not measured)."""

    stats: SpecStats
    k: int  # the draft length asked for (0: adaptive)
    decode_s: float  # the run's own seconds after the prefill (not the time its events waited for a reader)
    plain_tokens: int | None = None
    plain_decode_s: float | None = None
    decode_cpu_s: float | None = None  # the same spans in the model thread's CPU seconds (what another process's
    plain_decode_cpu_s: float | None = None  # load on the machine does not move)

    @property
    def tokens_per_s(self) -> float | None:
        return self.stats.tokens / self.decode_s if self.decode_s > 0 and self.stats.tokens else None

    @property
    def plain_tokens_per_s(self) -> float | None:
        if not self.plain_tokens or not self.plain_decode_s:
            return None
        return self.plain_tokens / self.plain_decode_s

    @property
    def speedup(self) -> float | None:
        """Speculative tokens/s over plain decoding's (>1: faster)."""
        spec, plain = self.tokens_per_s, self.plain_tokens_per_s
        return spec / plain if spec and plain else None

    @property
    def cpu_speedup(self) -> float | None:
        """`speedup` in CPU seconds: speculative tokens per CPU second over plain decoding's."""
        if not (self.decode_cpu_s and self.plain_decode_cpu_s and self.plain_tokens and self.stats.tokens):
            return None
        return (self.stats.tokens / self.decode_cpu_s) / (self.plain_tokens / self.plain_decode_cpu_s)
