"""Engine presets are true: each preset's order and values, with any stage settings on top, give the final
distribution the engine's own code gives, on the built-in model's real logits (mlx-lm's make_sampler, transformers'
generate warpers as `_get_logits_processor` builds them from a GenerationConfig)."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.models.sources import BUILTIN_PATH
from app.core.sampler.pipeline import make_stages, run_stages, sanitize
from app.core.sampler.presets import SHIPPED, Preset
from app.core.settings import SamplerSettings
from backends.ops import NUMPY

PROMPTS = ["import ", "def fib(n):\n    ", "for i in range(", "x = "]
UNIFORMS = NUMPY.f32([0.5, 0.5])


@pytest.fixture(scope="module")
def hf_model():
    pytest.importorskip("torch")  # transformers' model classes need it (an MLX-only install has transformers alone)
    transformers = pytest.importorskip("transformers")
    return transformers.AutoModelForCausalLM.from_pretrained(BUILTIN_PATH, dtype="float32").eval()


@pytest.fixture(scope="module")
def real_logits(hf_model) -> list[np.ndarray]:
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(BUILTIN_PATH)
    with torch.no_grad():
        return [hf_model(torch.tensor([tok.encode(p)])).logits[0, -1].float().numpy() for p in PROMPTS]


def preset(name: str) -> Preset:
    return next(p for p in SHIPPED if p.name == name)


def ours(x: np.ndarray, s: SamplerSettings) -> np.ndarray:
    """Our final distribution over the whole vocabulary (V,)."""
    raw = sanitize(NUMPY, x)
    final = run_stages(NUMPY, make_stages(s, raw.shape[0]), s, raw, UNIFORMS)[-1].x
    e = np.exp(final.astype(np.float64) - final.max())
    return e / e.sum()


def mlx_lm_final(x: np.ndarray, s: SamplerSettings, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    """What mlx-lm's make_sampler draws from: the log-probabilities its filters leave, over its temperature (read
    where it hands them to its categorical draw)."""
    mx = pytest.importorskip("mlx.core")
    from mlx_lm import sample_utils

    seen = {}

    def categorical(logits, temp):
        seen["x"] = np.array(logits * (1 / temp))
        return mx.array([0])

    monkeypatch.setattr(sample_utils, "categorical_sampling", categorical)
    sampler = sample_utils.make_sampler(temp=s.temperature, top_p=0.0 if s.top_p == 1 else s.top_p, min_p=s.min_p,
                                        top_k=s.top_k, xtc_probability=s.xtc_probability,
                                        xtc_threshold=s.xtc_threshold)
    logprobs = mx.array(x) - mx.logsumexp(mx.array(x))
    sampler(logprobs[None])
    y = seen["x"][0].astype(np.float64)
    e = np.exp(y - y.max())
    return e / e.sum()


MLX_CASES = [dict(temperature=0.3, top_k=5, top_p=0.5), dict(temperature=0.8, top_k=20, top_p=0.9, min_p=0.05),
             dict(temperature=1.2, min_p=0.1, top_p=0.7), dict(temperature=0.7, top_k=12, xtc_probability=1.0,
                                                                 xtc_threshold=0.02)]


@pytest.mark.parametrize("kw", MLX_CASES, ids=[f"mlx{i}" for i in range(len(MLX_CASES))])
def test_the_mlx_lm_preset_draws_from_mlx_lm_s_distribution(real_logits, kw, monkeypatch):
    s = preset("mlx-lm").apply(SamplerSettings()).with_(**kw)
    for x in real_logits:
        want, got = mlx_lm_final(x, s, monkeypatch), ours(x, s)
        assert np.flatnonzero(got).tolist() == np.flatnonzero(want).tolist()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7)


def test_the_issue_s_case_temperature_last_is_not_mlx_lm_but_the_mlx_lm_preset_is(real_logits, monkeypatch):
    """ "import ", T 0.3, top-k 5, top-p 0.5: temperature-last keeps 2 tokens, mlx-lm (and its preset) 5."""
    kw = dict(temperature=0.3, top_k=5, top_p=0.5)
    x = real_logits[0]
    assert np.count_nonzero(mlx_lm_final(x, SamplerSettings(**kw), monkeypatch)) == 5
    assert np.count_nonzero(ours(x, SamplerSettings(**kw, order="temperature-last"))) == 2
    assert np.count_nonzero(ours(x, preset("mlx-lm").apply(SamplerSettings()).with_(**kw))) == 5


def transformers_final(model, x: np.ndarray, s: SamplerSettings) -> np.ndarray:
    """generate()'s sampling distribution: the processors it builds from a GenerationConfig, applied to `x`."""
    import torch
    from transformers import GenerationConfig

    gc = GenerationConfig(do_sample=True, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
                          min_p=s.min_p or None, typical_p=s.typical_p, epsilon_cutoff=s.epsilon_cutoff,
                          eta_cutoff=s.eta_cutoff)
    processors = model._get_logits_processor(gc, device="cpu")
    scores = processors(torch.zeros((1, 1), dtype=torch.long), torch.from_numpy(x)[None].clone())
    return torch.softmax(scores[0].double(), -1).numpy()


TF_CASES = [dict(temperature=0.7, top_k=50, top_p=0.9, min_p=0.05), dict(temperature=1.3, top_k=40, typical_p=0.8),
            dict(temperature=0.9, top_p=0.95, epsilon_cutoff=0.001), dict(temperature=1.1, eta_cutoff=0.002,
                                                                          min_p=0.02, top_k=100)]


@pytest.mark.parametrize("name", ["transformers do_sample=True", "transformers generate()"])
@pytest.mark.parametrize("kw", TF_CASES, ids=[f"tf{i}" for i in range(len(TF_CASES))])
def test_the_transformers_presets_draw_from_generate_s_distribution(hf_model, real_logits, name, kw):
    s = preset(name).apply(SamplerSettings()).with_(**kw)
    for x in real_logits:
        want, got = transformers_final(hf_model, x, s), ours(x, s)
        assert np.flatnonzero(got > 0).tolist() == np.flatnonzero(want > 0).tolist()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7)
