"""The batched backend contract on real tiny weights: (B, T) forwards at the last or every position, caches that
count, trim to a prefix and fork into rows. Every model here: the lean torch forward, transformers' own
(`fast=False`) and MLX."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backends.base import LoadOptions

ATOL = 2e-4
ROWS = [[5, 17, 42, 99, 3, 250, 7, 61], [300, 2, 2, 140, 8, 77, 19, 5], [11, 12, 13, 14, 15, 16, 17, 18]]


@pytest.fixture(scope="module", params=["torch", "torch-plain", "mlx"])
def any_model(request: pytest.FixtureRequest, tiny_path: Path):
    if request.param != "torch-plain":
        return request.getfixturevalue(f"{request.param}_model")
    request.getfixturevalue("torch_model")  # skips where torch is not installed
    from backends.torch.backend import TorchBackend

    return TorchBackend().load(tiny_path, LoadOptions(device="cpu", dtype="float32", fast=False))


@pytest.fixture(scope="module")
def reference(tiny_path: Path):
    """transformers' own model, untouched by any backend: the logits every forward must give."""
    pytest.importorskip("torch")
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32).eval()

    def logits(rows: list[list[int]]) -> np.ndarray:  # (B, T, V)
        with torch.inference_mode():
            return hf(input_ids=torch.tensor(rows)).logits.float().numpy()

    return logits


def host(model, x) -> np.ndarray:
    return np.asarray(model.ops.numpy(x), dtype=np.float32)


def greedy(model, logits) -> object:
    """Each row's top token as the core feeds it back: (B, 1), still on the device, built by `ops.stack`."""
    return model.ops.stack([model.ops.topk(logits[i], 1)[1] for i in range(logits.shape[0])])


def test_every_position_of_a_batch_equals_transformers_own_forward(any_model, reference):
    got = host(any_model, any_model.forward(ROWS, any_model.new_cache(), positions="all"))
    assert got.shape == (3, len(ROWS[0]), any_model.info.vocab_size)
    np.testing.assert_allclose(got, reference(ROWS), atol=ATOL, rtol=1e-4)
    last = host(any_model, any_model.forward(np.array(ROWS), any_model.new_cache()))  # numpy tokens, "last"
    assert last.shape == (3, any_model.info.vocab_size)
    np.testing.assert_allclose(last, got[:, -1], atol=ATOL, rtol=1e-4)


def test_both_backends_give_the_same_batched_logits(torch_model, mlx_model):
    t = host(torch_model, torch_model.forward(ROWS, torch_model.new_cache(), positions="all"))
    m = host(mlx_model, mlx_model.forward(ROWS, mlx_model.new_cache(), positions="all"))
    np.testing.assert_allclose(m, t, atol=ATOL, rtol=1e-4)


def test_each_row_of_a_batch_decodes_as_it_would_alone(any_model):
    def decode(rows: list[list[int]], steps: int) -> list[np.ndarray]:
        cache = any_model.new_cache()
        logits = any_model.forward(rows, cache)
        out = [host(any_model, logits)]
        for _ in range(steps):
            logits = any_model.forward(greedy(any_model, logits), cache)
            out.append(host(any_model, logits))
        return out  # per step (B, V)

    together = decode(ROWS, 3)
    for i, row in enumerate(ROWS):
        alone = decode([row], 3)
        for step, (b, a) in enumerate(zip(together, alone, strict=True)):
            np.testing.assert_allclose(b[i], a[0], atol=ATOL, rtol=1e-4, err_msg=f"row {i}, step {step}")


def device_column(model, tokens: list[int]):
    """(B, 1) tokens built as the core builds them on a device: `stack` of B framework arrays of shape (1,)."""
    if model.info.backend == "mlx":
        import mlx.core as mx

        return model.ops.stack([mx.array([t]) for t in tokens])
    import torch

    from backends.torch.backend import TorchOps  # what a GPU's ops are; on the CPU the model's ops are numpy

    return TorchOps(torch.device("cpu")).stack([torch.tensor([t]) for t in tokens])


