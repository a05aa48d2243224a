"""The one cancellable chunked forward, on a hand-made model that records what it is fed: the chunks cover the ids
once and in order, a cancel during a chunk ends after that chunk and says so, given ranges are replayed as they
are, and nothing left to compute is not a cancel."""

from __future__ import annotations

import threading

import numpy as np

from app.core.decoding.prefill import FIRST_CHUNK, ChunkedForward, prefill
from backends.ops import NUMPY


class Fed:
    """A model whose logits at a position are the token it was fed there; it keeps every chunk it computed."""

    ops = NUMPY

    def __init__(self, on_forward=lambda: None) -> None:
        self.chunks: list[list[int]] = []
        self.on_forward = on_forward

    def forward(self, tokens, cache, positions="last"):
        self.chunks.append(list(tokens[0]))
        self.on_forward()
        rows = np.asarray(tokens, dtype=np.float32)[..., None]  # (1, T, 1)
        return rows if positions == "all" else rows[:, -1]


IDS = list(range(100, 150))


def test_the_chunks_cover_the_ids_after_start_once_and_in_order():
    model = Fed()
    got = [(i, j) for i, j, _ in ChunkedForward(model, None, IDS, threading.Event(), start=7)]
    assert got[0] == (7, 7 + FIRST_CHUNK) and got[-1][1] == len(IDS)
    assert [t for chunk in model.chunks for t in chunk] == IDS[7:]


def test_a_cancel_during_a_chunk_ends_after_it():
    cancel = threading.Event()
    model = Fed(on_forward=cancel.set)
    forward = ChunkedForward(model, None, IDS, cancel)
    assert forward.last() is None and forward.cancelled
    assert model.chunks == [IDS[:FIRST_CHUNK]]


def test_given_ranges_are_replayed_with_every_position():
    model = Fed()
    chunks = list(ChunkedForward(model, None, IDS, None, positions="all", ranges=[(0, 3), (3, 10)]))
    assert [(i, j) for i, j, _ in chunks] == [(0, 3), (3, 10)]
    assert chunks[1][2][0, :, 0].tolist() == IDS[3:10]


def test_prefill_is_the_last_positions_logits_and_nothing_to_compute_is_no_cancel():
    assert prefill(Fed(), None, IDS, threading.Event(), start=40)[0, 0] == IDS[-1]
    empty = ChunkedForward(Fed(), None, [], threading.Event())
    assert empty.last() is None and not empty.cancelled
