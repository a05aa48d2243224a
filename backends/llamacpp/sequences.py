"""The caches of one llama.cpp context: every row of a cache is a sequence of the context's one KV memory.

The memory is unified (one set of cells that every sequence indexes), so a fork or a beam's copy is
`llama_memory_seq_cp`, which tags the same cells with another sequence and copies no tensor; trim is
`llama_memory_seq_rm`. A cache that is dropped gives its sequences back from whatever thread drops it; they are
cleared on the model's thread before they are handed out again. Nothing here runs a forward or samples.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

import llama_cpp

from backends.base import check_fork


class SeqCache:
    """A cache: its rows' sequence ids (none until its first forward sets the batch size) and the positions each
    row holds (all rows hold the same number)."""

    __slots__ = ("__weakref__", "length", "seqs")

    def __init__(self, seqs: list[int] | None = None, length: int = 0) -> None:
        self.seqs: list[int] = seqs if seqs is not None else []
        self.length = length


class Sequences:
    """The context's sequence ids: handed out to caches, given back when a cache is dropped, cleared before reuse."""

    def __init__(self, memory: Any, count: int) -> None:
        self.memory, self.count = memory, count
        self._free = list(range(count - 1, -1, -1))  # popped from the end: the lowest id first
        self._dropped: list[int] = []
        self._lock = threading.Lock()  # a cache may be dropped (its finalizer run) on another thread

    def new_cache(self) -> SeqCache:
        cache = SeqCache()
        weakref.finalize(cache, self._give_back, cache.seqs)  # the list object: reorder changes it in place
        return cache

    def take(self, n: int) -> list[int]:
        """`n` sequence ids, empty in the memory."""
        self.clear_dropped()
        if n > len(self._free):
            raise ValueError(f"llama.cpp's context holds {self.count} sequences (rows) at once; {n} more were asked "
                             f"for with {self.count - len(self._free)} in use: run fewer samples or beams at once")
        return [self._free.pop() for _ in range(n)]

    def clear_dropped(self) -> None:
        """Clear the sequences of caches dropped since the last call (on the model's thread) and free their ids."""
        with self._lock:
            dropped, self._dropped = self._dropped, []
        for s in dropped:
            llama_cpp.llama_memory_seq_rm(self.memory, s, -1, -1)
            self._free.append(s)

    def _give_back(self, seqs: list[int]) -> None:
        with self._lock:
            self._dropped.extend(seqs)

    def trim(self, cache: SeqCache, n: int) -> None:
        n = min(n, cache.length)
        if n <= 0:
            return
        for s in cache.seqs:
            if not llama_cpp.llama_memory_seq_rm(self.memory, s, cache.length - n, -1):
                raise RuntimeError(f"llama.cpp could not trim sequence {s} (a recurrent model's state?)")
        cache.length -= n

    def fork(self, cache: SeqCache, n: int) -> SeqCache:
        """A new cache of `n` rows, each a copy of the 1-row `cache` (which stays usable)."""
        check_fork(len(cache.seqs))
        forked = self.new_cache()
        if cache.seqs:
            forked.seqs.extend(self.take(n))
            for dst in forked.seqs:
                llama_cpp.llama_memory_seq_cp(self.memory, cache.seqs[0], dst, -1, -1)
        forked.length = cache.length
        return forked

    def reorder(self, cache: SeqCache, rows: Sequence[int]) -> None:
        """Row i becomes the old row `rows[i]` (repeats allowed): a row's first taker keeps its sequence, each
        further one gets a copy, and rows nobody takes are cleared."""
        old, kept = list(cache.seqs), set()
        new = []
        for r in rows:
            s = old[r]
            if s in kept:
                [copy] = self.take(1)
                llama_cpp.llama_memory_seq_cp(self.memory, s, copy, -1, -1)
                s = copy
            kept.add(s)
            new.append(s)
        cache.seqs[:] = new
        self._give_back([s for s in old if s not in kept])
        self.clear_dropped()
