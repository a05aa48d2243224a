"""Stop strings that may span tokens: `StopHold` holds back the text that could be the start of one, releases it
once it cannot be, and trims a stop string found (it is never shown). Text only: no tokens, no model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class StopHold:
    """Holds back the steps whose text could be the start of a stop string, and trims a stop string found."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.text = ""
        self.pending: list[list[Any]] = []  # [start offset, piece, payload]

    def push(self, piece: str, payload: Any, partial: bool = False) -> tuple[list[tuple[str, Any]], bool]:
        """Add one token's text; returns the (piece, payload) pairs now safe to show and whether a stop hit."""
        start = len(self.text)
        self.text += piece
        self.pending.append([start, piece, payload])
        hit = self._find_stop(start)
        if hit is not None:
            out = [(p[: hit - s], pl) for s, p, pl in self.pending if s < hit or (s == hit == 0 and not p)]
            self.pending, self.text = [], self.text[:hit]
            return out, True
        boundary = len(self.text) - self._held_suffix()
        n = 0
        while n < len(self.pending) and self.pending[n][0] + len(self.pending[n][1]) <= boundary:
            n += 1
        if partial:
            n = min(n, len(self.pending) - 1)  # a half character belongs with the token that completes it
        out = [(p, pl) for _, p, pl in self.pending[:n]]
        del self.pending[:n]
        return out, False

    def finish(self, tail: str = "") -> list[tuple[str, Any]]:
        if tail and self.pending:
            self.pending[-1][1] += tail
        out = [(p, pl) for _, p, pl in self.pending]
        self.pending = []
        return out

    def _find_stop(self, start: int) -> int | None:
        hits = [self.text.find(s, max(0, start - len(s) + 1)) for s in self.stops]
        hits = [h for h in hits if h >= 0]
        return min(hits) if hits else None

    def _held_suffix(self) -> int:
        best = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.text)), best, -1):
                if self.text.endswith(s[:k]):
                    best = k
                    break
        return best
