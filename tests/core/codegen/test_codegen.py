"""View code: the mlx-lm and transformers snippets, run on the built-in model (and a chat on the tiny model), draw
the app's own tokens; every engine says in a comment what it cannot express; the request bodies parse and hold
the settings."""

from __future__ import annotations

import contextlib
import io
import json
import re
import threading

import pytest

from app.core.codegen.snippets import (
    CodeRequest,
    llama_cpp,
    llama_cpp_body,
    mlx_lm,
    openai_body,
    openai_curl,
    openai_json,
    openai_python,
    snippets,
    transformers,
)
from app.core.decoding.generation import generate
from app.core.events import Message, Request, Step
from app.core.models.sources import BUILTIN_PATH, BUILTIN_THINKING_PATH
from app.core.settings import SamplerSettings, StageOrder
from backends import get_backend, installed
from backends.base import LoadOptions

FIRST, LAST = StageOrder.TEMPERATURE_FIRST, StageOrder.TEMPERATURE_LAST
PROMPT = "def fibonacci(n):"
# Settings that draw one token per step whatever the random stream, each through another path of the code:
CASES = {
    "greedy": SamplerSettings(temperature=0, max_tokens=24, seed=1),
    "penalties, top-p 0": SamplerSettings(temperature=0.9, top_p=0.0, repetition_penalty=1.3, frequency_penalty=0.5,
                                          presence_penalty=0.4, max_tokens=24, seed=1, stop=("\n\n",)),
    "filters first": SamplerSettings(temperature=0.7, top_k=1, top_p=0.9, min_p=0.05, repetition_penalty=1.1,
                                     max_tokens=24, seed=1, order=LAST),
    "temperature first": SamplerSettings(temperature=1.4, top_k=1, top_p=0.5, presence_penalty=0.7, max_tokens=24,
                                         seed=1, order=FIRST),
}
SNIPPET = {"torch": transformers, "mlx": mlx_lm}


@pytest.fixture(scope="module", params=["torch", "mlx"])
def engine(request: pytest.FixtureRequest):
    if not installed(request.param):
        pytest.skip(f"{request.param} is not installed")
    backend = get_backend(request.param)
    return request.param, backend, backend.load(BUILTIN_PATH, LoadOptions(dtype="float32"))


def app_text(model, settings: SamplerSettings, prompt: str = PROMPT, messages=None) -> str:
    req = Request(prompt=prompt, messages=messages, settings=settings)
    return "".join(e.text for e in generate(model, req, threading.Event()) if isinstance(e, Step))


