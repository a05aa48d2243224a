"""Prefill in chunks sized by time: Stop during a long prefill ends it after the chunk being computed, on a
real tiny MLX model (lazy: each chunk is evaluated before the next check); sizes follow the measured speed."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import pytest

from app.core.decoding.generation import generate
from app.core.decoding.prefill import FIRST_CHUNK, MAX_CHUNK, TARGET_S, chunks
from app.core.events import Finished, Prefilled, Request
from app.core.settings import SamplerSettings


def simulate(per_token: float, n: int = 5000, most: int = MAX_CHUNK) -> list[tuple[int, int]]:
    """The chunks a model taking `per_token` seconds a token gets, on a clock the simulated work advances."""
    now = [0.0]
    out = []
    for i, j in chunks(100, 100 + n, most, clock=lambda: now[0]):
        out.append((i, j))
        now[0] += (j - i) * per_token
    return out


@pytest.mark.parametrize("per_token", [0.0, 1e-5, 1e-3, 0.02, 0.1, 3.0])
def test_chunks_cover_the_prompt_and_each_takes_about_the_target(per_token: float):
    out = simulate(per_token)
    assert out[0] == (100, 100 + FIRST_CHUNK) and out[-1][1] == 5100
    assert all(a[1] == b[0] for a, b in itertools.pairwise(out))  # contiguous, no token twice
    sizes = [j - i for i, j in out[1:-1]]
    assert all(s * per_token <= TARGET_S or s == 1 for s in sizes)  # a cancel waits about a chunk at most
    if per_token * MAX_CHUNK <= TARGET_S:
        assert max(sizes) == MAX_CHUNK  # a fast model keeps the large chunks (and their speed)


def test_stop_during_a_long_prefill_on_mlx_ends_after_the_chunk_in_hand(mlx_model, monkeypatch):
    cancel = threading.Event()
    computed: list[int] = []  # tokens of each prefill chunk the model computed
    forward = mlx_model.forward

    def counting(tokens, cache, positions="last"):
        computed.append(len(tokens[0]))
        cancel.set()  # Stop, pressed while the first chunk computes
        return forward(tokens, cache, positions)

    monkeypatch.setattr(mlx_model, "forward", counting)
    ids = tuple(range(1, 300)) * 10  # 2,990 tokens: about 6 of the old fixed 512-token chunks
    events = list(generate(mlx_model, Request(prompt_ids=ids, settings=SamplerSettings(max_tokens=4, seed=0)),
                           cancel))
    assert computed == [FIRST_CHUNK]  # one chunk computed, then the check saw Stop
    assert isinstance(events[-1], Finished) and events[-1].reason == "cancelled"
    assert not any(isinstance(e, Prefilled) for e in events)


def test_an_mlx_prefill_in_time_sized_chunks_is_the_same_as_in_one(mlx_model):
    """Each chunk evaluated on its own gives the logits one forward over the whole prompt gives."""
    import numpy as np

    ids = [int(t) for t in np.random.default_rng(0).integers(1, 300, size=700)]

    def logits_by(spans: Iterator[tuple[int, int]]) -> np.ndarray:
        cache, out = mlx_model.new_cache(), None
        for i, j in spans:
            out = mlx_model.forward([ids[i:j]], cache)
            mlx_model.ops.sync([out])
        return mlx_model.ops.numpy(out)

    np.testing.assert_allclose(logits_by(chunks(0, len(ids))), logits_by(iter([(0, len(ids))])), atol=2e-4)


def test_chunks_never_exceed_the_most_asked_for():
    assert {j - i for i, j in simulate(1e-6, n=1000, most=64)} == {16, 64, 1000 - 16 - 15 * 64}
