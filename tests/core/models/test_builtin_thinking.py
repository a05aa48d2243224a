"""The built-in thinking model: a name every command takes, a Qwen3-style chat template and think markers, and its
held-out accuracy with and without thinking reproduced through Logit Lab's own greedy decoding."""

from __future__ import annotations

import json
import random

import pytest

from app.core.models import sources
from app.core.models.arithmetic import (
    EMPTY_THINK,
    Problem,
    draw,
    draw_for_training,
    held_out,
    held_out_set,
    prompt_text,
    read_answer,
    trace,
)
from app.core.models.catalog import builtin_thinking_entry
from app.core.models.sources import BUILTIN_THINKING_NAME, BUILTIN_THINKING_PATH, resolve
from backends import installed
from backends.base import ModelLoadError

RECORDED = json.loads((BUILTIN_THINKING_PATH / "training.json").read_text())


def test_it_is_shipped_under_its_name(monkeypatch, tmp_path):
    assert resolve(BUILTIN_THINKING_NAME) == BUILTIN_THINKING_PATH
    entry = builtin_thinking_entry()
    assert entry is not None and entry.source == BUILTIN_THINKING_NAME and 0 < entry.size_bytes < 10 * 2**20
    monkeypatch.setitem(sources.SHIPPED, BUILTIN_THINKING_NAME, tmp_path / "gone")
    with pytest.raises(ModelLoadError, match=r"the built-in thinking model is missing from .*gone: reinstall"):
        resolve(BUILTIN_THINKING_NAME)


def test_the_think_trace_works_the_columns_and_carries():
    assert trace(Problem(47, 38)) == ["7+8=15, carry 1: 5", "4+3+1=8: 85"]
    assert trace(Problem(995, 7)) == ["5+7=12, carry 1: 2", "9+0+1=10, carry 1: 02", "9+0+1=10, carry 1: 002",
                                      "carry 1: 1002"]
    assert read_answer("<think>\n7+8=15, carry 1: 5\n</think>\n\n85<|im_end|>") == "85"
    assert read_answer("85") == "85"


def test_the_held_out_set_is_fixed_distinct_and_never_drawn_for_training():
    problems = held_out()
    assert len(set(problems)) == len(problems) == RECORDED["held_out"]["problems"]
    assert problems[0] == Problem(12, 908)  # the same on every run: a seeded random.Random
    plain, training = random.Random(0), random.Random(0)
    assert any(draw(plain) in held_out_set() for _ in range(20_000))  # a few one-digit sums are held out
    assert not any(draw_for_training(training) in held_out_set() for _ in range(20_000))


def test_the_chat_template_renders_qwen3_style_with_and_without_thinking():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(BUILTIN_THINKING_PATH)
    chat = [{"role": "user", "content": "47+38"}]
    for thinking in (True, False):
        text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True, enable_thinking=thinking)
        assert text == prompt_text("47+38", thinking)
    assert prompt_text("47+38", False).endswith(EMPTY_THINK) and tok.eos_token == "<|im_end|>"
    assert tok.convert_ids_to_tokens(tok.encode("<think>123</think>", add_special_tokens=False)) == \
        ["<think>", "1", "2", "3", "</think>"]  # the markers are tokens, each digit is one


@pytest.fixture(scope="module", params=["torch", "mlx"])
def thinking_model(request: pytest.FixtureRequest):
    if not installed(request.param):
        pytest.skip(f"{request.param} backend not installed")
    from app.core.decoding.accuracy import EVAL_OPTIONS
    from backends import get_backend

    return request.param, get_backend(request.param).load(BUILTIN_THINKING_PATH, EVAL_OPTIONS)


def test_the_recorded_accuracy_is_reproduced_with_and_without_thinking(thinking_model):
    from app.core.decoding.accuracy import score

    backend, model = thinking_model
    subset = held_out()[: RECORDED["test_subset"]["problems"]]
    recorded = RECORDED["test_subset"]["correct"][backend]
    thinking, direct = score(model, subset, thinking=True), score(model, subset, thinking=False)
    # Greedy decoding of the same float32 weights on this CPU: the very figures the training script recorded
    assert (thinking.correct, direct.correct) == (recorded["thinking"], recorded["direct"])
    assert thinking.correct > direct.correct  # thinking pays on the same model


def test_thinking_off_renders_the_empty_span_and_answers_directly_with_the_recorded_figure(thinking_model):
    """The chat as the window, the CLI (--no-think) and the server send it, with the settings' `think` off: the
    template is told enable_thinking=False, the run starts in the answer, and the answers are the direct ones the
    training script recorded (the same figure on the 40-problem subset)."""
    import threading

    from app.core.decoding.accuracy import MAX_TOKENS
    from app.core.decoding.generation import generate
    from app.core.events import Message, Prefilled, Request, Step
    from app.core.settings import SamplerSettings

    backend, model = thinking_model
    subset = held_out()[: RECORDED["test_subset"]["problems"]]
    settings = SamplerSettings(temperature=0.0, max_tokens=MAX_TOKENS, seed=0, think=False)
    right = 0
    for p in subset:
        request = Request(messages=(Message("user", p.question),), settings=settings)
        events = list(generate(model, request, threading.Event()))
        (prefilled,) = [e for e in events if isinstance(e, Prefilled)]
        steps = [e for e in events if isinstance(e, Step)]
        assert prefilled.prompt_text == prompt_text(p.question, thinking=False)  # ...<think>\n\n</think>\n\n
        assert {s.trace.span for s in steps} == {"answer"} and not any(s.trace.forced for s in steps)
        right += read_answer(model.tokenizer.decode([s.token_id for s in steps])) == p.answer
    assert right == RECORDED["test_subset"]["correct"][backend]["direct"]
