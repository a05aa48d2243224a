"""The think budget and thinking off in other engines' words: sent to llama.cpp's server as its reasoning_budget (hard
only; off as -1, thinking off as 0) and to vLLM's and llama.cpp's chat as chat_template_kwargs, read from a request by
the local server under llama.cpp's, vLLM's and Qwen's names, and kept in a preset."""

from __future__ import annotations

import pytest

from app.core.remote.server_request import DIALECTS, request_fields
from app.core.sampler.presets import Preset, dumps, loads
from app.core.settings import SamplerSettings
from app.serve.fields import RequestError, read_sampling


def test_llama_cpp_gets_a_hard_budget_as_reasoning_budget_and_minus_one_otherwise():
    llama = DIALECTS["llama.cpp"]
    assert request_fields(SamplerSettings(think_budget=64), 0, dialect=llama)["reasoning_budget"] == 64
    assert request_fields(SamplerSettings(), 0, dialect=llama)["reasoning_budget"] == -1
    assert request_fields(SamplerSettings(think_budget=64, think_soft=True), 0, dialect=llama)["reasoning_budget"] == -1
    for name in ("vllm", "mlx_lm", "openai"):  # servers without a budget field are not sent one
        assert "reasoning_budget" not in request_fields(SamplerSettings(think_budget=64), 0, dialect=DIALECTS[name])


@pytest.mark.parametrize("field", ["reasoning_budget", "thinking_budget", "think_budget"])
def test_the_local_server_takes_a_budget_under_each_name(field):
    got = read_sampling({field: 32, "think_soft": True}, (), 64, 100)
    assert (got.settings.think_budget, got.settings.think_soft, got.ignored) == (32, True, ())


def test_llama_cpp_s_off_is_no_budget_and_its_zero_is_no_thinking():
    off = read_sampling({"reasoning_budget": -1}, (), 64, 100).settings
    assert (off.think_budget, off.think) == (0, True)
    zero = read_sampling({"reasoning_budget": 0}, (), 64, 100)
    assert (zero.settings.think_budget, zero.settings.think, zero.ignored) == (0, False, ())
    with pytest.raises(RequestError, match="think_soft must be true or false"):
        read_sampling({"think_soft": "yes"}, (), 64, 100)


@pytest.mark.parametrize("body", [{"chat_template_kwargs": {"enable_thinking": False}}, {"enable_thinking": False},
                                  {"thinking_budget": 0}])
def test_thinking_off_is_read_as_vllm_llama_cpp_and_qwen_s_api_send_it(body):
    got = read_sampling(body, (), 64, 100)
    assert (got.settings.think, got.ignored) == (False, ())


def test_other_template_variables_are_said_not_applied_and_a_bad_switch_is_refused():
    got = read_sampling({"chat_template_kwargs": {"enable_thinking": True, "tools_style": "x"}}, (), 64, 100)
    assert got.settings.think and got.ignored == ("chat_template_kwargs.tools_style",)
    with pytest.raises(RequestError, match=r"chat_template_kwargs\.enable_thinking must be true or false"):
        read_sampling({"chat_template_kwargs": {"enable_thinking": "no"}}, (), 64, 100)


def test_thinking_off_is_sent_as_each_server_takes_it():
    off = SamplerSettings(think=False)
    llama, vllm = DIALECTS["llama.cpp"], DIALECTS["vllm"]
    assert request_fields(off, 0, dialect=llama)["reasoning_budget"] == 0
    for dialect in (llama, vllm):
        assert request_fields(off, 0, dialect=dialect, chat=True)["chat_template_kwargs"] == {"enable_thinking": False}
        assert "chat_template_kwargs" not in request_fields(SamplerSettings(), 0, dialect=dialect, chat=True)
    assert "chat_template_kwargs" not in request_fields(off, 0, dialect=DIALECTS["openai"], chat=True)


def test_a_preset_keeps_the_budget_and_the_markers():
    s = SamplerSettings(think_budget=48, think_soft=True, think_markers=("<reason>", "</reason>"))
    back = loads(dumps([Preset("thinker", s)]))[0]
    assert back.matches(s) and back.apply(SamplerSettings()).think_markers == ("<reason>", "</reason>")
    assert (back.settings.think_budget, back.settings.think_soft) == (48, True)
