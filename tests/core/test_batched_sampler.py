"""The batched sampler step (`start_samples`) on numpy: each row gets exactly what its own step gives, on the
row-by-row path (`NumpyOps` has no vmap), on the mapped path run through a stand-in vmap that maps the one-row step row
by row and stacks (what torch.func.vmap and mx.vmap do in one graph), and on `NumpyRows`, whose vmap runs the one-row
step once over (R, ...) arrays (the torch backend's CPU executor)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.decoding.loop import Row, start_rows
from app.core.sampler.batch_sampling import PendingRows, start_samples
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import NoValidTokenError, PendingSample, start_sample
from app.core.settings import SamplerSettings
from backends.numpy_rows import NUMPY_ROWS, Rows
from backends.ops import NUMPY, NumpyOps
from tests.batched_sampler_cases import any_stages, assert_batch_equals_rows


class MappingNumpy(NumpyOps):
    """numpy with a stand-in vmap: the one-row function on each row, its outputs stacked (a leading row axis)."""

    def vmap(self, fn):
        def mapped(*args):
            outs = [fn(*(a[i] for a in args)) for i in range(len(args[0]))]
            return tuple(np.stack(column) for column in zip(*outs, strict=True))

        return mapped


MAPPING = MappingNumpy()


@settings(max_examples=40, deadline=None, derandomize=True)
@given(s=any_stages, seed=st.integers(0, 2**16), record=st.booleans())
@pytest.mark.parametrize("ops", [NUMPY, MAPPING, NUMPY_ROWS], ids=["rows", "mapped", "numpy_rows"])
def test_a_batch_gives_each_row_its_own_step(ops, s, seed, record):
    assert_batch_equals_rows(ops, s, seed, record=record)


def test_numpy_runs_the_rows_one_by_one_and_a_vmap_maps_them():
    x = NUMPY.f32(np.zeros((2, 10)))
    assert isinstance(start_samples(NUMPY, x, SamplerSettings(), [0.1, 0.2]), PendingRows)
    for ops in (MAPPING, NUMPY_ROWS):
        mapped = start_samples(ops, x, SamplerSettings(), [0.1, 0.2])
        assert isinstance(mapped, PendingSample) and mapped.rows


@pytest.mark.parametrize("vocab", [4096, 32768, 151936])
def test_numpy_rows_equal_each_row_alone_at_real_vocabularies(vocab):
    """numpy's sums and elementwise maths over (R, V) rows give each row what they give it alone (pairwise sums per
    row, the same vector loops), at the built-in model's vocabulary and at Llama's and Qwen's."""
    s = SamplerSettings(temperature=0.8, top_k=0, top_p=0.95, min_p=0.02, repetition_penalty=1.2,
                        typical_p=0.9, top_n_sigma=2.0)
    assert_batch_equals_rows(NUMPY_ROWS, s, seed=vocab, rows=4, steps=2, vocab=vocab)


def test_a_row_mapped_array_never_becomes_one_number():
    rows = Rows(np.zeros((3, 4), dtype=np.float32))
    with pytest.raises(TypeError, match="each row is its own"):
        np.asarray(rows)
    with pytest.raises(TypeError, match="each row is its own"):
        bool(rows[0] == 0)
    with pytest.raises(TypeError):
        np.median(rows)  # a numpy function the rows do not map: refused, not run on the stacked rows


def test_row_mapped_indexing_gathers_each_rows_own_ids():
    a = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    x, ids = Rows(a), Rows(np.array([[4, 0], [1, 1]]))
    assert np.array_equal(x[..., ids].a, np.stack([a[0][..., [4, 0]], a[1][..., [1, 1]]]))
    assert np.array_equal(x[:, ids].a, x[..., ids].a)
    first = Rows(np.array([[2, 0], [1, 1]]))
    assert np.array_equal(x[first].a, np.stack([a[0][[2, 0]], a[1][[1, 1]]]))
    flat = Rows(a[:, 0])
    assert np.array_equal(flat[ids].a, np.stack([a[0, 0][[4, 0]], a[1, 0][[1, 1]]]))
    assert np.array_equal((flat[None, :] + flat[:, None]).a, a[:, 0, None, :] + a[:, 0, :, None])


def test_rows_with_and_without_a_history_run_one_by_one():
    s = SamplerSettings(repetition_penalty=1.3)
    rows = [History.start(MAPPING, 10, [1, 2]), None]
    pending = start_samples(MAPPING, MAPPING.f32(np.zeros((2, 10))), s, [0.1, 0.2], histories=rows)
    assert isinstance(pending, PendingRows) and pending.results()[0].stage_names[0] == "penalties"


def test_disagreeing_sizes_are_refused():
    with pytest.raises(ValueError, match="3 uniforms, 2 histories and 2 rows"):
        start_samples(MAPPING, MAPPING.f32(np.zeros((2, 10))), SamplerSettings(), [0.1, 0.2, 0.3],
                      histories=[None, None])


def test_a_row_without_a_finite_logit_says_so():
    x = np.zeros((2, 10), dtype=np.float32)
    x[1] = np.nan
    with pytest.raises(NoValidTokenError):
        start_samples(MAPPING, x, SamplerSettings(), [0.1, 0.2]).results()


def test_rows_whose_settings_differ_only_in_seed_length_or_stops_share_one_mapped_step():
    """`decode`'s rows group by what shapes the distribution (`SamplerSettings.pipeline`): side-by-side columns that
    differ in seed alone are one mapped step; another temperature is its own. Each row still draws what it would
    alone."""
    base = SamplerSettings(temperature=0.9, top_p=0.9)
    kinds = [base.with_(seed=1), base.with_(seed=2, max_tokens=7, stop=("x",)), base.with_(temperature=0.4)]
    logits = np.random.default_rng(0).normal(size=(3, 50)).astype(np.float32)
    rows = [Row(np.random.default_rng(i), settings=s) for i, s in enumerate(kinds)]
    groups = start_rows(MAPPING, logits, rows, base, top_n=5, record=True)
    assert [idx for idx, _ in groups] == [[0, 1], [2]] and isinstance(groups[0][1], PendingSample) and groups[0][1].rows
    outs = {i: out for idx, g in groups for i, out in zip(idx, g.results(), strict=True)}
    for i, s in enumerate(kinds):
        u = float(np.random.default_rng(i).random())
        assert outs[i] == start_sample(NUMPY, logits[i], s, u, top_n=5).result()
