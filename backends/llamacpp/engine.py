"""A forward through llama.cpp: B rows × T tokens as `llama_decode` batches (each token tagged with its row's sequence
and position; at most `n_batch` tokens a batch, longer inputs in chunks along T), run on the engine's one worker
thread; the forward returns `Pending` logits at once (`lazy.py`), and every other use of the context waits for it
first (`wait`), so no two threads use the context at once. A batch the memory has no room for is a ValueError
saying how many cells the context holds. No sampling here.
"""

from __future__ import annotations

import ctypes
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import Any

import llama_cpp
import numpy as np

from backends.base import Positions, check_forward, check_rows
from backends.llamacpp.lazy import Pending
from backends.llamacpp.sequences import SeqCache, Sequences


class Engine:
    """One context's batch, reused by every forward (filled through numpy views of its arrays)."""

    def __init__(self, ctx: Any, seqs: Sequences, n_vocab: int, n_batch: int, n_ctx: int) -> None:
        self.ctx, self.seqs, self.n_vocab, self.n_batch, self.n_ctx = ctx, seqs, n_vocab, n_batch, n_ctx
        self.batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        b = self.batch
        self._token = np.ctypeslib.as_array(b.token, shape=(n_batch,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(n_batch,))
        self._logits = np.ctypeslib.as_array(ctypes.cast(b.logits, ctypes.POINTER(ctypes.c_int8)), shape=(n_batch,))
        np.ctypeslib.as_array(b.n_seq_id, shape=(n_batch,))[:] = 1  # every token belongs to one sequence
        self._seq_slot = [b.seq_id[i] for i in range(n_batch)]
        self._seq_of = [-1] * n_batch  # what each slot holds now, so that a step writes only what changed
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="llama.cpp decode")
        self._running: Future | None = None

    def forward(self, tokens: Any, cache: SeqCache, positions: Positions = "last") -> Pending:
        """(B, V) logits of each row's last token, or (B, T, V) of every token, on their way; the tokens are
        appended to `cache` (its length counts them at once, and gives back those a failed decode did not take)."""
        ids = np.asarray(resolved_ids(tokens), dtype=np.int32)
        check_forward(ids.shape, positions)
        self.wait()
        check_rows(len(cache.seqs), ids.shape[0])
        self.seqs.clear_dropped()
        if not cache.seqs:
            cache.seqs.extend(self.seqs.take(ids.shape[0]))
        start, cache.length = cache.length, cache.length + ids.shape[1]
        self._running = self._worker.submit(self._forward, ids, cache, start, positions)
        shape = (ids.shape[0], self.n_vocab) if positions == "last" else (*ids.shape, self.n_vocab)
        return Pending(self._running, shape)

    def wait(self) -> None:
        """Until the forward under way (if any) has ended; what it raised is raised where its logits are read."""
        if self._running is not None:
            wait_for([self._running])
            self._running = None

    def _forward(self, ids: np.ndarray, cache: SeqCache, start: int, positions: Positions) -> np.ndarray:
        """On the worker: the chunks in turn from position `start`; a chunk that fails takes its tokens back."""
        per = max(1, self.n_batch // ids.shape[0])  # tokens of each row in one batch
        outs = []
        for i in range(0, ids.shape[1], per):
            try:
                outs.append(self._decode(ids[:, i: i + per], cache.seqs, start + i, positions == "all"))
            except BaseException:
                cache.length = start + i
                raise
        return outs[-1] if positions == "last" else outs[0] if len(outs) == 1 else np.concatenate(outs, axis=1)

    def _decode(self, ids: np.ndarray, seqs: list[int], at: int, every: bool) -> np.ndarray:
        """One batch: (B, T) ids of the rows `seqs` from position `at`; (B, T, V) logits if `every`, else (B, V)."""
        rows, t = ids.shape
        n = rows * t
        self._token[:n] = ids.reshape(-1)
        self._pos[:n] = np.tile(np.arange(at, at + t, dtype=np.int32), rows)
        self._logits[:n] = 1 if every else 0
        if not every:
            self._logits[t - 1: n: t] = 1
        for i in range(n):
            s = seqs[i // t]
            if self._seq_of[i] != s:
                self._seq_slot[i][0] = s
                self._seq_of[i] = s
        self.batch.n_tokens = n
        self._check(llama_cpp.llama_decode(self.ctx, self.batch), n)
        out = np.ctypeslib.as_array(llama_cpp.llama_get_logits(self.ctx), shape=(n if every else rows, self.n_vocab))
        return out.reshape(rows, t, self.n_vocab).copy() if every else out.copy()

    def _check(self, code: int, n: int) -> None:
        if code == 1:
            raise ValueError(f"llama.cpp's context is full: its {self.n_ctx:,} cells hold every row's tokens (a fork "
                             f"shares its prompt's), and {n} more did not fit; run fewer samples or fewer tokens")
        if code == -1:
            raise ValueError(f"llama.cpp refused the batch of {n} tokens: a token id outside its vocabulary of "
                             f"{self.n_vocab:,}?")
        if code != 0:
            raise RuntimeError(f"llama.cpp's decode failed (code {code})")

    def close(self) -> None:
        self.wait()
        self._worker.shutdown()
        if self.batch is not None:
            llama_cpp.llama_batch_free(self.batch)
            self.batch = None


def resolved_ids(tokens: Any) -> Any:
    """Token ids as numpy reads them: a list, an array, or the sampler's drawn (B, 1) array."""
    return tokens.result() if isinstance(tokens, Pending) else tokens
