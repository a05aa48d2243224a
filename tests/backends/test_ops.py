"""The one sampler pipeline executed on mlx and torch gives what the numpy reference gives."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.record.record import Sample
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import sample
from app.core.settings import SamplerSettings
from backends import installed
from backends.ops import NUMPY, NumpyOps

CASES = [SamplerSettings(temperature=0.7), SamplerSettings(temperature=0), SamplerSettings(temperature=1.2, top_k=20,
         top_p=0.8), SamplerSettings(temperature=0.9, min_p=0.05, order="temperature-last"),
         SamplerSettings(temperature=1.0, top_p=0.0), SamplerSettings(temperature=1.0, repetition_penalty=1.3,
                                                                      frequency_penalty=0.5, presence_penalty=0.4)]


class CompilingNumpy(NumpyOps):
    """numpy behind a stand-in compiler that, like mx.compile, takes a step whose outputs are arrays only: the
    paths MLX takes (its record made on the host, or on the device) run without mlx."""

    def __init__(self, host_record: bool) -> None:
        self.host_record = host_record

    def compile(self, fn):
        def compiled(*args):
            out = fn(*args)
            assert isinstance(out, tuple) and all(isinstance(a, np.ndarray) for a in out), out
            return out

        return compiled


def executors():
    out = [pytest.param(CompilingNumpy(host_record=True), id="numpy-compiled-host-record"),
           pytest.param(CompilingNumpy(host_record=False), id="numpy-compiled-device-record")]
    if installed("torch"):
        import torch

        from backends.torch.backend import TorchOps

        out.append(pytest.param(TorchOps(torch.device("cpu")), id="torch"))
    if installed("mlx"):
        from backends.mlx.backend import MlxOps

        out.append(pytest.param(MlxOps(), id="mlx"))  # on a CPU: draws on MLX, records on numpy
        on_device = MlxOps()
        on_device.host_record = False  # the whole step on MLX, as on an Apple GPU
        out.append(pytest.param(on_device, id="mlx-device-record"))
    return out


@pytest.mark.parametrize("ops", executors())
@pytest.mark.parametrize("s", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_executor_matches_the_numpy_reference(ops, s: SamplerSettings):
    rng = np.random.default_rng(5)
    vocab = 3000
    for _ in range(3):
        x = (rng.normal(size=vocab) * 3).astype(np.float32)
        x[rng.integers(0, vocab, 5)] = x.max()  # ties at the top
        u = float(rng.random())
        hn, hb = History.start(NUMPY, vocab, [1, 2, 3, 3]), History.start(ops, vocab, [1, 2, 3, 3])
        want = sample(NUMPY, x, s, u, history=hn)
        got = sample(ops, ops.f32(x), s, u, history=hb)
        assert isinstance(got, Sample) and isinstance(want, Sample)
        assert got.token == want.token and got.rank == want.rank
        assert got.stage_names == want.stage_names
        np.testing.assert_array_equal(got.kept_counts, want.kept_counts)
        np.testing.assert_allclose(got.final_probs, want.final_probs, rtol=1e-4, atol=1e-6)
        assert sorted(got.top_ids[:20].tolist()) == sorted(want.top_ids[:20].tolist())
        assert got.entropy == pytest.approx(want.entropy, rel=1e-4)
        np.testing.assert_allclose(ops.numpy(hb.generated), hn.generated)
        assert sample(ops, ops.f32(x), s, u, record=False) == want.token
