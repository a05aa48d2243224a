"""`logitlab serve` on the built-in thinking model, as an app sees it through the official `openai` client: the think
span comes back in `reasoning_content` and the answer in `content` (whole and streamed, as llama.cpp's and vLLM's
reasoning parsers send them), and thinking off (llama.cpp's reasoning_budget 0, vLLM's chat_template_kwargs) renders
the template's empty span. Greedy: every outcome is the model's own."""

from __future__ import annotations

import httpx
import pytest

from app.core.models.arithmetic import EMPTY_THINK, Problem, trace
from app.core.models.sources import BUILTIN_THINKING_NAME, ModelSpec
from app.core.session import session_file
from app.serve.host import Host, Keeper
from app.serve.server import Server
from backends.base import LoadOptions
from tests.e2e.test_serve import kept_runs

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.needs("torch")
SUM = Problem(478, 385)
ASK = dict(model=BUILTIN_THINKING_NAME, messages=[{"role": "user", "content": SUM.question}], temperature=0,
           max_tokens=96)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    spec = ModelSpec(source=BUILTIN_THINKING_NAME, backend="torch", options=LoadOptions(device="cpu", dtype="float32"))
    path = tmp_path_factory.mktemp("serve") / "runs.jsonl"
    host = Host(spec, Keeper(path, spec))
    host.load()
    server = Server(host).start()
    yield server, path
    server.stop()
    host.close()


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[0].url, api_key="none", max_retries=0)


@pytest.fixture(scope="module")
def whole(client):
    return client.chat.completions.create(**ASK, logprobs=True)


def test_the_think_span_comes_back_as_reasoning_content_and_the_answer_as_content(whole, served):
    message = whole.choices[0].message
    assert message.model_extra["reasoning_content"].strip() == "\n".join(trace(SUM))  # the carries, worked
    assert message.content == SUM.answer
    run_id = whole.model_extra["logitlab"]["run_ids"][0]
    (kept,) = kept_runs(served[1], [run_id])
    assert [s.text for s in kept.steps[:1]] == ["<think>"]  # the run keeps the markers; the fields do not
    assert len(whole.choices[0].logprobs.content) == whole.usage.completion_tokens  # every token's, markers included


def test_a_stream_sends_the_same_span_and_answer_delta_by_delta(client, whole):
    chunks = [c for c in client.chat.completions.create(**ASK, logprobs=True, stream=True) if c.choices]
    deltas = [c.choices[0].delta for c in chunks]
    reasoning = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    assert reasoning == whole.choices[0].message.model_extra["reasoning_content"]
    assert "".join(d.content or "" for d in deltas) == whole.choices[0].message.content
    entries = [e for c in chunks if c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.logprob for e in entries] == pytest.approx([e.logprob for e in whole.choices[0].logprobs.content],
                                                         abs=1e-5)


@pytest.mark.parametrize("off", [{"reasoning_budget": 0}, {"chat_template_kwargs": {"enable_thinking": False}}])
def test_thinking_off_renders_the_empty_span_and_answers_at_once(client, served, off):
    r = client.chat.completions.create(**ASK, extra_body=off)
    assert r.model_extra["logitlab"]["ignored"] == []
    assert r.choices[0].message.model_extra["reasoning_content"] is None and r.choices[0].message.content.isdigit()
    (kept,) = kept_runs(served[1], r.model_extra["logitlab"]["run_ids"])
    assert kept.prompt_text.endswith(EMPTY_THINK) and {s.span for s in kept.steps} == {"answer"}
    assert r.usage.completion_tokens < 8  # an answer of a few digits, no span


def test_reasoning_format_none_keeps_the_span_in_content(served, whole):
    body = {**ASK, "reasoning_format": "none"}
    message = httpx.post(served[0].url + "/chat/completions", json=body, timeout=30).json()["choices"][0]["message"]
    assert "reasoning_content" not in message and message["content"].startswith("<think>")
    assert message["content"].endswith(SUM.answer)


def test_the_session_file_still_opens(served):
    assert session_file.load(served[1]).runs  # (what the server kept is a session the window opens)
