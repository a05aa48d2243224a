"""Prompt surprisal: how likely the model found each token of the prompt, from one all-positions forward.

`score(model, ids)` returns, for every prompt token after the first, its log-probability given what precedes
it and the model's top alternatives at that position. Computed in chunks through the KV cache, so a long
prompt never holds a (T, vocabulary) array at once. No sampling settings apply: this is the raw model.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from backends.base import LoadedModel

CHUNK = 64  # positions per forward: (64, 152k) float32 is 39 MB on the host
TOP = 5


@dataclass(frozen=True)
class PromptScore:
    ids: tuple[int, ...]  # the prompt's tokens
    logprobs: np.ndarray  # (T,) float32: log p(ids[t] | ids[:t]); NaN for the first token (nothing precedes it)
    top_ids: np.ndarray  # (T, TOP) int32: the model's most likely tokens at position t (row 0 unused)
    top_logprobs: np.ndarray  # (T, TOP) float32


def score(model: LoadedModel, ids: Sequence[int], cancel: threading.Event | None = None) -> PromptScore | None:
    """None when cancelled."""
    t = len(ids)
    logprobs = np.full(t, np.nan, dtype=np.float32)
    top_ids = np.zeros((t, TOP), dtype=np.int32)
    top_lp = np.full((t, TOP), np.nan, dtype=np.float32)
    cache = model.new_cache()
    for start in range(0, t - 1, CHUNK):
        if cancel is not None and cancel.is_set():
            return None
        chunk = list(ids[start : min(start + CHUNK, t - 1)])  # position p predicts token p + 1
        rows = np.asarray(model.ops.numpy(model.forward([chunk], cache, positions="all"))[0], dtype=np.float64)
        lp = log_softmax(rows)  # (len(chunk), V)
        nxt = np.asarray(ids[start + 1 : start + 1 + len(chunk)])
        at = np.arange(len(chunk))
        logprobs[start + 1 + at] = lp[at, nxt]
        k = min(TOP, lp.shape[1])
        best = np.argsort(-lp, axis=1, kind="stable")[:, :k]
        top_ids[start + 1 + at, :k] = best
        top_lp[start + 1 + at, :k] = np.take_along_axis(lp, best, axis=1)
    return PromptScore(tuple(ids), logprobs, top_ids, top_lp)


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise, stable; non-finite logits count as impossible."""
    x = np.where(np.isfinite(x), x, -np.inf)
    m = x.max(axis=-1, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
