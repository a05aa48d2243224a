"""Steering as a stage, on the session's tiny Llama through both backends' real loaders: strength 0 is the plain run
bit for bit; a token's own output direction added to the last layer's output makes that token the most promoted; the
KL each step records is the KL between a steered and an unsteered forward run apart; a steered trace saves and loads
equal; MLX and torch steer alike; vectors made from pairs are the mean / principal difference of the layers' states;
and a vector written here steers llama.cpp (llama-cpp-python) exactly as it steers torch, layer for layer."""

from __future__ import annotations

import threading
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from app.core.control_vectors import ControlVector, read_vector, write_vector
from app.core.decoding.generation import generate
from app.core.decoding.steering.pairs import VectorMade, VectorRequest, make_from_pairs, pair_states
from app.core.events import Finished, Request
from app.core.record.trace import RunTrace
from app.core.remote.probe import connect
from app.core.settings import SamplerSettings, SettingsError
from app.core.stage_inputs import Steering
from backends.base import LoadOptions, Steer
from tests.remote_fake import fake_server, sampling_server

PROMPT = "The quick brown fox"


def unembedding(tiny_path: Path, token: int) -> np.ndarray:
    from safetensors.numpy import load_file

    return load_file(tiny_path / "model.safetensors")["lm_head.weight"][token].astype(np.float32)


def vector_file(tmp: Path, name: str, directions: dict[int, np.ndarray]) -> str:
    path = tmp / name
    write_vector(path, ControlVector({k: v.astype(np.float32) for k, v in directions.items()}, "tiny"))
    return str(path)


def run(model, settings: SamplerSettings, n: int = 1, prompt: str = PROMPT) -> list[RunTrace]:
    events = list(generate(model, Request(prompt=prompt, settings=settings, n=n, ignore_eos=True), threading.Event()))
    return [e.trace for e in sorted((e for e in events if isinstance(e, Finished)), key=lambda e: e.sequence)]


@pytest.fixture(scope="module")
def vectors(tmp_path_factory: pytest.TempPathFactory, tiny_path: Path) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("vectors")
    rng = np.random.default_rng(0)
    return {"random": vector_file(tmp, "random.gguf", {1: rng.normal(0, 1, 64)}),
            "token": vector_file(tmp, "token.gguf", {1: unembedding(tiny_path, 42)})}


@pytest.fixture(scope="module")
def torch_hf(tiny_path: Path):
    """The tiny Llama on transformers' own forward (not the lean one): steered through forward hooks."""
    pytest.importorskip("torch")
    from backends.torch.backend import TorchBackend

    return TorchBackend().load(tiny_path, LoadOptions(device="cpu", dtype="float32", fast=False))


SEEDED = SamplerSettings(temperature=0.9, top_k=40, seed=11, max_tokens=6)


def test_strength_zero_is_the_plain_run_bit_for_bit(model, vectors):
    plain = run(model, SEEDED, n=2)
    zero = run(model, SEEDED.with_(steering=Steering(vectors["random"], (1,), 0.0)), n=2)
    assert [[st.sample for st in t.steps] for t in zero] == [[st.sample for st in t.steps] for t in plain]
    assert all(st.sample.steer is None for t in zero for st in t.steps)


@pytest.mark.parametrize("path", ["lean", "transformers", "mlx"])
def test_a_steer_of_zeros_leaves_the_forward_bit_for_bit(torch_model, torch_hf, mlx_model, path: str):
    model = {"lean": torch_model, "transformers": torch_hf, "mlx": mlx_model}[path]
    ids = [model.tokenizer.encode(PROMPT)]
    before = np.array(model.forward(ids, model.new_cache()))
    for steer in (Steer({}), Steer({1: np.zeros((1, 64), np.float32)})):
        model.steer(steer)
        try:
            during = np.array(model.forward(ids, model.new_cache()))
        finally:
            model.steer(None)
        assert np.array_equal(before, during)
    assert np.array_equal(before, np.array(model.forward(ids, model.new_cache())))


def test_a_token_s_output_direction_at_the_last_layer_promotes_that_token(model, vectors):
    plain = run(model, SEEDED.with_(temperature=0, max_tokens=3))[0]
    steered = run(model, SEEDED.with_(temperature=0, max_tokens=3, steering=Steering(vectors["token"], (1,), 8.0)))[0]
    first = steered.steps[0].sample
    assert first.steer.promoted[0][0] == 42 and first.token == 42 != plain.steps[0].token_id
    assert first.steer.twin_token == plain.steps[0].token_id  # the unsteered draw, with the same uniform
    _, _, before, after = first.steer.promoted[0]
    assert after > 3 * before and first.steer.kl > 0.1


@pytest.mark.parametrize("path", ["lean", "transformers"])
def test_the_recorded_kl_is_that_of_a_steered_and_an_unsteered_forward_run_apart(torch_model, torch_hf, vectors,
                                                                                   tmp_path: Path, path: str):
    model = torch_model if path == "lean" else torch_hf
    steering = Steering(vectors["random"], (1,), 3.0)
    trace = run(model, SEEDED.with_(steering=steering))[0]
    direction = read_vector(steering.path).directions[1] * 3.0
    context = list(trace.prompt_ids)
    for st in trace.steps:
        steered = _logits(model, context, Steer({1: direction[None]}))
        alone = _logits(model, context, None)
        ls, lu = _log_softmax(steered), _log_softmax(alone)
        s = st.sample
        assert s.steer.kl == pytest.approx(float(np.sum(np.exp(ls) * (ls - lu))), rel=1e-4, abs=1e-6)
        assert np.allclose(s.steer.unsteered, np.exp(lu)[s.top_ids[: s.top_n]], atol=1e-6)
        assert s.raw_logprob == pytest.approx(ls[s.token], abs=1e-4)  # the sampler drew from the steered row
        assert s.steer.token_logprob == pytest.approx(lu[s.token], abs=1e-4)
        context.append(s.token)
    trace.save(tmp_path / "steered.jsonl")
    again = RunTrace.load(tmp_path / "steered.jsonl")
    assert [st.sample for st in again.steps] == [st.sample for st in trace.steps]
    assert again.settings.steering == steering


