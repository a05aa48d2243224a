"""Inside the model at a position, on both local backends: the logit lens is each layer's residual stream through the
model's own final norm and head, as computed directly with transformers (`output_hidden_states`, the final norm, the
head); attention is transformers' eager attention's weights (`output_attentions`); MLX equals torch on the same
weights; the live lens's per-layer logits are the full lens's at those ids, and watching changes no logit. Random
Llama, Qwen2 (tied, biased), Gemma 3 (sliding window, grouped KV) and GPT-2 made here, and the built-in model."""

from __future__ import annotations

import json
import queue
from pathlib import Path

import numpy as np
import pytest

from app.core.decoding.inside import InsideRequest, Looked
from app.core.events import Finished, Request
from app.core.models.sources import BUILTIN_PATH, ModelSpec
from app.core.runs.jobs import Job
from app.core.runs.model_thread import ModelThread
from app.core.settings import SamplerSettings
from backends import installed
from backends.base import LoadOptions
from tests.tiny import make_tokenizer

CONTEXT = [5, 17, 33, 90, 4, 61, 8, 12, 40, 41]  # the last is the position read; 10 > Gemma's window of 4
TARGET = 7
ATOL = 2e-4
needs_torch = pytest.mark.skipif(not installed("torch"), reason="the reference is transformers' (torch)")


def _save(model: object, path: Path) -> Path:
    """A transformers model and the tiny tokenizer in a folder both backends load (mlx-lm reads a few config keys
    under older names)."""
    tok = make_tokenizer()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    cfg = json.loads((path / "config.json").read_text())
    if "rope_theta" in (cfg.get("rope_parameters") or {}):
        cfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
    if cfg["model_type"] == "gemma3_text":
        cfg["sliding_window_pattern"] = 2  # (mlx-lm's name for the layer types below)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, tiny_path: Path) -> dict[str, Path]:
    if not installed("torch"):
        pytest.skip("the random models are made with transformers (torch)")
    import torch
    from transformers import (
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        GPT2Config,
        GPT2LMHeadModel,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    vocab = len(make_tokenizer())
    small = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2)
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("inside")
    return {"llama": tiny_path, "builtin": BUILTIN_PATH,
            "qwen2": _save(Qwen2ForCausalLM(Qwen2Config(**small, tie_word_embeddings=True)), root / "qwen2"),
            "gemma3": _save(Gemma3ForCausalLM(Gemma3TextConfig(**small, head_dim=16, sliding_window=4, layer_types=[
                "sliding_attention", "full_attention"])), root / "gemma3"),
            "gpt2": _save(GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=64, n_layer=2, n_head=4,
                                                     n_positions=64)), root / "gpt2")}


_loaded: dict[tuple[str, str], object] = {}
_refs: dict[str, tuple[np.ndarray, np.ndarray]] = {}


def load(folders: dict[str, Path], name: str, way: str) -> object:
    """The model through the backend's real loader: torch (the lean path where it applies), torch-hf (transformers'
    forward always) or mlx."""
    if (name, way) not in _loaded:
        if way == "mlx":
            from backends.mlx.backend import MlxBackend

            _loaded[name, way] = MlxBackend().load(folders[name], LoadOptions(dtype="float32"))
        else:
            from backends.torch.backend import TorchBackend

            _loaded[name, way] = TorchBackend().load(folders[name], LoadOptions(device="cpu", dtype="float32",
                                                                               fast=way == "torch"))
    return _loaded[name, way]


def reference(folders: dict[str, Path], name: str) -> tuple[np.ndarray, np.ndarray]:
    """transformers, eager, the whole context at once: each hidden state of the last position through the final norm
    and head (the last one is normed already: the model's logits), log-softmaxed (L+1, V); the attentions (L, H, T)."""
    if name not in _refs:
        import torch
        from transformers import AutoModelForCausalLM

        hf = AutoModelForCausalLM.from_pretrained(folders[name], dtype=torch.float32, attn_implementation="eager")
        with torch.no_grad():
            out = hf(torch.tensor([CONTEXT]), output_hidden_states=True, output_attentions=True)
            norm = getattr(hf.get_decoder(), "norm", None) or hf.get_decoder().ln_f
            rows = [hf.get_output_embeddings()(norm(h[0, -1])) for h in out.hidden_states[:-1]] + [out.logits[0, -1]]
            logits = torch.stack(rows)
            cap = getattr(hf.config, "final_logit_softcapping", None)
            if cap:  # (Gemma: the head's output capped; the last row already is)
                logits[:-1] = torch.tanh(logits[:-1] / cap) * cap
            _refs[name] = (torch.log_softmax(logits, -1).numpy(),
                           torch.stack([a[0, :, -1] for a in out.attentions]).numpy())
    return _refs[name]


