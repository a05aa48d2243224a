"""The batched sampler step on MLX (`mx.vmap` over the one-row step, compiled): each row gets exactly what its own
step gives, every number of the record bit for bit, over fuzzed settings and stage orders; with the record made on
the host from one read of the batch's stage rows (MLX on a CPU) and on the device (as on an Apple GPU)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.sampler.batch_sampling import start_samples
from app.core.sampler.sampling import PendingSample
from app.core.settings import SamplerSettings
from tests.batched_sampler_cases import any_stages, assert_batch_equals_rows

mx = pytest.importorskip("mlx.core")
from backends.mlx.backend import MlxOps  # noqa: E402


def executors() -> list:
    on_device = MlxOps()
    on_device.host_record = False  # the whole step on MLX, as on an Apple GPU
    return [pytest.param(MlxOps(), id="host-record"), pytest.param(on_device, id="device-record")]


@settings(max_examples=12, deadline=None, derandomize=True)
@given(s=any_stages, seed=st.integers(0, 2**16), record=st.booleans())
@pytest.mark.parametrize("ops", executors())
def test_a_mapped_batch_gives_each_row_its_own_step(ops, s, seed, record):
    assert_batch_equals_rows(ops, s, seed, record=record)


def test_mlx_maps_the_rows_in_one_step():
    ops = MlxOps()
    pending = start_samples(ops, ops.f32(mx.zeros((3, 50))), SamplerSettings(top_k=5), [0.1, 0.5, 0.9])
    assert isinstance(pending, PendingSample) and pending.rows and tuple(pending.tokens.shape) == (3, 1)