def run(code: str) -> str:
    """Run a snippet as its own script would, and return what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<snippet>", "exec"), {"__name__": "__main__"})
    return out.getvalue()


@pytest.mark.parametrize("case", CASES)
def test_the_snippet_draws_the_app_s_tokens_on_the_builtin_model(engine, case: str):
    name, _, builtin = engine
    settings = CASES[case]
    want = app_text(builtin, settings)
    code = SNIPPET[name](CodeRequest(settings, PROMPT)).code
    assert len(want) > 20 and run(code) == want + "\n"


def test_a_chat_snippet_renders_the_template_as_the_app_does(engine, tiny_path):
    name, backend, _ = engine
    messages = (Message("system", "Be brief."), Message("user", "Hi there"))
    settings = CASES["greedy"]
    want = app_text(backend.load(tiny_path, LoadOptions(dtype="float32")), settings, "", messages)
    code = SNIPPET[name](CodeRequest(settings, messages=messages, model=str(tiny_path))).code
    assert "apply_chat_template" in code and run(code) == want + "\n"


def test_a_chat_snippet_with_thinking_off_tells_the_template_as_the_app_does(engine):
    name, backend, _ = engine
    messages = (Message("user", "478+385"),)
    settings = CASES["greedy"].with_(think=False)
    want = app_text(backend.load(BUILTIN_THINKING_PATH, LoadOptions(dtype="float32")), settings, "", messages)
    code = SNIPPET[name](CodeRequest(settings, messages=messages, model=str(BUILTIN_THINKING_PATH))).code
    assert "enable_thinking=False" in code and run(code) == want + "\n"


def comments(code: str) -> str:
    return " ".join(line.strip() for line in code.splitlines() if line.strip().startswith("#"))


def test_what_cannot_be_expressed_is_said_where_it_applies():
    s = SamplerSettings(temperature=0.8, top_k=40, top_p=0.9, min_p=0.05, frequency_penalty=0.2, seed=7, order=LAST)
    req = CodeRequest(s, PROMPT)
    assert "kept set can differ" in comments(mlx_lm(req).code)  # its top-p runs before its top-k
    assert "temperature last cannot be expressed" in comments(openai_python(req).code)
    assert "temperature last cannot be expressed" in comments(openai_curl(req).code)
    assert any("temperature last cannot" in n for n in openai_json(req).notes)
    assert "min-p before top-k and top-p" in comments(openai_python(req).code)
    assert "count the prompt's tokens too" in comments(llama_cpp(req).code)
    for sn in (mlx_lm(req), transformers(req), openai_python(req), llama_cpp(req)):
        assert "seed 7" in comments(sn.code) and "not the same tokens" in comments(sn.code)
    assert "seed" not in comments(mlx_lm(CodeRequest(s.with_(temperature=0), PROMPT)).code)  # greedy: no draw


def test_settings_an_engine_expresses_exactly_carry_no_warning():
    req = CodeRequest(SamplerSettings(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, seed=3, order=FIRST), PROMPT)
    assert "temperature" not in comments(transformers(req).code).replace("seed", "")  # generate()'s own order
    assert "temperature last" not in comments(openai_python(req).code)
    last = CodeRequest(req.settings.with_(order=LAST, top_p=1.0), PROMPT)
    assert "temperature" not in comments(mlx_lm(last).code)  # mlx-lm's own order, no top-p vs top-k


def test_top_p_zero_is_written_as_greedy_and_said_so():
    req = CodeRequest(SamplerSettings(temperature=0.8, top_p=0.0, seed=2), PROMPT)
    assert "make_sampler(temp=0.0)" in mlx_lm(req).code and "top_p 0 keeps one token" in mlx_lm(req).code
    assert "do_sample=False" in transformers(req).code
    assert openai_body(req)[0]["temperature"] == 0 and openai_body(req)[0]["top_p"] == 1  # as the app sends it
    assert llama_cpp_body(req)["temperature"] == 0


def heredoc_json(code: str) -> dict:
    return json.loads(re.search(r"<<'JSON'\n(.*)\nJSON\n", code, re.S).group(1))


@pytest.mark.parametrize("order", [FIRST, LAST])
def test_llama_cpp_gets_every_value_and_the_app_s_stage_order(order: StageOrder):
    s = SamplerSettings(temperature=0.6, top_k=12, top_p=0.8, min_p=0.1, repetition_penalty=1.2,
                        frequency_penalty=0.1, presence_penalty=0.3, max_tokens=50, seed=11, stop=("```",), order=order)
    body = heredoc_json(llama_cpp(CodeRequest(s, PROMPT)).code)
    assert body == llama_cpp_body(CodeRequest(s, PROMPT))
    assert (body["temperature"], body["top_k"], body["top_p"], body["min_p"]) == (0.6, 12, 0.8, 0.1)
    assert (body["repeat_penalty"], body["repeat_last_n"], body["n_predict"], body["seed"]) == (1.2, -1, 50, 11)
    stages = ["top_k", "top_p", "min_p"]
    assert body["samplers"] == ["penalties", *([*stages, "temperature"] if order == LAST else ["temperature", *stages])]


def test_openai_bodies_parse_and_carry_logprobs_in_both_modes():
    s = SamplerSettings(temperature=0.6, top_k=12, top_p=0.8, repetition_penalty=1.2, max_tokens=50, seed=11)
    completion = CodeRequest(s, PROMPT)
    chat = CodeRequest(s, messages=(Message("user", 'say "hi"'),))
    body, extra = openai_body(completion)
    assert json.loads(openai_json(completion).code) == {**body, **extra} == heredoc_json(openai_curl(completion).code)
    assert body["logprobs"] == 20 and extra == {"top_k": 12, "repetition_penalty": 1.2} and "min_p" not in extra
    cbody, _ = openai_body(chat)
    assert cbody["messages"] == [{"role": "user", "content": 'say "hi"'}] and cbody["top_logprobs"] == 20
    assert cbody["logprobs"] is True and "/chat/completions" in openai_curl(chat).code
    for req in (completion, chat):
        compile(openai_python(req).code, "<snippet>", "exec")


def test_every_snippet_is_there_and_python_ones_compile():
    req = CodeRequest(SamplerSettings(temperature=0.8, top_k=5, stop=("\n",), seed=1), "x = '''\\n")
    got = snippets(req)
    assert [s.title for s in got] == ["mlx-lm", "transformers", "OpenAI JSON", "OpenAI Python", "curl", "llama.cpp"]
    for sn in got:
        if sn.language == "python":
            compile(sn.code, sn.title, "exec")
