"""Beam search held to transformers' own `generate(num_beams=…)`: the same hypotheses, scores and per-step
log-probabilities, on the built-in model and on a small random Qwen2; the MLX backend finds the same beams; a
cache's rows reorder without a new prefill; a server's model is refused; the model thread runs it."""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import numpy as np
import pytest

from app.core.decoding.beam import BeamSettings, banned_tokens
from app.core.decoding.generation import generate
from app.core.events import Finished, Request
from app.core.models.sources import BUILTIN_PATH, ModelSpec
from app.core.runs.beam_run import BeamFinished, BeamRefusedError, BeamRequest, BeamStepped, open_request, run_beam
from app.core.runs.jobs import Job
from app.core.runs.model_thread import ModelThread
from app.core.settings import SamplerSettings, SettingsError
from backends import installed
from backends.base import LoadOptions
from tests.tiny import make_tokenizer

torch = pytest.importorskip("torch")
SPACE = 221  # the built-in model's " ": as an end token, beams end within a few steps (every early-stop rule bites)
PROMPT = "def add(a, b):"


def make_qwen2(path: Path, seed: int = 3, hidden: int = 64, layers: int = 2) -> Path:
    """A random Qwen2 (q/k/v biases), numpy-seeded float32 safetensors, with the tiny byte-level tokenizer."""
    from safetensors.numpy import save_file
    from transformers import Qwen2Config

    tok = make_tokenizer()
    config = Qwen2Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 2,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         tie_word_embeddings=False, architectures=["Qwen2ForCausalLM"], torch_dtype="float32")
    kv = hidden // 4 * 2
    shapes = {"model.embed_tokens.weight": (len(tok), hidden), "model.norm.weight": (hidden,),
              "lm_head.weight": (len(tok), hidden)}
    for i in range(layers):
        at, mlp = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        shapes.update({at + "q_proj.weight": (hidden, hidden), at + "q_proj.bias": (hidden,),
                       at + "k_proj.weight": (kv, hidden), at + "k_proj.bias": (kv,),
                       at + "v_proj.weight": (kv, hidden), at + "v_proj.bias": (kv,),
                       at + "o_proj.weight": (hidden, hidden), mlp + "gate_proj.weight": (hidden * 2, hidden),
                       mlp + "up_proj.weight": (hidden * 2, hidden), mlp + "down_proj.weight": (hidden, hidden * 2),
                       f"model.layers.{i}.input_layernorm.weight": (hidden,),
                       f"model.layers.{i}.post_attention_layernorm.weight": (hidden,)})
    rng = np.random.default_rng(seed)
    weights = {name: (rng.normal(0, 0.3, shape) if name.endswith(("weight", "bias")) and not name.endswith(
        "norm.weight") else np.ones(shape)).astype(np.float32) for name, shape in shapes.items()}
    path.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def builtin_torch():
    from backends.torch.backend import TorchBackend

    return TorchBackend().load(BUILTIN_PATH, LoadOptions(device="cpu", dtype="float32"))


@pytest.fixture(scope="module")
def builtin_hf(builtin_torch):
    """transformers' own model of the same folder (ours is built without it: backends/torch/lean.py)."""
    from backends.baselines import plain_model

    return plain_model("torch", BUILTIN_PATH, builtin_torch).model


@pytest.fixture(scope="module")
def qwen2_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_qwen2(tmp_path_factory.mktemp("models") / "tiny-qwen2")


@pytest.fixture(scope="module")
def qwen2_torch(qwen2_path: Path):
    from backends.torch.backend import TorchBackend

    return TorchBackend().load(qwen2_path, LoadOptions(device="cpu", dtype="float32"))


@pytest.fixture(scope="module")
def qwen2_hf(qwen2_path: Path, qwen2_torch):
    from backends.baselines import plain_model

    return plain_model("torch", qwen2_path, qwen2_torch).model


