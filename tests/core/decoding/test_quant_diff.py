"""Quantization diff: the record's KL, top-1 agreement and log-probabilities are those of the two variants' own
logits (held to an independent numpy computation from one all-positions forward of each), on the built-in model
through the real loaders: float32 against itself, float32 against bfloat16 (torch), float32 against 4-bit (MLX,
through the model thread, which loads and frees B); and what it refuses, in one line."""

from __future__ import annotations

import math
import queue
import threading
from pathlib import Path

import numpy as np
import pytest

from app.core.decoding.generation import PromptError
from app.core.decoding.quant_diff import (
    KEPT_BYTES,
    Diffed,
    DiffProgress,
    DiffRequest,
    QuantDiff,
    check_length,
    kl_rows,
    run_diff,
)
from app.core.events import Failed
from app.core.models.sources import BUILTIN_PATH, ModelSpec
from app.core.runs.jobs import Job
from app.core.runs.model_thread import ModelThread
from backends import get_backend, installed
from backends.base import LoadOptions, ModelLoadError

TEXT = "def main(argv):\n    for name in argv:\n        print(name)\n"  # 24 tokens of the built-in's, BOS first
F32, BF16 = LoadOptions(device="cpu", dtype="float32"), LoadOptions(device="cpu", dtype="bfloat16")
TIMEOUT = 120


def load(backend: str, options: LoadOptions):
    if not installed(backend):
        pytest.skip(f"{backend} backend not installed")
    return get_backend(backend, BUILTIN_PATH).load(BUILTIN_PATH, options)


@pytest.fixture(scope="module")
def torch_f32():
    return load("torch", F32)


def diff_of(a, spec_b: ModelSpec, text: str = TEXT, cancel: threading.Event | None = None) -> list:
    request = DiffRequest(model=ModelSpec("builtin", a.info.backend), model_b=spec_b, prompt=text)
    return list(run_diff(a, request, cancel or threading.Event(), free_a=lambda: None))


def independent(model, ids: list[int]) -> np.ndarray:
    """(T-1, V) float64 log-probabilities from one all-positions forward of the sequence (no chunks)."""
    logits = np.asarray(model.ops.numpy(model.forward([ids[:-1]], model.new_cache(), positions="all"))[0],
                        dtype=np.float64)
    z = logits - logits.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def assert_is_the_record_of(d: QuantDiff, lp_a: np.ndarray, lp_b: np.ndarray) -> None:
    at, nxt = np.arange(len(d.ids) - 1), np.asarray(d.ids[1:])
    np.testing.assert_allclose(d.kl, (np.exp(lp_a) * (lp_a - lp_b)).sum(axis=-1), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(d.top_a, lp_a.argmax(axis=-1))
    np.testing.assert_array_equal(d.top_b, lp_b.argmax(axis=-1))
    np.testing.assert_allclose(d.logprob_a, lp_a[at, nxt], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d.logprob_b, lp_b[at, nxt], rtol=1e-5, atol=1e-5)
    s = d.summary()
    assert s.tokens == len(d.ids) - 1 == len(d.rows())
    assert s.mean_kl == pytest.approx(d.kl.mean()) and s.max_kl == pytest.approx(d.kl.max())
    assert s.agreement == pytest.approx((lp_a.argmax(-1) == lp_b.argmax(-1)).mean())
    assert s.perplexity_a == pytest.approx(math.exp(-lp_a[at, nxt].mean()), rel=1e-5)
    assert s.perplexity_b == pytest.approx(math.exp(-lp_b[at, nxt].mean()), rel=1e-5)


def test_kl_is_the_sum_over_what_a_gives_probability_to():
    with np.errstate(divide="ignore"):
        p, q = np.log([[0.5, 0.5, 0.0]]), np.log([[0.9, 0.1, 0.0]])
        assert kl_rows(p, q)[0] == pytest.approx(0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1))
        assert kl_rows(p, p)[0] == 0.0
        assert kl_rows(p, np.log([[1.0, 0.0, 0.0]]))[0] == math.inf  # A gives a token B never would


def test_a_model_against_itself_differs_nowhere(torch_f32):
    events = diff_of(torch_f32, ModelSpec("builtin", "torch", F32))
    assert [type(e) for e in events] == [DiffProgress, DiffProgress, DiffProgress, Diffed]
    d = events[-1].diff
    assert len(d.ids) == 24 and "".join(d.pieces) == TEXT
    assert (d.kl == 0).all() and d.agree.all()
    s = d.summary()
    assert (s.mean_kl, s.agreement) == (0.0, 1.0) and s.perplexity_a == s.perplexity_b
    lp = independent(torch_f32, list(d.ids))
    assert_is_the_record_of(d, lp, lp)


def test_float32_against_bfloat16_is_the_kl_of_their_own_logits(torch_f32):
    text = "def main(argv):\n    for name in argv:"  # 16 positions: one chunk, as the independent forward
    d = diff_of(torch_f32, ModelSpec("builtin", "torch", BF16), text)[-1].diff
    assert len(d.ids) == 17 and d.label_a.endswith(" · torch float32") and d.label_b.endswith(" · torch bfloat16")
    bf16 = load("torch", BF16)
    lp_a, lp_b = independent(torch_f32, list(d.ids)), independent(bf16, list(d.ids))
    assert (d.kl > 0).all()  # bfloat16 rounds every weight: every position moves, by what its logits say
    assert_is_the_record_of(d, lp_a, lp_b)
    assert d.beside  # the built-in fits beside itself


