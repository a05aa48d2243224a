"""The one cancellable chunked forward: `ChunkedForward` feeds ids into a cache in chunks sized by time, each computed
to the end (lazy frameworks synced) before the cancel check that precedes the next, so Stop ends a long prefill or a
prompt's scoring within about `TARGET_S` on any model and backend; `prefill` is its last-position use. `chunks` sizes
each range from the last one's speed: a slow model (MLX on a CPU, a big one) gets small chunks, a fast one grows to
`MAX_CHUNK` and keeps its speed. No sampling, no events: the callers read the logits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from backends.base import LoadedModel, Positions

# Seconds a chunk should take: about the longest a cancel waits. Much shorter would cost torch on a CPU its speed
# (a 0.1B model: 680 prompt tokens/s in chunks of 512, 520 in 128, 160 in 16); MLX's CPU build runs as fast in
# any size (~12 tokens/s for 0.1B: its chunks come down to a few tokens).
TARGET_S = 0.8
MIN_CHUNK, FIRST_CHUNK, MAX_CHUNK = 1, 16, 512  # tokens


def chunks(start: int, end: int, most: int = MAX_CHUNK,
           clock: Callable[[], float] = time.perf_counter) -> Iterator[tuple[int, int]]:
    """Ranges covering [start, end), each sized from the time the caller spent on the one before (at most
    `most` tokens: an all-positions forward, as surprisal's, holds a row of logits per token)."""
    size, i = min(FIRST_CHUNK, most), start
    while i < end:
        j = min(end, i + size)
        t0 = clock()
        yield i, j
        size = min(next_size(j - i, clock() - t0), most)
        i = j


def next_size(done: int, seconds: float) -> int:
    """The chunk that should take `TARGET_S` at the speed just measured (a framework that returns before it
    computes, as torch on a GPU, measures as fast: `MAX_CHUNK`, the old fixed size)."""
    fits = int(done / seconds * TARGET_S) if seconds > 0 else MAX_CHUNK
    return max(MIN_CHUNK, min(fits, MAX_CHUNK))


class ChunkedForward:
    """`ids[start:]` forwarded into `cache` in chunks (sized by time, at most `most` tokens; or the given `ranges`).
    Iterating yields each chunk's (start, end, logits), (1, T, V) for "all" positions, (1, V) for "last", computed
    before the caller gets them, so the time that sizes the next chunk is the chunk's own and the caller's. `cancel`
    is checked before each chunk: a cancel ends the iteration and sets `cancelled` (the cache keeps what was done)."""

    def __init__(self, model: LoadedModel, cache: Any, ids: Sequence[int], cancel: threading.Event | None, *,
                 start: int = 0, positions: Positions = "last", most: int = MAX_CHUNK,
                 ranges: Iterable[tuple[int, int]] | None = None) -> None:
        self.model, self.cache, self.ids, self.cancel, self.positions = model, cache, ids, cancel, positions
        self.ranges = ranges if ranges is not None else chunks(start, len(ids), most)
        self.cancelled = False

    def __iter__(self) -> Iterator[tuple[int, int, Any]]:
        for i, j in self.ranges:
            if self.cancel is not None and self.cancel.is_set():
                self.cancelled = True
                return
            logits = self.model.forward([list(self.ids[i:j])], self.cache, self.positions)
            self.model.ops.sync([logits])  # computed now, not when a lazy framework (MLX) gets to it
            yield i, j, logits

    def last(self) -> Any:
        """Every chunk, then the last one's logits; None when cancelled (or nothing was left to compute)."""
        last = None
        for _, _, logits in self:
            last = logits
        return None if self.cancelled else last


def prefill(model: LoadedModel, cache: Any, ids: Sequence[int], cancel: threading.Event | None,
            start: int = 0) -> Any:
    """The last position's logits (1, V) once `ids` after their first `start` are in `cache`; None if cancelled."""
    return ChunkedForward(model, cache, ids, cancel, start=start).last()