def beam(model, ids, settings: BeamSettings, eos: frozenset[int] | None = None):
    events = list(run_beam(model, BeamRequest(prompt_ids=tuple(ids), settings=settings, eos_ids=eos),
                           threading.Event()))
    return [e.step for e in events if isinstance(e, BeamStepped)], events[-1]


def hf_beam(hf, ids, s: BeamSettings, eos: frozenset[int]):
    return hf.generate(
        torch.tensor([ids]), num_beams=s.width, num_return_sequences=s.width, length_penalty=s.length_penalty,
        early_stopping=s.early_stopping, no_repeat_ngram_size=s.no_repeat_ngram or None, do_sample=False,
        max_new_tokens=s.max_tokens, return_dict_in_generate=True, output_scores=True,
        eos_token_id=sorted(eos), pad_token_id=min(eos))


def assert_same_as_transformers(model, hf, ids, s: BeamSettings, eos: frozenset[int]) -> None:
    steps, done = beam(model, ids, s, eos)
    out = hf_beam(hf, ids, s, eos)
    hyps = done.result.hypotheses
    assert len(hyps) == s.width
    for i, h in enumerate(hyps):
        seq = out.sequences[i, len(ids):].tolist()
        assert list(h.tokens) == seq[: len(h.tokens)]
        assert seq[len(h.tokens):] == [min(eos)] * (len(seq) - len(h.tokens))  # transformers' padding after it
        assert h.score == pytest.approx(float(out.sequences_scores[i]), abs=2e-4, rel=1e-5)
        assert h.logprob / len(h.tokens) ** s.length_penalty == pytest.approx(h.score, rel=1e-5)
    assert len(out.scores) == len(steps) == done.result.steps  # the same number of steps: the same stop
    for step, scores in zip(steps, out.scores, strict=True):  # each considered token's log-probability
        for c in step.candidates:
            assert c.logprob == pytest.approx(float(scores[c.beam, c.token]), abs=1e-4)


CASES = [  # width, length penalty, early stopping, no-repeat n-gram, max tokens, end tokens (None: the tokenizer's)
    (2, 1.0, False, 0, 12, None),
    (3, 1.0, True, 0, 20, {SPACE}),
    (3, 1.0, False, 0, 20, {SPACE}),
    (3, 1.0, "never", 0, 20, {SPACE}),
    (4, 0.5, True, 2, 16, {SPACE, 0}),
    (4, -1.0, "never", 3, 10, None),
    (5, 2.0, "never", 0, 14, {SPACE}),
    (8, 0.0, False, 1, 8, None),
]


@pytest.mark.parametrize(("width", "penalty", "early", "ngram", "n", "eos"), CASES)
def test_builtin_model_matches_transformers(builtin_torch, builtin_hf, width, penalty, early, ngram, n, eos) -> None:
    ids = builtin_torch.tokenizer.encode(PROMPT)
    s = BeamSettings(width, penalty, early, ngram, n)
    eos_ids = frozenset(eos) if eos else builtin_torch.tokenizer.eos_ids
    assert_same_as_transformers(builtin_torch, builtin_hf, ids, s, eos_ids)


@pytest.mark.parametrize(("width", "penalty", "early"), [(2, 1.0, False), (4, 0.7, True), (6, 1.5, "never")])
def test_random_qwen2_matches_transformers(qwen2_torch, qwen2_hf, width, penalty, early) -> None:
    ids = qwen2_torch.tokenizer.encode("The quick brown")
    greedy = qwen2_hf.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=6)[0, len(ids):]
    eos = frozenset({int(greedy[3]), int(greedy[5])})  # tokens the model favours: some beams end early
    assert_same_as_transformers(qwen2_torch, qwen2_hf, ids, BeamSettings(width, penalty, early, 2, 12), eos)


