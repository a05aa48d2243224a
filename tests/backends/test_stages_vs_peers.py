"""The new sampler stages held to the libraries that define them, on the built-in model's real logits: transformers'
TypicalLogitsWarper, EpsilonLogitsWarper and EtaLogitsWarper, mlx-lm's apply_xtc; and each stage run on mlx and
torch gives what the numpy reference gives."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from app.core.decoding.generation import generate
from app.core.events import Finished, Request, Step
from app.core.models.sources import BUILTIN_PATH
from app.core.record.record import Sample
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import sample
from app.core.sampler.stages import (
    apply_epsilon_cutoff,
    apply_eta_cutoff,
    apply_typical_p,
    apply_xtc,
    dry_breaker_ids,
    dry_penalties,
)
from app.core.settings import SamplerSettings
from backends import get_backend, installed
from backends.base import LoadOptions
from backends.ops import NUMPY
from tests.backends.test_ops import executors

PROMPTS = ["import ", "def fib(n):\n    ", "for i in range(", "class Point:\n    def __init__(", "x = "]


@pytest.fixture(scope="module")
def builtin_torch():
    """The built-in model through the torch backend's loader, float32 on the CPU."""
    if not installed("torch"):
        pytest.skip("torch backend not installed")
    return get_backend("torch").load(BUILTIN_PATH, LoadOptions(device="cpu", dtype="float32"))


@pytest.fixture(scope="module")
def real_logits(builtin_torch) -> list[np.ndarray]:
    """The built-in model's next-token logits (V,) after a few prompts."""
    model, out = builtin_torch, []
    for prompt in PROMPTS:
        ids = model.tokenizer.encode(prompt)
        out.append(model.ops.numpy(model.forward([ids], model.new_cache())[0]).astype(np.float32))
    return out


def kept(x: np.ndarray) -> np.ndarray:
    return np.isfinite(x)


@pytest.mark.parametrize("mass", [0.2, 0.5, 0.9, 0.95])
def test_typical_p_keeps_what_transformers_keeps(real_logits, mass: float):
    torch = pytest.importorskip("torch")
    from transformers.generation.logits_process import TypicalLogitsWarper

    for x in real_logits:
        theirs = TypicalLogitsWarper(mass=mass)(None, torch.from_numpy(x)[None])[0].numpy()
        np.testing.assert_array_equal(kept(apply_typical_p(NUMPY, x, mass).x), kept(theirs))


@pytest.mark.parametrize("eps", [3e-4, 1e-3, 9e-3, 0.04])
def test_epsilon_and_eta_keep_what_transformers_keeps(real_logits, eps: float):
    torch = pytest.importorskip("torch")
    from transformers.generation.logits_process import EpsilonLogitsWarper, EtaLogitsWarper

    for x in real_logits:
        t = torch.from_numpy(x)[None]
        theirs = EpsilonLogitsWarper(epsilon=eps)(None, t)[0].numpy()
        np.testing.assert_array_equal(kept(apply_epsilon_cutoff(NUMPY, x, eps).x), kept(theirs))
        theirs = EtaLogitsWarper(epsilon=eps)(None, t)[0].numpy()
        np.testing.assert_array_equal(kept(apply_eta_cutoff(NUMPY, x, eps).x), kept(theirs))


@pytest.mark.parametrize("threshold", [0.01, 0.03, 0.06, 0.1])
def test_xtc_keeps_what_mlx_lm_keeps(real_logits, threshold: float):
    mx = pytest.importorskip("mlx.core")
    from mlx_lm.sample_utils import apply_xtc as mlx_xtc

    fired = 0
    for x in [y / t for y in real_logits for t in (1.0, 0.7, 0.5)]:  # as they come, and sharpened
        # probability 1: mlx-lm's coin always says yes; ours with any uniform in [0, 1)
        theirs = np.array(mlx_xtc(mx.array(x)[None], 1.0, threshold, [])[0])
        ours = apply_xtc(NUMPY, x, np.float32(0.7), threshold, 1.0)
        np.testing.assert_array_equal(kept(ours.x), kept(theirs))
        fired += int(np.isfinite(ours.prob))
        # the coin says no: nothing cut, no line
        off = apply_xtc(NUMPY, x, np.float32(0.7), threshold, 0.5)
        assert kept(off.x).all() == kept(x).all() and np.isnan(off.prob)
    assert fired > 0  # the thresholds chosen make XTC cut on some of these steps


MORE = [SamplerSettings(temperature=0.8, typical_p=0.7), SamplerSettings(temperature=1.0, top_n_sigma=1.5),
        SamplerSettings(temperature=0.9, epsilon_cutoff=0.001, eta_cutoff=0.002, top_k=50),
        SamplerSettings(temperature=1.1, xtc_probability=0.5, xtc_threshold=0.05),
        SamplerSettings(temperature=0.7, dynatemp_range=0.5, dynatemp_exponent=1.5, min_p=0.02),
        SamplerSettings(temperature=1.0, logit_bias=((3, 5.0), (10, -100.0)), top_p=0.9,
                        chain=("top_p", "logit_bias", "xtc", "temperature"), xtc_probability=1.0),
        SamplerSettings(temperature=0.6, repetition_penalty=1.2, typical_p=0.9, top_n_sigma=2.0,
                        chain=("top_n_sigma", "typical_p", "temperature")),
        SamplerSettings(temperature=0.9, mirostat_tau=4.0, mirostat_eta=0.3, presence_penalty=0.5),
        SamplerSettings(temperature=0.8, dry_multiplier=1.0, dry_allowed_length=1, top_k=30, mirostat_tau=5.0)]


