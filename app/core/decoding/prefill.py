"""Prefill chunks sized by time, so Stop ends a long prefill within about `TARGET_S` on any model and backend.

`chunks` yields (start, end) ranges; the caller computes each chunk to the end (lazy frameworks synced) and
checks its cancel flag before asking for the next. Each size follows the last chunk's measured speed: a slow
model (MLX on a CPU, a big model) gets small chunks, a fast one grows to `MAX_CHUNK` and keeps its speed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

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