def _logits(model, ids: list[int], steer: Steer | None) -> np.ndarray:
    model.steer(steer)
    try:
        return np.array(model.forward([ids], model.new_cache()), dtype=np.float64)[0]
    finally:
        model.steer(None)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def test_mlx_and_torch_steer_the_same_weights_alike(torch_model, mlx_model, vectors):
    settings = SEEDED.with_(temperature=0, steering=Steering(vectors["random"], (1,), 3.0))
    a, b = run(torch_model, settings)[0], run(mlx_model, settings)[0]
    assert a.token_ids == b.token_ids
    for x, y in zip(a.steps, b.steps, strict=True):
        assert x.sample.steer.kl == pytest.approx(y.sample.steer.kl, rel=1e-3, abs=1e-5)
        assert np.allclose(x.sample.steer.unsteered, y.sample.steer.unsteered, atol=1e-5)


def test_a_vector_from_pairs_is_the_mean_difference_of_the_layers_states(model, tmp_path: Path):
    positive, negative = ("I love this", "What a happy day"), ("I hate this", "What a sad day")
    out = tmp_path / "happy.gguf"
    request = VectorRequest(positive=positive, negative=negative, method="mean", path=str(out))
    made = next(e for e in make_from_pairs(model, request, threading.Event()) if isinstance(e, VectorMade))
    pos, neg = pair_states(model, positive, (1,)), pair_states(model, negative, (1,))
    assert made.vector.layers == (1,)  # every layer from 1: the tiny model has two
    assert np.allclose(made.vector.directions[1], (pos - neg).mean(axis=0)[0], atol=1e-5)
    assert np.array_equal(read_vector(out).directions[1], made.vector.directions[1])
    with pytest.raises(SettingsError, match="layer 0"):
        list(make_from_pairs(model, VectorRequest(positive=positive, negative=negative, layers=(0,)),
                             threading.Event()))


def test_a_vector_that_does_not_fit_the_model_is_one_line(torch_model, tmp_path: Path, vectors):
    wide = vector_file(tmp_path, "wide.gguf", {1: np.ones(32)})
    for steering, says in [(Steering(wide, (1,), 1.0), "hidden size of 32"),
                           (Steering(vectors["random"], (2,), 1.0), "no direction for layer 2"),
                           (Steering(str(tmp_path / "none.gguf"), (), 1.0), "none.gguf: no such file")]:
        with pytest.raises(SettingsError, match=says):
            run(torch_model, SEEDED.with_(steering=steering))


def test_llama_cpp_adds_a_vector_written_here_at_the_same_layer(torch_model, tiny_path: Path, tmp_path: Path,
                                                                  vectors):
    """llama.cpp's own convention (its reader lays direction.L out from layer 1 and adds it to layer L's output):
    llama.cpp steered by this file gives the logits torch gives steered by it at layer 1, and not those of layer 0."""
    llama_cpp = pytest.importorskip("llama_cpp")
    gguf_files = pytest.importorskip("tests.gguf_files")
    import ctypes

    model_file = gguf_files.write_gguf(tiny_path, tmp_path / "tiny-f32.gguf")
    vector = read_vector(vectors["random"])
    llm = llama_cpp.Llama(str(model_file), n_ctx=64, verbose=True, n_threads=1)  # (quiet: /dev/null left open)
    data = np.zeros((max(vector.layers), vector.hidden), dtype=np.float32)  # row L-1: direction.L
    for layer in vector.layers:
        data[layer - 1] = vector.directions[layer] * 3.0
    ptr = data.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    assert llama_cpp.llama_set_adapter_cvec(llm.ctx, ptr, data.size, vector.hidden, 1, max(vector.layers)) == 0
    ids = torch_model.tokenizer.encode(PROMPT)
    assert llama_cpp.llama_decode(llm.ctx, llama_cpp.llama_batch_get_one((ctypes.c_int32 * len(ids))(*ids),
                                                                           len(ids))) == 0
    theirs = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(torch_model.info.vocab_size,))
    theirs = theirs.astype(np.float64)
    llm.close()
    ours = _logits(torch_model, ids, Steer({1: vector.directions[1][None] * 3.0}))
    at_0 = _logits(torch_model, ids, Steer({0: vector.directions[1][None] * 3.0}))
    plain = _logits(torch_model, ids, None)
    assert np.abs(theirs - ours).max() < 0.01  # (llama.cpp's float32 sums differ from torch's by ~1e-3)
    assert np.abs(theirs - plain).max() > 0.1 and np.abs(theirs - at_0).max() > 0.1


def test_a_server_s_model_refuses_steering_in_one_line(vectors):
    with fake_server(sampling_server()) as server, closing(connect(server.url)) as model:
        with pytest.raises(SettingsError, match=r"cannot be steered: a server.s model exposes no layers$"):
            run(model, SEEDED.with_(steering=Steering(vectors["random"], (1,), 2.0)))
        assert server.bodies == []  # refused before anything was sent