def at_last(model: object, what: str) -> object:
    """The lens (top 5, target TARGET) or attention at CONTEXT's last position, its context before it cached."""
    cache = model.new_cache()
    model.forward([CONTEXT[:-1]], cache)
    return model.lens(cache, CONTEXT[-1], TARGET, 5) if what == "lens" else model.attention(cache, CONTEXT[-1])


CASES = [(name, way) for name in ("llama", "builtin", "qwen2", "gemma3", "gpt2") for way in ("torch", "torch-hf", "mlx")
         if not (way == "torch-hf" and name in ("gemma3", "gpt2")) and not (way == "mlx" and name == "gpt2")]
# (Gemma and GPT-2 run transformers' forward on torch anyway; mlx-lm does not read a transformers 5 GPT-2 folder)


def _backend(way: str) -> str:
    return "mlx" if way == "mlx" else "torch"


@needs_torch
@pytest.mark.parametrize(("name", "way"), CASES)
def test_the_lens_is_each_hidden_state_through_the_final_norm_and_head(folders, name: str, way: str) -> None:
    if not installed(_backend(way)):
        pytest.skip(f"{_backend(way)} not installed")
    model = load(folders, name, way)
    lens = at_last(model, "lens")
    ref, _ = reference(folders, name)
    layers = ref.shape[0]
    assert lens.top_ids.shape == (layers, 5)
    np.testing.assert_array_equal(lens.top_ids, np.argsort(-ref, axis=1, kind="stable")[:, :5])
    np.testing.assert_allclose(lens.top_logprobs, np.sort(ref, axis=1)[:, ::-1][:, :5], atol=ATOL)
    np.testing.assert_allclose(lens.target_logprob, ref[:, TARGET], atol=ATOL)
    np.testing.assert_array_equal(lens.target_rank, (ref > ref[:, TARGET : TARGET + 1]).sum(axis=1))
    own = model.ops.numpy(model.forward([CONTEXT], model.new_cache()))[0]  # the last row: the model's own logits
    np.testing.assert_allclose(lens.top_logprobs[-1] + lens.lse[-1], np.sort(own)[::-1][:5], atol=ATOL)


@needs_torch
@pytest.mark.parametrize(("name", "way"), CASES)
def test_attention_is_transformers_eager_attention(folders, name: str, way: str) -> None:
    if not installed(_backend(way)):
        pytest.skip(f"{_backend(way)} not installed")
    found = at_last(load(folders, name, way), "attention")
    _, ref = reference(folders, name)
    assert found.weights.shape == ref.shape  # (layers, heads, positions): every position, a window's hidden at 0
    np.testing.assert_allclose(found.weights, ref, atol=1e-5)
    np.testing.assert_allclose(found.weights.sum(-1), 1.0, atol=1e-5)
    if name == "gemma3":
        assert found.windows == (4, None)
        assert (found.weights[0, :, : len(CONTEXT) - 4] == 0).all()  # the sliding layer sees its last 4 only
    assert found.kv_heads == {"builtin": 4, "gpt2": 4}.get(name, 2)


@pytest.mark.parametrize("name", ["llama", "builtin", "qwen2", "gemma3"])
def test_mlx_equals_torch_on_the_same_weights(folders, name: str) -> None:
    if not installed("mlx"):
        pytest.skip("mlx not installed")
    t, m = load(folders, name, "torch"), load(folders, name, "mlx")
    lt, lm = at_last(t, "lens"), at_last(m, "lens")
    np.testing.assert_array_equal(lt.top_ids, lm.top_ids)
    np.testing.assert_allclose(lt.top_logprobs, lm.top_logprobs, atol=ATOL)
    np.testing.assert_allclose(lt.lse, lm.lse, atol=ATOL)
    np.testing.assert_allclose(at_last(t, "attention").weights, at_last(m, "attention").weights, atol=1e-5)


@needs_torch
@pytest.mark.parametrize("way", ["torch", "torch-hf", "mlx"])
def test_the_live_lens_is_the_full_lens_at_its_ids_and_changes_no_logit(folders, way: str) -> None:
    if not installed(_backend(way)):
        pytest.skip(f"{_backend(way)} not installed")
    model = load(folders, "qwen2", way)
    plain = model.ops.numpy(model.forward([CONTEXT], model.new_cache()))
    model.watch_layers(True)
    try:
        watched = model.ops.numpy(model.forward([CONTEXT], model.new_cache()))
        ids = np.array([[TARGET, 3, 100], [9, 8, 7]])  # two rows of ids over the one row of states
        live = model.ops.numpy(model.layer_logits(model.layer_states(), ids))
    finally:
        model.watch_layers(False)
    np.testing.assert_array_equal(watched, plain)  # the lens only reads: the logits are the same, bit for bit
    ref, _ = reference(folders, "qwen2")
    lens = at_last(model, "lens")
    assert live.shape == (2, ref.shape[0], 3)
    for row in range(2):  # a token's logit is its log-probability + the row's logsumexp
        np.testing.assert_allclose(live[row], ref[:, ids[row]] + lens.lse[:, None], atol=ATOL)
    assert model.layer_states() is None  # nothing kept once off


