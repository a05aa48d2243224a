"""Prompt surprisal in chunks sized by time, on both real tiny backends: Stop while a chunk computes ends the
scoring after that chunk (MLX included: each chunk is read back before the check), every chunk's logits fit
the host budget, and the chunked scores are those of one all-positions forward."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from app.core.decoding.prefill import FIRST_CHUNK, MAX_CHUNK
from app.core.decoding.surprisal import HOST_BYTES, log_softmax, most_positions, score, top_k

IDS = tuple(range(1, 300)) * 4  # 1,196 tokens: 19 of the old fixed 64-position chunks


def count_forwards(model, monkeypatch, on_forward=None) -> list[int]:
    """The positions of each forward the model runs from now on (the real forward still runs)."""
    sizes: list[int] = []
    forward = model.forward

    def counting(tokens, cache, positions="last"):
        sizes.append(len(tokens[0]))
        if on_forward is not None:
            on_forward()
        return forward(tokens, cache, positions)

    monkeypatch.setattr(model, "forward", counting)
    return sizes


def test_stop_while_scoring_ends_after_the_chunk_in_hand(model, monkeypatch):
    cancel = threading.Event()
    sizes = count_forwards(model, monkeypatch, on_forward=cancel.set)  # Stop, pressed as the first chunk computes
    assert score(model, IDS, cancel) is None
    assert sizes == [FIRST_CHUNK]  # one chunk scored, then the check saw Stop


def test_stop_after_some_chunks_scores_no_more(model, monkeypatch):
    cancel = threading.Event()
    sizes = count_forwards(model, monkeypatch, on_forward=lambda: len(sizes) == 3 and cancel.set())
    assert score(model, IDS, cancel) is None
    assert len(sizes) == 3 and sum(sizes) < len(IDS) - 1


def test_a_chunk_never_holds_more_logits_than_the_host_budget(model, monkeypatch):
    vocab = model.info.vocab_size
    budget = 4 * vocab * 7  # seven positions of float32 logits
    sizes = count_forwards(model, monkeypatch)
    got = score(model, IDS[:100], host_bytes=budget)
    assert max(sizes) == 7 and sum(sizes) == 99  # every position scored, none twice
    full = log_softmax(np.asarray(model.ops.numpy(
        model.forward([list(IDS[:100])], model.new_cache(), positions="all"))[0], np.float64))
    np.testing.assert_allclose(got.logprobs[1:], full[np.arange(99), IDS[1:100]], atol=1e-4)


def test_the_budget_bounds_the_positions_for_a_large_vocabulary():
    assert most_positions(152_064) * 152_064 * 4 <= HOST_BYTES < (most_positions(152_064) + 1) * 152_064 * 4
    assert most_positions(384) == MAX_CHUNK  # a tiny vocabulary: the prefill's largest chunk
    assert most_positions(10**9) == 1  # never less than one position


@pytest.mark.parametrize("k", [1, 3, 5])
def test_top_k_is_the_sorted_head_of_each_row(k: int):
    x = np.random.default_rng(0).standard_normal((6, 50)).astype(np.float32)
    x[0, [4, 9]] = 10.0  # a tie: the lower index first
    np.testing.assert_array_equal(top_k(x, k), np.argsort(-x, axis=1, kind="stable")[:, :k])
