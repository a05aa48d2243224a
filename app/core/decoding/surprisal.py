"""Prompt surprisal: how likely the model found each token of the prompt, from all-positions forwards.

`score(model, ids, cancel)` returns, for every prompt token after the first, its log-probability given what
precedes it and the model's top alternatives at that position. Computed through the KV cache in chunks sized by
time (`app.core.decoding.prefill.ChunkedForward`, as the prefill), each computed before the cancel check, so Stop ends
a long prompt's scoring within about a chunk; a chunk never holds more than `HOST_BYTES` of float32 logits on the
host. No sampling settings apply: this is the raw model.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.core.decoding.prefill import MAX_CHUNK, ChunkedForward
from backends.base import LoadedModel

HOST_BYTES = 40 * 2**20  # (positions, vocabulary) float32 logits per chunk: 66 positions of a 152k vocabulary
TOP = 5


@dataclass(frozen=True)
class PromptScore:
    ids: tuple[int, ...]  # the prompt's tokens
    logprobs: np.ndarray  # (T,) float32: log p(ids[t] | ids[:t]); NaN for the first token (nothing precedes it)
    top_ids: np.ndarray  # (T, TOP) int32: the model's most likely tokens at position t (row 0 unused)
    top_logprobs: np.ndarray  # (T, TOP) float32


def most_positions(vocab: int, host_bytes: int = HOST_BYTES) -> int:
    """The most positions a chunk may score: its (positions, vocab) float32 logits fit in `host_bytes`."""
    return max(1, min(MAX_CHUNK, host_bytes // (4 * max(1, vocab))))


def score(model: LoadedModel, ids: Sequence[int], cancel: threading.Event | None = None,
          host_bytes: int = HOST_BYTES) -> PromptScore | None:
    """None when cancelled (checked before each chunk; the chunk in hand is computed to the end first)."""
    t = len(ids)
    logprobs = np.full(t, np.nan, dtype=np.float32)
    top_ids = np.zeros((t, TOP), dtype=np.int32)
    top_lp = np.full((t, TOP), np.nan, dtype=np.float32)
    most = most_positions(model.info.vocab_size, host_bytes)
    forward = ChunkedForward(model, model.new_cache(), ids[:-1], cancel, positions="all", most=most)
    for start, end, logits in forward:  # position p predicts token p + 1
        rows = np.asarray(model.ops.numpy(logits)[0], dtype=np.float32)
        lp = log_softmax(rows)  # (end - start, V), float32: no float64 copy of the chunk
        at = np.arange(end - start)
        logprobs[start + 1 + at] = lp[at, np.asarray(ids[start + 1 : end + 1])]
        best = top_k(lp, TOP)  # (end - start, k)
        top_ids[start + 1 + at, : best.shape[1]] = best
        top_lp[start + 1 + at, : best.shape[1]] = np.take_along_axis(lp, best, axis=1)
    return None if forward.cancelled else PromptScore(tuple(ids), logprobs, top_ids, top_lp)


def top_k(x: np.ndarray, k: int) -> np.ndarray:
    """Each row's k largest entries' indices, largest first (equal values by index). A partial sort: a full
    sort of a 152k vocabulary costs ~5 ms a row."""
    k = min(k, x.shape[1])
    part = np.argpartition(-x, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(x, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)  # by value descending, then index ascending
    return np.take_along_axis(part, order, axis=1)


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise, stable, in the input's precision; non-finite logits count as impossible."""
    x = np.where(np.isfinite(x), x, -np.inf)
    m = x.max(axis=-1, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
