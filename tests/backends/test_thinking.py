"""Thinking models on tiny random models made here with Qwen3's and gpt-oss's markers and templates, through both real
loaders: the markers read from the tokenizer, the span labelled as a run draws, the hard budget closing the span at
exactly N, the soft budget's record, probes equal to a fork made by hand, MLX = torch; a server's reasoning field
becomes the think span; `logitlab generate --think-probes` prints them."""

from __future__ import annotations

import json
import threading
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from app.core.decoding.generation import Prefix, generate
from app.core.decoding.probes import ProbeError, ProbeRequest, ProbesDone, run_probes
from app.core.events import Finished, Message, Request
from app.core.models.sources import ModelSpec
from app.core.record.spans import find_markers, has_think_switch, template_options
from app.core.remote.remote_run import load_remote
from app.core.sampler.think_budget import soft_raise
from app.core.settings import SamplerSettings
from backends import installed
from backends.base import LoadOptions
from tests.remote_fake import entry, fake_server
from tests.thinking import make_thinking_model

OPENERS = {"qwen3": "<think>\n", "gpt-oss": "<|channel|>analysis<|message|>"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("thinking")
    return {family: make_thinking_model(root / family, family) for family in OPENERS}


def _load(backend: str, path: Path):
    if not installed(backend):
        pytest.skip(f"{backend} backend not installed")
    if backend == "torch":
        from backends.torch.backend import TorchBackend

        return TorchBackend().load(path, LoadOptions(device="cpu", dtype="float32"))
    from backends.mlx.backend import MlxBackend

    return MlxBackend().load(path, LoadOptions(dtype="float32"))


@pytest.fixture(scope="module")
def models(folders: dict[str, Path]) -> dict[tuple[str, str], object]:
    """Each family on each installed backend, loaded once."""
    return {(b, f): _load(b, p) for b in ("torch", "mlx") if installed(b) for f, p in folders.items()}


def _model(models: dict, backend: str, family: str):
    if (backend, family) not in models:
        pytest.skip(f"{backend} backend not installed")
    return models[backend, family]


def _thinking_prompt(model, family: str) -> tuple[int, ...]:
    """A chat prompt whose assistant turn has opened its think span (as Qwen3-2507's and R1's templates do)."""
    text = model.tokenizer.apply_chat_template([{"role": "user", "content": "47+38"}]) + OPENERS[family]
    return tuple(model.tokenizer.encode(text, add_special_tokens=False))


def _run(model, ids: tuple[int, ...], s: SamplerSettings, prefix: Prefix | None = None, **kw):
    events = generate(model, Request(prompt_ids=ids, settings=s, ignore_eos=True, **kw), threading.Event(),
                      prefix or Prefix())
    return next(e for e in events if isinstance(e, Finished)).trace


@pytest.mark.parametrize("family", list(OPENERS))
def test_a_template_with_the_switch_is_told_thinking_is_off_alike_by_both_tokenizers(folders, family):
    from backends.hf.lean import lean_tokenizer
    from backends.hf.tokenizer import load_tokenizer

    hf, lean = load_tokenizer(folders[family], LoadOptions()), lean_tokenizer(folders[family], LoadOptions())
    assert lean is not None
    chat = [{"role": "user", "content": "47+38"}]
    off = hf.apply_chat_template(chat, template_options(False))
    for tok in (hf, lean):
        assert has_think_switch(tok) == (family == "qwen3")  # (gpt-oss's template has no enable_thinking)
        assert tok.apply_chat_template(chat, template_options(False)) == off
        assert tok.apply_chat_template(chat, template_options(True)) == tok.apply_chat_template(chat)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") == (family == "qwen3")


@pytest.mark.parametrize("family", list(OPENERS))
def test_markers_are_read_from_the_tokenizer_and_its_template(models, family):
    tok = _model(models, "torch" if installed("torch") else "mlx", family).tokenizer
    m = find_markers(tok)
    text = lambda ids: "".join(tok.token_text(i) for i in ids)
    if family == "qwen3":
        assert (m.family, text(m.open), text(m.close), text(m.answer)) == ("think-tags", "<think>", "</think>", "\n\n")
        assert text(m.tool_open) == "<tool_call>"
    else:  # the gap between the close and the answer: rendered by the model's own template
        assert (m.family, text(m.open), text(m.close)) == ("gpt-oss", "<|channel|>analysis<|message|>", "<|end|>")
        assert text(m.answer) == "<|start|>assistant<|channel|>final<|message|>"
    assert find_markers(tok, ("[[", "]]")).family == "custom"


@pytest.mark.parametrize("family", list(OPENERS))
def test_the_hard_budget_closes_the_span_at_exactly_n_and_mlx_draws_what_torch_draws(models, family):
    n = 6
    traces = {}
    for backend in ("torch", "mlx"):
        if (backend, family) not in models:
            continue
        model = models[backend, family]
        close = find_markers(model.tokenizer).close
        # the model may never close the span itself (its marker biased away): the budget must
        s = SamplerSettings(temperature=1.0, seed=7, max_tokens=n + 5, think_budget=n,
                            logit_bias=((close[0], -100.0),))
        trace = traces[backend] = _run(model, _thinking_prompt(model, family), s)
        labels = [st.span for st in trace.steps]
        assert labels[:n + 1] == ["think"] * (n + 1) and set(labels[n + 1:]) == {"answer"}
        assert trace.token_ids[n] == close[0] and trace.steps[n].forced == "budget"
        assert [st.forced for st in trace.steps].count("budget") == len(close)
    if len(traces) == 2:
        assert traces["torch"].token_ids == traces["mlx"].token_ids
        for a, b in zip(traces["torch"].steps, traces["mlx"].steps, strict=True):
            np.testing.assert_allclose(a.sample.probs, b.sample.probs, atol=2e-4)


@pytest.mark.parametrize("family", list(OPENERS))
def test_with_thinking_off_a_span_the_prompt_opened_is_closed_at_the_first_step(models, family):
    model = _model(models, "torch" if installed("torch") else "mlx", family)
    close = find_markers(model.tokenizer).close
    s = SamplerSettings(temperature=1.0, seed=7, max_tokens=len(close) + 3, think=False,
                        logit_bias=((close[0], -100.0),))  # (the model would never close it itself)
    trace = _run(model, _thinking_prompt(model, family), s)
    assert trace.token_ids[: len(close)] == list(close)
    assert [st.forced for st in trace.steps] == ["budget"] * len(close) + [""] * 3
    assert {st.span for st in trace.steps[len(close):]} == {"answer"}


def test_the_soft_budget_records_its_raise_step_by_step_and_never_forces(models):
    model = _model(models, "torch" if installed("torch") else "mlx", "qwen3")
    s = SamplerSettings(temperature=1.0, seed=3, max_tokens=12, think_budget=4, think_soft=True)
    trace = _run(model, _thinking_prompt(model, "qwen3"), s)
    think = [st for st in trace.steps if st.span == "think"]
    raises = [float(st.sample.thresholds[st.sample.stage_index("think_budget")]) for st in think]
    assert raises == pytest.approx([soft_raise(i, 4) for i in range(len(think))], abs=1e-5)
    assert not any(st.forced for st in trace.steps)


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_probes_equal_a_fork_made_by_hand(models, backend):
    model = _model(models, backend, "qwen3")
    ids = _thinking_prompt(model, "qwen3")
    close = find_markers(model.tokenizer)
    prefix = Prefix()
    run = _run(model, ids, SamplerSettings(temperature=1.0, seed=5, max_tokens=9,
                                           logit_bias=((close.close[0], -100.0),)), prefix)
    request = ProbeRequest(prompt_ids=ids, tokens=tuple(run.token_ids), every=4, at=(3,), answers=("85", "8 5"))
    done = list(run_probes(model, request, threading.Event(), prefix))[-1]
    assert isinstance(done, ProbesDone)
    assert [(p.step, p.think_tokens) for p in done.probes] == [(0, 0), (3, 3), (4, 4), (8, 8), (9, 9)]
    for p in done.probes[::2]:
        by_hand = ids + tuple(run.token_ids[: p.step]) + close.closing
        first = _run(model, by_hand, SamplerSettings(temperature=0, max_tokens=2), top_n=20)
        raw = first.steps[0].sample
        np.testing.assert_array_equal(raw.top_ids[:20], p.top_ids)
        np.testing.assert_allclose(raw.top_logits[:20] - raw.raw_lse, p.top_logprobs, atol=1e-4)
        answer = model.tokenizer.encode("85", add_special_tokens=False)
        if len(answer) == 1:  # the answer's first token's log-probability, read by hand
            assert p.answer_logprobs[0] == pytest.approx(float(
                raw.top_logits[np.flatnonzero(raw.top_ids == answer[0])[0]] - raw.raw_lse), abs=1e-4)
    assert p.answer_probs.sum() == pytest.approx(1.0)


def test_a_run_without_a_think_span_cannot_be_probed(models):
    model = _model(models, "torch" if installed("torch") else "mlx", "qwen3")
    with pytest.raises(ProbeError, match="no think span"):
        list(run_probes(model, ProbeRequest(prompt_ids=(5, 6), tokens=(7, 8)), threading.Event()))


def _reasoning_server(h, body):
    """A reasoning parser's stream (llama.cpp, vLLM): the think span as `reasoning_content`, then the answer."""
    h.start_stream()
    for key, tok in (("reasoning_content", "r0"), ("reasoning_content", "r1"), ("content", "a0"), ("content", "a1")):
        h.event({"object": "chat.completion.chunk", "choices": [{"index": 0, "finish_reason": None,
                 "delta": {key: tok}, "logprobs": {"content": [entry(tok, -0.5, [(tok, -0.5), ("z", -1.5)])]}}]})
    h.event({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    h.end_stream()


def test_a_server_s_reasoning_field_becomes_the_think_span_with_its_log_probabilities():
    with fake_server(_reasoning_server) as srv, closing(load_remote(
            ModelSpec(source="fake-model", backend="remote", base_url=srv.url), timeout=5.0)) as model:
        request = Request(messages=(Message("user", "hi"),), settings=SamplerSettings(temperature=0, max_tokens=8))
        trace = next(e for e in generate(model, request, threading.Event()) if isinstance(e, Finished)).trace
    assert [(st.text, st.span) for st in trace.steps] == [("r0", "think"), ("r1", "think"), ("a0", "answer"),
                                                          ("a1", "answer")]
    assert all(st.drawn_prob[0] == pytest.approx(np.exp(-0.5)) for st in trace.steps)  # each its own entry's


def test_cli_think_probes_print_each_probe_as_json(folders, capsys):
    from app.cli.main import main

    backend = "torch" if installed("torch") else "mlx"
    code = main(["generate", "--model", str(folders["qwen3"]), "--backend", backend, "--prompt", "47+38 <think>",
                 "--max-tokens", "8", "--seed", "1", "--think-budget", "4", "--think-probes", "2", "--answers", "85,86",
                 "--json"])  # (the prompt opens the span: the random model thinks until the budget closes it)
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    probes = [o["probe"] for o in out if "probe" in o]
    assert probes and all(len(p["answers"]) == 2 and abs(sum(a["prob"] for a in p["answers"]) - 1) < 1e-6
                          for p in probes)
    assert [p["think_tokens"] for p in probes][:2] == [0, 2]
    assert out[-1]["probes_summary"]["probes"] == len(probes)


def test_probes_on_mlx_equal_torch_s(models):
    if ("torch", "qwen3") not in models or ("mlx", "qwen3") not in models:
        pytest.skip("needs both backends")
    done = {}
    for backend in ("torch", "mlx"):
        model = models[backend, "qwen3"]
        ids = _thinking_prompt(model, "qwen3")
        tokens = tuple(range(40, 52))  # the same think span on both: no draw involved
        done[backend] = list(run_probes(model, ProbeRequest(prompt_ids=ids, tokens=tokens, every=3,
                                                            answers=("85", "86")), threading.Event()))[-1]
    for a, b in zip(done["torch"].probes, done["mlx"].probes, strict=True):
        assert a.step == b.step
        np.testing.assert_allclose(a.top_logprobs, b.top_logprobs, atol=2e-4)
        np.testing.assert_allclose(a.answer_logprobs, b.answer_logprobs, atol=2e-4)


def test_on_the_built_in_thinking_model_the_answer_sharpens_to_the_right_one():
    from app.core.models.sources import BUILTIN_THINKING_PATH

    model = _load("torch" if installed("torch") else "mlx", BUILTIN_THINKING_PATH)
    text = model.tokenizer.apply_chat_template([{"role": "user", "content": "478+385"}])
    ids = tuple(model.tokenizer.encode(text, add_special_tokens=False))
    prefix = Prefix()
    run = _run(model, ids, SamplerSettings(temperature=0, max_tokens=60), prefix)
    assert run.text.split("</think>")[1].strip().startswith("863")
    done = list(run_probes(model, ProbeRequest(prompt_ids=ids, tokens=tuple(run.token_ids), every=8,
                                               answers=("863", "853", "763")), threading.Event(), prefix))[-1]
    first, last = done.probes[0], done.probes[-1]
    assert last.leading == "863" and last.answer_probs[0] > 0.99 > first.answer_probs[0]
    assert done.settled is not None and done.settled > first.step


def test_cli_no_think_renders_the_empty_span_and_closes_one_the_model_opens(folders, capsys):
    from app.cli.main import main

    backend = "torch" if installed("torch") else "mlx"
    common = ["generate", "--model", str(folders["qwen3"]), "--backend", backend, "--max-tokens", "4", "--seed", "1",
              "--no-think", "--json", "--logit-bias", "<think>=100"]  # (it opens a span at once: closed at once)
    assert main([*common, "--chat", "--prompt", "47+38"]) == 0
    *steps, summary = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(s["text"], s["span"], s["forced"]) for s in steps[:2]] == [("<think>", "think", None),
                                                                         ("</think>", "think", "budget")]
    on = [a for a in common if a != "--no-think"]
    assert main([*on, "--chat", "--prompt", "47+38"]) == 0
    thinking = json.loads(capsys.readouterr().out.splitlines()[-1])
    from backends.hf.tokenizer import load_tokenizer

    empty = load_tokenizer(folders["qwen3"], LoadOptions()).encode("<think>\n\n</think>\n\n", add_special_tokens=False)
    assert summary["prompt_tokens"] - thinking["prompt_tokens"] == len(empty)  # the template's empty span
    assert main([*common[:-2], "--beams", "2", "--think-budget", "3", "--chat", "--prompt", "47+38"]) == 2
    assert "leave out --beams" in capsys.readouterr().err