def test_tokens_as_a_list_a_numpy_array_or_a_framework_array_decode_alike(any_model):
    out = []
    for column in ([[20], [21], [22]], np.array([[20], [21], [22]]), device_column(any_model, [20, 21, 22])):
        cache = any_model.new_cache()
        any_model.forward(ROWS, cache)
        out.append(host(any_model, any_model.forward(column, cache)))
    assert out[0].shape == (3, any_model.info.vocab_size)
    np.testing.assert_array_equal(out[1], out[0])
    np.testing.assert_array_equal(out[2], out[0])


@pytest.mark.parametrize("n", [1, 3])
def test_forked_rows_continue_as_the_original_would_and_leave_it_unchanged(any_model, reference, n):
    prompt, cache = ROWS[0], any_model.new_cache()
    any_model.forward([prompt], cache)
    rows = any_model.fork(cache, n)
    assert any_model.cache_len(rows) == any_model.cache_len(cache) == len(prompt)
    first = host(any_model, any_model.forward([[9]], cache))  # the original moves on first: no fork may see it
    drawn = [[20 + r, 30 + r, 40 + r] for r in range(n)]  # each row its own continuation
    got = [host(any_model, any_model.forward([[d[s]] for d in drawn], rows)) for s in range(3)]  # (3 steps, n, V)
    second = host(any_model, any_model.forward([[10]], cache))  # and after the forks wrote theirs
    for r in range(n):
        want = reference([prompt + drawn[r]])[0, len(prompt):]
        np.testing.assert_allclose(np.stack([g[r] for g in got]), want, atol=ATOL, rtol=1e-4, err_msg=f"row {r}")
    want = reference([[*prompt, 9, 10]])[0]
    np.testing.assert_allclose(np.concatenate([first, second]), want[-2:], atol=ATOL, rtol=1e-4)
    assert any_model.cache_len(cache) == len(prompt) + 2 and any_model.cache_len(rows) == len(prompt) + 3


def test_trimmed_rows_recompute_the_same_logits_and_take_a_new_ending(any_model, reference):
    rows = ROWS[:2]
    cache = any_model.new_cache()
    full = host(any_model, any_model.forward(rows, cache, positions="all"))
    any_model.trim(cache, 3)
    again = host(any_model, any_model.forward([r[-3:] for r in rows], cache, positions="all"))
    np.testing.assert_allclose(again, full[:, -3:], atol=ATOL, rtol=1e-4)
    any_model.trim(cache, 3)
    other = [[7, 8, 9], [1, 2, 3]]
    got = host(any_model, any_model.forward(other, cache, positions="all"))
    want = reference([r[:-3] + o for r, o in zip(rows, other, strict=True)])[:, -3:]
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=1e-4)


def test_cache_len_counts_prefill_decode_and_trim(any_model):
    cache = any_model.new_cache()
    assert any_model.cache_len(cache) == 0
    logits = any_model.forward(ROWS, cache)  # "last" with T > 1: MLX fills the cache in two calls
    assert any_model.cache_len(cache) == 8
    any_model.forward(greedy(any_model, logits), cache)
    assert any_model.cache_len(cache) == 9
    any_model.trim(cache, 0)
    assert any_model.cache_len(cache) == 9
    any_model.trim(cache, 4)
    assert any_model.cache_len(cache) == 5
    assert any_model.cache_bytes(cache) > 0


def test_forward_takes_only_batches_that_fit_its_cache(any_model):
    with pytest.raises(ValueError, match="batch, positions"):
        any_model.forward([1, 2, 3], any_model.new_cache())
    with pytest.raises(ValueError, match="batch, positions"):
        any_model.forward([[]], any_model.new_cache())
    with pytest.raises(ValueError, match="positions must be"):
        any_model.forward([[1, 2]], any_model.new_cache(), positions="first")
    cache = any_model.new_cache()
    any_model.forward([[1, 2]], cache)
    with pytest.raises(ValueError, match="1-row cache cannot take a batch of 2"):
        any_model.forward([[3], [4]], cache)
    rows = any_model.fork(cache, 2)
    with pytest.raises(ValueError, match="this one has 2 rows"):
        any_model.fork(rows, 2)


def test_only_mlx_asks_its_thread_to_be_parked():
    from backends import get_backend, installed

    for name, park in (("torch", False), ("mlx", True)):
        if installed(name):
            assert get_backend(name).park_thread_on_exit is park