def test_mlx_4_bit_runs_on_the_model_thread_and_differs():
    if not installed("mlx"):
        pytest.skip("mlx backend not installed")
    worker, out = ModelThread(), queue.Queue()
    try:
        spec = ModelSpec("builtin", "mlx", LoadOptions(dtype="float32"))
        b = ModelSpec("builtin", "mlx", LoadOptions(dtype="float32", quantize_bits=4))
        worker.start(Job("diff", (DiffRequest(model=spec, model_b=b, prompt=TEXT),), out, status=worker.events))
        events = [out.get(timeout=TIMEOUT) for _ in range(4)]
    finally:
        assert worker.close()
    d = events[-1].diff
    assert "4-bit, group 64" in d.label_b and "4-bit" not in d.label_a
    s = d.summary()
    assert 0 < s.mean_kl < math.inf and np.isfinite(d.kl).all() and (d.kl >= 0).all()
    assert 0 < s.agreement <= 1 and s.perplexity_b != s.perplexity_a
    assert s.agreement == d.agree.mean() and s.perplexity_a == pytest.approx(math.exp(-d.logprob_a.mean()))


def test_a_variant_with_another_tokenizer_is_refused_in_one_line(torch_f32, tiny_path: Path):
    with pytest.raises(ModelLoadError, match="vocabulary has 384 tokens and A's 4,096: the two variants must share"):
        diff_of(torch_f32, ModelSpec(str(tiny_path), "torch", F32))


@pytest.mark.needs("torch")
def test_the_thread_reports_a_refusal_to_the_diffs_own_queue(tiny_path: Path):
    worker, out = ModelThread(), queue.Queue()
    try:
        request = DiffRequest(model=ModelSpec("builtin", "torch", F32), model_b=ModelSpec(str(tiny_path), "torch"),
                              prompt="")  # the beginning-of-text token alone
        worker.start(Job("diff", (request,), out, status=worker.events))
        ev = out.get(timeout=TIMEOUT)
    finally:
        assert worker.close()
    assert isinstance(ev, Failed) and ev.message == "a diff needs at least two tokens: each position predicts the next"


def test_too_long_a_text_for_the_kept_log_probabilities_is_refused():
    most = KEPT_BYTES // (4 * 152_064) + 1
    check_length(most, 152_064)
    with pytest.raises(PromptError, match=f"the text is {most + 1:,} tokens; .* {most:,} tokens at most for this "
                                          "152,064-token vocabulary: shorten it"):
        check_length(most + 1, 152_064)


def test_stop_before_a_chunk_ends_the_diff_without_loading_b(torch_f32):
    cancel = threading.Event()
    cancel.set()
    events = diff_of(torch_f32, ModelSpec("builtin", "torch", F32), cancel=cancel)
    assert isinstance(events[-1], Diffed) and events[-1].diff is None
    assert not any(isinstance(e, DiffProgress) and e.message.startswith("Loading B") for e in events)


def test_a_b_that_cannot_be_found_fails_before_a_is_scored(torch_f32):
    request = DiffRequest(model=ModelSpec("builtin", "torch"), model_b=ModelSpec("/nonexistent/variant", "torch"),
                          prompt=TEXT)
    said = []
    with pytest.raises(ModelLoadError, match="no model folder at '/nonexistent/variant'"):
        for ev in run_diff(torch_f32, request, threading.Event(), free_a=lambda: None):
            said.append(ev)
    assert said == []  # not even "Scoring … with A"


def test_b_too_big_to_fit_beside_a_loads_after_a_is_freed(torch_f32, monkeypatch):
    """The memory check decides: here it says B would not fit beside A, so A's weights go first (its log-probabilities
    stay), and the record is the same as with both in memory."""
    said: list[str] = []

    class Tight:
        fits = False

    monkeypatch.setattr("app.core.decoding.quant_diff.estimate_memory", lambda path: Tight())
    request = DiffRequest(model=ModelSpec("builtin", "torch", F32), model_b=ModelSpec("builtin", "torch", F32),
                          prompt=TEXT)

    def load_b(spec, path):
        said.append("load B")
        return get_backend("torch", path).load(path, spec.options)

    events = list(run_diff(torch_f32, request, threading.Event(), lambda: said.append("free A"), load_b))
    d = events[-1].diff
    assert said == ["free A", "load B"] and not d.beside
    assert (d.kl == 0).all() and d.agree.all()


def test_quantize_on_load_asked_of_torch_is_refused_not_compared_as_float(torch_f32):
    with pytest.raises(ModelLoadError, match="torch does not quantize on load: choose the mlx backend for B's 4-bit"):
        diff_of(torch_f32, ModelSpec("builtin", "torch", LoadOptions(device="cpu", quantize_bits=4)))
