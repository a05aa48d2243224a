"""The lean torch forward's weight layout (`backends.torch.fast`): input-major (in, out) for float32 on a CPU, and
`F.linear`'s (out, in) for half precisions, where oneDNN's kernels read it faster. Whichever layout, the forward's
logits are the old layout's within float tolerance, one row and several, and the weights are held once."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from transformers import AutoModelForCausalLM  # noqa: E402

from backends.torch.fast import FastLlama, input_major_for  # noqa: E402

CPU = torch.device("cpu")


def test_float32_is_input_major_on_a_cpu_and_half_precisions_are_not():
    assert input_major_for(CPU, torch.float32)
    assert not input_major_for(CPU, torch.bfloat16) and not input_major_for(CPU, torch.float16)
    assert not input_major_for(torch.device("cuda"), torch.float32)  # (a GPU: left as it is, a transposed view)


@pytest.fixture(scope="module")
def logits_by_layout(tiny_path):
    """Each dtype's logits from both layouts: a two-chunk prefill of two rows, then two decode steps."""
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        for major in (True, False):
            hf = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=dtype).eval()
            fast = FastLlama(hf, input_major=major)
            cache = fast.new_cache()
            rows = [fast.forward([[5, 9, 14, 3], [7, 7, 21, 2]], cache, "all"),
                    fast.forward([[11, 4], [8, 30]], cache, "all")]
            rows += [fast.forward([[t], [t + 1]], cache)[:, None] for t in (12, 40)]
            out[dtype, major] = torch.cat(rows, dim=1).numpy(), fast
    return out


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-5), ("bfloat16", 3e-2)])
def test_the_new_layout_gives_the_old_layouts_logits(logits_by_layout, dtype, tol):
    dt = getattr(torch, dtype)
    old, new = logits_by_layout[dt, True][0], logits_by_layout[dt, False][0]
    assert old.shape == new.shape == (2, 8, old.shape[-1])
    scale = float(np.abs(old).max())
    np.testing.assert_allclose(new, old, atol=tol * scale, rtol=0)
    if dtype == "bfloat16":  # (and both near float32's: the half-precision forward is the same model)
        np.testing.assert_allclose(new, logits_by_layout[torch.float32, True][0], atol=0.1 * scale, rtol=0)


def test_each_layout_holds_the_weights_once_as_transformers_views(logits_by_layout):
    for (dtype, major), (_, fast) in logits_by_layout.items():
        qkv = fast.w.layers[0].qkv  # (in, out) as the forward multiplies it: contiguous only when input-major
        assert qkv.is_contiguous() == major and qkv.t().is_contiguous() == (not major), (dtype, major)
        q_proj = fast.hf.model.layers[0].self_attn.q_proj.weight
        assert q_proj.untyped_storage().data_ptr() == qkv.untyped_storage().data_ptr()