def test_transformers_own_forward_and_cache_give_the_same(qwen2_path: Path) -> None:
    from backends.torch.backend import TorchBackend

    model = TorchBackend().load(qwen2_path, LoadOptions(device="cpu", dtype="float32", fast=False))
    assert model.fast is None
    ids = model.tokenizer.encode("The quick brown")
    assert_same_as_transformers(model, model.model, ids, BeamSettings(3, 1.0, False, 0, 8), model.tokenizer.eos_ids)


def test_the_early_stopping_rules_differ_where_transformers_says(builtin_torch) -> None:
    ids = builtin_torch.tokenizer.encode(PROMPT)
    ran = {early: beam(builtin_torch, ids, BeamSettings(3, 1.0, early, 0, 20), frozenset({SPACE}))[1].result
           for early in (True, False, "never")}
    assert ran[True].steps < ran[False].steps < ran["never"].steps  # stops at once / when hopeless / at max length
    assert all(h.reason == "eos" for r in ran.values() for h in r.hypotheses)


def test_width_one_is_greedy(builtin_torch) -> None:
    ids = builtin_torch.tokenizer.encode(PROMPT)
    _, done = beam(builtin_torch, ids, BeamSettings(1, 1.0, False, 0, 16))
    greedy = Request(prompt_ids=tuple(ids), settings=SamplerSettings(temperature=0.0, max_tokens=16, seed=1))
    trace = next(e for e in generate(builtin_torch, greedy, threading.Event()) if isinstance(e, Finished)).trace
    assert list(done.result.hypotheses[0].tokens) == trace.token_ids


@pytest.mark.parametrize("backend", ["mlx"])
def test_mlx_finds_the_same_beams(builtin_torch, backend) -> None:
    from backends.mlx.backend import MlxBackend

    mlx = MlxBackend().load(BUILTIN_PATH, LoadOptions(dtype="float32"))
    ids = builtin_torch.tokenizer.encode(PROMPT)
    for s, eos in [(BeamSettings(4, 1.0, False, 2, 12), None), (BeamSettings(3, 0.5, "never", 0, 16), {SPACE})]:
        eos = frozenset(eos) if eos else None
        (_, a), (_, b) = beam(builtin_torch, ids, s, eos), beam(mlx, ids, s, eos)
        assert [h.tokens for h in a.result.hypotheses] == [h.tokens for h in b.result.hypotheses]
        np.testing.assert_allclose([h.score for h in a.result.hypotheses], [h.score for h in b.result.hypotheses],
                                   atol=1e-3)


@pytest.mark.parametrize("backend", ["torch", "mlx", "transformers"])
def test_reorder_moves_rows_without_a_new_prefill(request: pytest.FixtureRequest, backend: str,
                                                  tiny_path: Path) -> None:
    if backend == "transformers":  # transformers' own forward and DynamicCache (the lean forward turned off)
        from backends.torch.backend import TorchBackend

        model = TorchBackend().load(tiny_path, LoadOptions(device="cpu", dtype="float32", fast=False))
    else:
        model = request.getfixturevalue(f"{backend}_model")
    ops = model.ops
    cache = model.new_cache()
    model.forward([[5, 6, 7]], cache)
    rows = model.fork(cache, 3)
    ops.numpy(model.forward([[10], [11], [12]], rows))
    model.reorder(rows, [2, 2, 0, 1])  # repeats allowed, and the batch size changes
    assert model.cache_len(rows) == 4
    got = ops.numpy(model.forward([[20], [21], [22], [23]], rows))
    for i, (first, then) in enumerate([(12, 20), (12, 21), (10, 22), (11, 23)]):
        fresh = model.new_cache()
        want = ops.numpy(model.forward([[5, 6, 7, first, then]], fresh))[0]
        np.testing.assert_allclose(got[i], want, atol=1e-4, err_msg=f"row {i}")


def test_no_repeat_ngram_bans_what_transformers_bans() -> None:
    assert banned_tokens([1, 2, 3, 1, 2], 3) == [3]
    assert banned_tokens([1, 2, 3, 1, 2], 1) == [1, 2, 3, 1, 2]
    assert banned_tokens([1, 2], 4) == []
    assert banned_tokens([4, 4, 4], 2) == [4, 4]