@pytest.mark.parametrize("ops", executors())
@pytest.mark.parametrize("s", MORE, ids=[f"more{i}" for i in range(len(MORE))])
def test_new_stages_on_every_executor_match_the_numpy_reference(ops, s: SamplerSettings):
    rng = np.random.default_rng(11)
    vocab = 2000
    for _ in range(4):
        x = (rng.normal(size=vocab) * 3).astype(np.float32)
        x[rng.integers(0, vocab, 3)] = x.max()  # ties at the top
        u = float(rng.random())
        hn, hb = History.start(NUMPY, vocab, [1, 2, 3, 3]), History.start(ops, vocab, [1, 2, 3, 3])
        want = sample(NUMPY, x, s, u, history=hn)
        got = sample(ops, ops.f32(x), s, u, history=hb)
        assert isinstance(got, Sample) and isinstance(want, Sample)
        assert got.token == want.token and got.stage_names == want.stage_names
        np.testing.assert_array_equal(got.kept_counts, want.kept_counts)
        np.testing.assert_allclose(got.final_probs, want.final_probs, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(got.thresholds, want.thresholds, rtol=1e-4, equal_nan=True)
        assert sample(ops, ops.f32(x), s, u, record=False) == want.token
        if s.mirostat_tau:
            assert float(ops.numpy(hb.mu)) == pytest.approx(float(hn.mu), rel=1e-5)


def test_mirostat_s_mu_is_recorded_per_step_through_a_real_run(builtin_torch):
    """Generation on the built-in model: each step's mirostat line is 2^-μ, μ moved by the step before's draw."""
    model = builtin_torch
    s = SamplerSettings(temperature=1.0, mirostat_tau=3.0, mirostat_eta=0.5, max_tokens=16, seed=4)
    steps = [e.trace.sample for e in generate(model, Request(prompt="import ", settings=s), threading.Event())
             if isinstance(e, Step)]
    mu = 6.0
    for smp in steps:
        assert float(smp.thresholds[smp.stage_index("mirostat")]) == pytest.approx(2**-mu, rel=1e-4)
        mu -= 0.5 * (-np.log2(smp.prob) - 3.0)
    assert len(steps) == 16 and len({round(float(x.thresholds[-1]), 6) for x in steps}) > 3  # μ moved


def test_dry_in_a_real_run_subtracts_its_penalty_from_each_step_s_context(builtin_torch):
    """Generation on the built-in model: at every step the DRY row moves each candidate's log-probability by exactly
    minus its penalty (up to one shift), the penalty computed from the prompt and the tokens drawn so far."""
    model = builtin_torch
    s = SamplerSettings(temperature=0.7, dry_multiplier=0.8, dry_allowed_length=2, max_tokens=40, seed=2)
    prompt = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return"
    trace = next(e.trace for e in generate(model, Request(prompt=prompt, settings=s), threading.Event())
                 if isinstance(e, Finished))
    breakers = dry_breaker_ids(model.tokenizer.token_text, model.info.vocab_size, s.dry_breakers)
    penalized = 0
    for i, st in enumerate(trace.steps):
        smp = st.sample
        pen = dry_penalties([*trace.prompt_ids, *trace.token_ids[:i]], 0.8, s.dry_base, 2, breakers)
        d = smp.stage_index("dry")
        p_in, p_out = smp.probs[d].astype(np.float64), smp.probs[d + 1].astype(np.float64)
        want = -np.array([pen.get(int(t), 0.0) for t in smp.top_ids[: smp.top_n]])
        moved = np.log(p_out) - np.log(p_in)
        np.testing.assert_allclose(moved - moved[0], want - want[0], atol=2e-3)
        penalized += int(np.any(want != 0))
    assert penalized > 0  # the repeated function made DRY act on some steps' candidates


def test_a_fork_of_a_mirostat_and_dry_run_taking_the_drawn_token_goes_on_exactly_as_its_parent(builtin_torch):
    """A branch resumes the parent's state: μ from its last inherited step, DRY's tokens from its context."""
    s = SamplerSettings(temperature=1.0, mirostat_tau=4.0, mirostat_eta=0.3, dry_multiplier=0.8, seed=9,
                        max_tokens=14)
    prompt = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n"
    parent = next(e.trace for e in generate(builtin_torch, Request(prompt=prompt, settings=s, ignore_eos=True),
                                            threading.Event()) if isinstance(e, Finished))
    k = 6
    fork = Request(prompt_ids=tuple(parent.prompt_ids), settings=s, inherited=tuple(parent.steps[:k]),
                   parent=(parent.run_id, k), force=parent.steps[k].token_id, ignore_eos=True)
    child = next(e.trace for e in generate(builtin_torch, fork, threading.Event()) if isinstance(e, Finished))
    assert child.token_ids == parent.token_ids
    i = parent.steps[k + 1].sample.stage_index("mirostat")
    assert child.steps[k + 1].sample.thresholds[i] == pytest.approx(parent.steps[k + 1].sample.thresholds[i])
