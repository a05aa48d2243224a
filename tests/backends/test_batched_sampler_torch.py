"""The batched sampler step on torch (`torch.func.vmap` over the one-row step): each row gets exactly what its own
step gives, every number of the record bit for bit, over fuzzed settings and stage orders."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.sampler.batch_sampling import start_samples
from app.core.sampler.sampling import PendingSample
from app.core.settings import SamplerSettings
from tests.batched_sampler_cases import any_stages, assert_batch_equals_rows

torch = pytest.importorskip("torch")
from torch._dynamo.utils import counters  # noqa: E402

from backends.torch.backend import TorchOps  # noqa: E402

OPS = TorchOps(torch.device("cpu"))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(s=any_stages, seed=st.integers(0, 2**16), record=st.booleans())
def test_a_mapped_batch_gives_each_row_its_own_step(s, seed, record):
    assert_batch_equals_rows(OPS, s, seed, record=record)


def test_torch_maps_the_rows_in_one_step():
    x = OPS.f32(torch.zeros((3, 50)))
    pending = start_samples(OPS, x, SamplerSettings(top_k=5), [0.1, 0.5, 0.9])
    assert isinstance(pending, PendingSample) and pending.rows and tuple(pending.tokens.shape) == (3, 1)


@pytest.mark.slow
def test_the_mapped_step_compiles_whole_and_gives_each_row_its_own_step():
    """As on CUDA with --compile: the mapped step through `compile_sampler` (fullgraph, no graph break)."""
    compiled = TorchOps(torch.device("cpu"), compile_steps=True)
    s = SamplerSettings(temperature=0.8, top_k=40, top_p=0.9, min_p=0.02, repetition_penalty=1.2)
    counters.clear()
    with warnings.catch_warnings():  # compiling, torch warns about its own internals (jit), as the backend hides
        warnings.simplefilter("ignore", DeprecationWarning)
        assert_batch_equals_rows(compiled, s, seed=3, rows=4, steps=2)
    assert not counters.get("graph_break")  # fullgraph=True: a break would have raised instead
