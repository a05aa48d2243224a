"""`logitlab serve`, as an app sees it: the official `openai` client and raw httpx against the server started in
this process on a free port of 127.0.0.1, over the tiny model (torch, CPU). Every outcome is seeded."""

from __future__ import annotations

import json
import math
import time

import httpx
import pytest

from app.core.decoding.surprisal import score
from app.core.models.sources import ModelSpec
from app.core.session import session_file
from app.serve.host import Host, Keeper
from app.serve.server import Server, check_exposure
from backends.base import LoadOptions

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.needs("torch")
CHAT = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def served(tiny_path, tmp_path_factory):
    spec = ModelSpec(source=str(tiny_path), backend="torch", options=LoadOptions(device="cpu", dtype="float32"))
    path = tmp_path_factory.mktemp("serve") / "runs.jsonl"
    host = Host(spec, Keeper(path, spec))
    host.load()
    server = Server(host).start()
    yield server, host, path
    server.stop()
    host.close()


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[0].url, api_key="none", max_retries=0)


def kept_runs(path, run_ids, wait=10.0):
    """The session file's traces of these runs, once all are written."""
    deadline = time.monotonic() + wait
    while True:
        if path.exists():
            runs = {r.id: r.trace for r in session_file.load(path).runs}
            if all(r in runs for r in run_ids):
                return [runs[r] for r in run_ids]
        assert time.monotonic() < deadline, f"runs {run_ids} were not kept in {path}"
        time.sleep(0.05)


def test_models_lists_the_served_model(client, served):
    assert [m.id for m in client.models.list()] == [served[1].name]


def test_chat_with_a_seed_repeats_and_n_gives_n_choices(client):
    ask = dict(model="tiny", messages=CHAT, max_tokens=6, seed=7, n=3, logprobs=True, top_logprobs=3)
    a, b = client.chat.completions.create(**ask), client.chat.completions.create(**ask)
    assert len(a.choices) == 3
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert len({c.message.content for c in a.choices}) > 1  # sample i draws with seed + i
    entry = a.choices[0].logprobs.content[0]
    assert len(entry.top_logprobs) == 3 and entry.logprob <= 0
    assert a.usage.completion_tokens == sum(len(c.logprobs.content) for c in a.choices)


def test_streamed_completion_equals_the_whole_one(client):
    ask = dict(model="tiny", prompt="The quick", max_tokens=8, seed=3, logprobs=2)
    whole = client.completions.create(**ask)
    chunks = list(client.completions.create(**ask, stream=True))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    streamed = [lp for c in chunks if c.choices and c.choices[0].logprobs
                for lp in c.choices[0].logprobs.token_logprobs]
    assert streamed == pytest.approx(whole.choices[0].logprobs.token_logprobs, abs=1e-5)  # (a reused cache: float32)


def test_streamed_tokens_and_logprobs_are_the_runs_trace(served, client):
    stream = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=8, seed=5, stream=True,
                                            logprobs=True, top_logprobs=2)
    chunks = list(stream)
    run_id = chunks[0].model_extra["logitlab"]["run_ids"][0]
    entries = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    (trace,) = kept_runs(served[2], [run_id])
    steps = [s for s in trace.steps if s.text or s.token_id not in served[1].tokenizer.eos_ids]
    assert [e.model_extra["id"] for e in entries] == [s.token_id for s in steps]
    assert [e.logprob for e in entries] == pytest.approx([s.sample.raw_logprob for s in steps], abs=1e-6)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == trace.text


def test_processed_logprobs_are_of_the_distribution_drawn_from(served):
    body = {"prompt": "Hello", "max_tokens": 4, "seed": 1, "top_k": 2, "logprobs": 5,
            "logitlab": {"logprobs": "processed"}}
    r = httpx.post(served[0].url + "/completions", json=body).json()
    assert r["logitlab"]["logprobs"] == "processed"
    for top in r["choices"][0]["logprobs"]["top_logprobs"]:
        assert len(top) <= 2 and math.isclose(sum(math.exp(v) for v in top.values()), 1, abs_tol=1e-4)


def test_echo_gives_the_prompts_own_logprobs(client, served, torch_model):
    r = client.completions.create(model="tiny", prompt="Hello world", max_tokens=0, echo=True, logprobs=1)
    lp = r.choices[0].logprobs
    assert r.choices[0].text == "Hello world" and lp.token_logprobs[0] is None
    ids = served[1].tokenizer.encode("Hello world")
    expected = score(torch_model, ids)
    assert lp.token_logprobs[1:] == pytest.approx([float(v) for v in expected.logprobs[1:]], abs=1e-4)