@pytest.mark.parametrize("bad", [dict(width=0), dict(width=9), dict(early_stopping="soon"),
                                 dict(no_repeat_ngram=-1), dict(max_tokens=0), dict(length_penalty=float("nan"))])
def test_bad_settings_say_which_in_one_line(bad: dict) -> None:
    with pytest.raises(SettingsError) as e:
        BeamSettings(**bad)
    assert "\n" not in str(e.value)


def test_a_server_model_is_refused_in_one_line(builtin_torch) -> None:
    from backends.base import SERVER

    class ServerModel:  # what the generator reads of a server's model: its capabilities and name
        capabilities, info, tokenizer = SERVER, builtin_torch.info, builtin_torch.tokenizer

    with pytest.raises(BeamRefusedError, match="server") as e:
        list(run_beam(ServerModel(), BeamRequest(prompt="x"), threading.Event()))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_the_model_thread_runs_it_and_a_hypothesis_opens_as_a_run(tiny_path: Path, backend: str) -> None:
    options = LoadOptions(device="cpu" if backend == "torch" else None, dtype="float32")
    spec = ModelSpec(source=str(tiny_path), backend=backend, options=options)
    worker, out = ModelThread(), queue.Queue()
    try:
        request = BeamRequest(model=spec, prompt="Hello", settings=BeamSettings(3, max_tokens=6))
        worker.start(Job("beam", (request,), out, status=worker.events))  # (its loading: with the window's)
        events = [out.get(timeout=60)]
        while not isinstance(events[-1], BeamFinished):
            events.append(out.get(timeout=60))
        started, done = events[0], events[-1]
        assert [e.step.step for e in events[1:-1]] == list(range(done.result.steps))
        best, steps = done.result.hypotheses[0], done.runs[0]
        assert [st.token_id for st in steps] == list(best.tokens)
        assert sum(st.sample.raw_logprob for st in steps) == pytest.approx(best.logprob, abs=1e-4)
        worker.submit(open_request(started, steps, spec))
        finished = None
        while finished is None:
            ev = worker.events.get(timeout=60)
            finished = ev if isinstance(ev, Finished) else None
        assert finished.trace.token_ids == list(best.tokens) and finished.trace.branch == "beam"
    finally:
        worker.close()


@pytest.mark.skipif(not installed("torch"), reason="torch backend not installed")
def test_the_command_line_prints_the_ranked_hypotheses(tiny_path: Path, capsys: pytest.CaptureFixture) -> None:
    import json

    from app.cli.main import main

    args = ["generate", "--model", str(tiny_path), "--backend", "torch", "--prompt", "Hello", "--beams", "3",
            "--max-tokens", "4", "--length-penalty", "0.5", "--early-stopping", "never"]
    assert main([*args, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    steps = [x for x in lines if x["type"] == "step"]
    hyps = [x for x in lines if x["type"] == "hypothesis"]
    assert [s["step"] for s in steps] == [0, 1, 2, 3] and [h["rank"] for h in hyps] == [0, 1, 2]
    assert sum(c["fate"] == "kept" for c in steps[1]["candidates"]) == 3
    assert [h["score"] for h in hyps] == sorted((h["score"] for h in hyps), reverse=True)
    for h in hyps:
        assert h["score"] == pytest.approx(h["logprob"] / len(h["tokens"]) ** 0.5, rel=1e-5)
    assert main(args) == 0
    text = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in text] == ["#1", "#2", "#3"]
    with pytest.raises(SystemExit) as e:
        main(["generate", "--prompt", "x", "--beams", "9"])
    assert e.value.code == 2 and "--beams" in capsys.readouterr().err
    assert main([*args, "--n", "2"]) == 2 and "without --n" in capsys.readouterr().err
