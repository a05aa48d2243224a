"""The numpy executor's shortcuts (`backends/ops.py`: a cut's few survivors worked on alone, clips that clip nothing,
counts by count_nonzero, the top-k from candidates) give what numpy's whole-vector passes give, bit for bit: each op
on its own, and every record of the sampler against an executor that makes only the whole passes."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.record.record import Sample
from app.core.sampler import step_record
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import sample
from app.core.sampler.stages import apply_top_k
from backends.ops import NUMPY, NumpyOps, _top_of_candidates
from tests.batched_sampler_cases import any_stages


class WholeVector(NumpyOps):
    """numpy making every pass over the whole vector, as the executor did before its shortcuts: the reference."""

    where = staticmethod(np.where)
    minimum = staticmethod(np.minimum)
    maximum = staticmethod(np.maximum)
    sum = staticmethod(np.add.reduce)

    def cumsum(self, x):
        return np.cumsum(x, dtype=x.dtype)

    def count_cumsum(self, mask):
        return np.cumsum(mask, dtype=np.int32)

    def kth_largest(self, x, k):
        return np.partition(x, x.shape[0] - k)[x.shape[0] - k]

    def count_above(self, sorted_desc, v):
        return np.searchsorted(-sorted_desc, -v, side="left")

    def topk(self, x, k):
        n = x.shape[0]
        k = min(k, n)
        part = np.argpartition(x, n - k)[n - k:] if k < n else np.arange(n)
        idx = part[np.lexsort((part, -x[part]))]
        return x[idx], idx

    def survivors(self, x, line=None):
        return None

    def arange(self, n):
        return np.arange(n)


WHOLE = WholeVector()


class HostRecord(NumpyOps):
    host_record = True  # the llama.cpp backend's way: the draw first, the record from the stages' rows


class WholeHostRecord(WholeVector):
    host_record = True


def vectors(seed: int, n: int = 32_000) -> list[np.ndarray]:
    """float32 vectors as the sampler meets them: dense logits, a cut's few survivors among -inf, ties, signed zeros."""
    rng = np.random.default_rng(seed)
    dense = (rng.standard_normal(n) * 3).astype(np.float32)
    few = np.full(n, -np.inf, dtype=np.float32)
    few[rng.choice(n, 40, replace=False)] = dense[:40]
    ties = np.round(dense).astype(np.float32)
    zeros = dense.copy()
    zeros[rng.integers(0, n, 30)], zeros[rng.integers(0, n, 30)] = 0.0, -0.0
    one = np.full(n, -np.inf, dtype=np.float32)
    one[n // 3] = 1.5
    nan = dense.copy()
    nan[n // 2] = np.nan  # (the sampler never meets one: its logits are sanitized first)
    return [dense, few, ties, zeros, one, np.sort(dense), np.full(n, -np.inf, dtype=np.float32), nan]


def same(a, b) -> bool:
    """Equal values, shapes and types, floats compared by their bits (signed zeros and NaNs told apart)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return a.tobytes() == b.tobytes()


@pytest.mark.parametrize("seed", range(3))
def test_each_shortcut_gives_numpys_whole_vector_answer(seed):
    for x in vectors(seed):
        p = np.where(np.isfinite(x), np.exp(x - np.float32(3)), np.float32(0)).astype(np.float32)
        for cond in (x > 2.5, x > -np.inf, x == x.max(), np.isfinite(x), x > 0):
            assert same(NUMPY.where(cond, x, float("-inf")), np.where(cond, x, float("-inf")))
            assert same(NUMPY.sum(cond), np.add.reduce(cond))
            assert same(NUMPY.count_cumsum(cond), np.cumsum(cond, dtype=np.int32))
        rows = np.stack([x, -x, p])
        assert same(NUMPY.where(rows > 0, rows, 0.0), np.where(rows > 0, rows, 0.0))
        assert same(NUMPY.sum(np.isfinite(rows), axis=-1), np.add.reduce(np.isfinite(rows), axis=-1))
        assert same(NUMPY.minimum(x, 1e9), np.minimum(x, 1e9)) and same(NUMPY.maximum(x, -1e30), np.maximum(x, -1e30))
        assert same(NUMPY.minimum(x, 0.5), np.minimum(x, 0.5)) and same(NUMPY.maximum(x, 0.5), np.maximum(x, 0.5))
        assert same(NUMPY.cumsum(p), np.cumsum(p, dtype=np.float32))
        for k in (1, 40, 256):
            assert same(NUMPY.kth_largest(x, k), WHOLE.kth_largest(x, k))
            assert all(same(a, b) for a, b in zip(NUMPY.topk(x, k), WHOLE.topk(x, k), strict=True))
        desc = WHOLE.sort_desc(x)
        at = x[np.random.default_rng(seed).integers(0, x.shape[0], 20)]
        assert same(NUMPY.count_above(desc, at), WHOLE.count_above(desc, at))


def test_a_cumulative_sum_keeps_the_sign_of_leading_negative_zeros():
    p = np.zeros(32_000, dtype=np.float32)
    p[:3], p[100], p[2000] = -0.0, 0.25, 0.5
    assert same(NUMPY.cumsum(p), np.cumsum(p, dtype=np.float32))


def test_the_shortcuts_are_taken_where_a_cut_leaves_few():
    """After a top-k the survivors are found and worked on alone; a whole distribution stays whole; the top-256 of
    real-looking logits come from candidates (a tie at the 256th leaves it to the partition); the built-in model's
    4,096 entries take numpy's whole passes (as cheap there as the counts)."""
    x = vectors(0)[0]
    assert NUMPY.survivors(apply_top_k(NUMPY, x[:4096], 40).x) is None
    ids, values = NUMPY.survivors(apply_top_k(NUMPY, x, 40).x)
    assert ids.shape == (40,) and same(values, x[ids]) and np.all(np.diff(ids) > 0)
    assert NUMPY.survivors(x) is None and WHOLE.survivors(x) is None
    line = np.partition(x, x.shape[0] - 10)[x.shape[0] - 10]
    assert same(NUMPY.survivors(x, line)[0], np.flatnonzero(x >= line))
    assert _top_of_candidates(x, 256) is not None
    tied = x.copy()
    tied[np.argsort(-x)[256]] = -np.sort(-x)[255]
    assert _top_of_candidates(tied, 256) is None


@settings(max_examples=30, deadline=None, derandomize=True)
@given(s=any_stages, seed=st.integers(0, 2**16), vocab=st.sampled_from([8192, 32_000]))
def test_the_sampler_records_what_the_whole_vector_passes_record(s, seed, vocab):
    """Every stage in any order, greedy to sampled, with and without a history: the same token and the same record,
    on the device (numpy) and made on the host after the draw (llama.cpp's way), as the whole-vector reference."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(vocab) * 3).astype(np.float32)
    x[rng.integers(0, vocab, 3)] = x.max()
    x[rng.integers(0, vocab, 5)] = -np.inf
    u = float(rng.random())
    for ops, ref in ((NUMPY, WHOLE), (HostRecord(), WholeHostRecord())):
        got = sample(ops, x, s, u, history=History.start(ops, vocab, [1, 2, 3, 1, 2]))
        with mock.patch.object(step_record, "NUMPY", WHOLE):  # the host's record by whole passes too
            want = sample(ref, x, s, u, history=History.start(ref, vocab, [1, 2, 3, 1, 2]))
        assert isinstance(got, Sample) and got == want and same(got.values, want.values), s
        assert sample(ops, x, s, u, record=False) == want.token