def test_a_stop_string_ends_the_text(client):
    plain = client.completions.create(model="tiny", prompt="The", max_tokens=12, temperature=0).choices[0].text
    stop = plain[len(plain) // 2:][:2]
    cut = client.completions.create(model="tiny", prompt="The", max_tokens=12, temperature=0, stop=[stop])
    assert cut.choices[0].text == plain[: plain.index(stop)] and cut.choices[0].finish_reason == "stop"


def test_the_run_id_header_and_the_fields_not_applied(served):
    body = {"messages": CHAT, "max_tokens": 2, "seed": 1, "tools": [], "repeat_penalty": 1.2, "top_k": -1}
    r = httpx.post(served[0].url + "/chat/completions", json=body)
    ext = r.json()["logitlab"]
    assert r.headers["X-Logitlab-Run"] == ",".join(map(str, ext["run_ids"]))
    assert ext["ignored"] == ["tools"] and ext["logprobs"] == "raw" and ext["seed"] == 1
    assert ext["settings"]["repetition_penalty"] == 1.2 and ext["settings"]["top_k"] == 0  # vLLM's -1: off


def test_responses(client):
    r = client.responses.create(model="tiny", input="Hello", max_output_tokens=4, top_logprobs=2)
    assert r.output_text and len(r.output[0].content[0].logprobs) == r.usage.output_tokens
    events = [e.type for e in client.responses.create(model="tiny", input="Hello", max_output_tokens=3, stream=True)]
    assert events[0] == "response.created" and events[-1] == "response.completed"


@pytest.mark.parametrize(("body", "field"), [
    ({"messages": CHAT, "top_k": -3}, "top_k"),
    ({"messages": CHAT, "temperature": "hot"}, "temperature"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0]"),
    ({"messages": CHAT, "logit_bias": {"999999": 5}}, "logit_bias"),
    ({"messages": CHAT, "samplers": ["top_k", "magic"]}, "samplers"),
    ({"messages": CHAT, "n": 0}, "n"),
    ({"messages": CHAT, "logitlab": {"logprobs": "cooked"}}, "logitlab.logprobs"),
])
def test_a_bad_field_is_a_400_naming_it(served, body, field):
    r = httpx.post(served[0].url + "/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == field and r.json()["error"]["message"]


def test_bodies_too_deep_too_big_or_not_json_are_refused(served):
    url = served[0].url + "/completions"
    deep = '{"prompt": "x", "a": ' + "[" * 100 + "]" * 100 + "}"
    assert httpx.post(url, content=deep).status_code == 400
    assert httpx.post(url, content=b"{nope").status_code == 400
    assert httpx.post(url, content=b'{"prompt": "' + b"x" * (9 * 2**20) + b'"}').status_code == 413


def test_a_client_that_disconnects_cancels_its_run(served):
    eos = min(served[1].tokenizer.eos_ids)
    body = {"prompt": "Hello", "max_tokens": 100_000, "stream": True, "seed": 1, "logit_bias": {str(eos): -100}}
    with httpx.stream("POST", served[0].url + "/completions", json=body) as r:
        run_id = int(r.headers["X-Logitlab-Run"])
        for i, _ in enumerate(r.iter_lines()):
            if i > 5:
                break
    (trace,) = kept_runs(served[2], [run_id])
    assert trace.finish_reason == "cancelled" and 0 < len(trace.steps) < 100_000


def test_a_key_is_needed_beyond_loopback_and_checked(served):
    with pytest.raises(ValueError, match="API key"):
        check_exposure("0.0.0.0", None)
    keyed = Server(served[1], api_key="sesame").start()
    try:
        assert httpx.get(keyed.url + "/models").status_code == 401
        assert httpx.get(keyed.url + "/models", headers={"Authorization": "Bearer sesame"}).status_code == 200
    finally:
        keyed.stop()


def test_the_probe_finds_every_field_honoured():
    """On the built-in model (real text: the tiny model's random bytes spell no UTF-8 a reply could be aligned to)."""
    from app.core.models.sources import BUILTIN_PATH
    from app.core.remote.probe import connect, probe

    spec = ModelSpec(source=str(BUILTIN_PATH), backend="torch", options=LoadOptions(device="cpu", dtype="float32"))
    host = Host(spec)
    host.load()
    server = Server(host).start()
    model = connect(server.url, tokenizer=str(BUILTIN_PATH))
    try:
        report = probe(model, seed=1)
    finally:
        model.close()
        server.stop()
        host.close()
    verdicts = {v.check: v.verdict for v in report.verdicts}
    assert report.ignored == [] and report.fields("refused") == [], json.dumps(verdicts)
    assert verdicts.pop("log-probs") == "raw"
    # the sequential temperature test may run out of budget before deciding (never "ignored": checked above)
    assert verdicts.pop("temperature") in ("honoured", "inconclusive")
    assert set(verdicts.values()) == {"honoured"}, json.dumps(verdicts)