def test_a_quantized_mlx_model_reads_through_its_quantized_tied_embeddings() -> None:
    if not installed("mlx"):
        pytest.skip("mlx not installed")
    from backends.mlx.backend import MlxBackend

    model = MlxBackend().load(BUILTIN_PATH, LoadOptions(quantize_bits=4))
    cache = model.new_cache()
    model.forward([CONTEXT[:-1]], cache)
    lens = model.lens(cache, CONTEXT[-1], TARGET, 5)
    own = model.ops.numpy(model.forward([CONTEXT], model.new_cache()))[0]  # the quantized model's own logits
    own = own - np.log(np.exp(own - own.max()).sum()) - own.max()
    np.testing.assert_allclose(lens.top_logprobs[-1], np.sort(own)[::-1][:5], atol=ATOL)
    model.watch_layers(True)
    model.forward([CONTEXT], model.new_cache())
    live = model.ops.numpy(model.layer_logits(model.layer_states(), lens.top_ids[-1:]))  # rows dequantized
    model.watch_layers(False)
    np.testing.assert_allclose(live[0, -1], lens.top_logprobs[-1] + lens.lse[-1], atol=1e-3)


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_a_run_with_the_live_lens_records_what_the_full_lens_finds(tiny_path: Path, backend: str) -> None:
    """Through the model thread: a run with the live lens on records, per step, each layer's logits for its top-8;
    the lens job at a step finds those logits again (log-probability + logsumexp), and the last row is the record's
    own raw logits."""
    spec = ModelSpec(str(tiny_path), backend, LoadOptions(device="cpu" if backend == "torch" else None,
                                                          dtype="float32"))
    worker, out = ModelThread(), queue.Queue()
    try:
        worker.start(Job("plain", (Request(model=spec, prompt="Hello", settings=SamplerSettings(seed=2, max_tokens=5),
                                           ignore_eos=True, lens=8),), out))
        trace = next(ev for ev in iter(lambda: out.get(timeout=60), None) if isinstance(ev, Finished)).trace
        step = trace.steps[3].sample
        ask = InsideRequest(model=spec, prompt_ids=tuple(trace.prompt_ids), tokens=tuple(trace.token_ids), step=3,
                            top_k=384)  # the whole vocabulary: every live id is in every row
        worker.start(Job("lens", (ask,), out))
        grid = next(ev for ev in iter(lambda: out.get(timeout=60), None) if isinstance(ev, Looked)).result
    finally:
        worker.close()
    assert all(st.sample.lens is not None and st.sample.lens.logits.shape == (3, 8) for st in trace.steps)
    np.testing.assert_array_equal(step.lens.ids, step.top_ids[:8])
    np.testing.assert_allclose(step.lens.logits[-1], step.top_logits[:8], atol=1e-4)
    for layer in range(grid.layers):
        where = [int(np.flatnonzero(grid.top_ids[layer] == t)[0]) for t in step.lens.ids]
        full = np.log(grid.top_probs[layer, where]) + grid.lse[layer]
        np.testing.assert_allclose(step.lens.logits[layer], full, atol=1e-3)
    assert grid.token_id == trace.token_ids[3] and grid.position == len(trace.prompt_ids) + 2


@pytest.mark.parametrize("name", ["llama", "qwen2", "gemma3"])
def test_a_steering_vector_reaches_every_familys_layers_on_mlx(folders, name: str):
    """mlx-lm's `Model.layers` is a fresh slice on some families (Qwen2): steering must change the list the forward
    runs, so a vector at layer 1 moves the logits on each, and taking it off gives the plain forward back."""
    from backends.base import Steer

    model = load(folders, name, "mlx")
    hidden = model.info.hidden_size
    plain = np.array(model.forward([CONTEXT], model.new_cache()))
    model.steer(Steer({1: np.full((1, hidden), 4.0, np.float32)}))
    try:
        steered = np.array(model.forward([CONTEXT], model.new_cache()))
    finally:
        model.steer(None)
    assert np.abs(steered - plain).max() > 1e-2
    np.testing.assert_array_equal(np.array(model.forward([CONTEXT], model.new_cache())), plain)
