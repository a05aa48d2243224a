"""Every value a server sends, against a real server on 127.0.0.1 (tests/remote_fake.py): a value of the wrong type
is one `RemoteError` line naming the server and the field (or is dropped where it only helps, as a model list's
`owned_by`); token ids past what a record holds, negative or not whole are refused; a log-probability of -inf is a
probability of 0 and a trace keeps it; 60,000 candidates in one step are read in linear time; beam search on a
server is refused before the server is asked anything; and a request ends at its deadline, which `--deadline` sets.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager

import pytest

from app.core.events import Failed
from app.core.models.sources import ModelSpec
from app.core.record.trace import RunTrace
from app.core.remote.remote_run import load_remote, served_models
from app.core.remote.server_request import OPENAI
from app.core.runs.beam_run import BeamRequest
from app.core.runs.jobs import Job
from app.core.runs.model_thread import ModelThread
from backends.remote.backend import RemoteModel
from backends.remote.http import RemoteError, where
from backends.remote.logprobs import MAX_ID
from backends.remote.replies import End
from backends.remote.tokens import Token
from tests.remote_fake import Handler, chunk, fake_server, stream_tokens, trickle

MARGIN_S = 10.0  # a limit of about 1 s must have ended the request within this


@contextmanager
def model_on(behave, **limits) -> Iterator[tuple]:
    with fake_server(behave) as srv, closing(RemoteModel(srv.url, "fake-model", timeout=5.0, **limits)) as model:
        yield srv, model


def fail_line(model: RemoteModel, whole: bool = False) -> str:
    if whole:
        model._learnt.streams_logprobs = False  # the server is asked for the run whole
    with pytest.raises(RemoteError) as e:
        list(model.complete({"max_tokens": 5}, prompt="hi", top_n=3))
    line = str(e.value)
    assert line and "\n" not in line and "Traceback" not in line
    return line


def sending(choice: dict, raw: str | None = None):
    """A server that answers with one choice (`raw`: its JSON as written, for NaN and the infinities): streamed as
    one event then a finish, or whole."""
    data = raw or json.dumps({"object": "text_completion", "choices": [{"index": 0, **choice}]})

    def behave(h: Handler, body: dict) -> None:
        if not body.get("stream"):
            return h.answer(200, data.encode())
        h.start_stream()
        h.event(data)
        h.event(chunk("", None, "length"))
        h.end_stream()

    return behave


def chat_entry(**fields) -> dict:
    return {"token": "a", "logprob": -0.5, "top_logprobs": [{"token": "a", "logprob": -0.5}], **fields}


# 1. a value of the wrong type: one line naming the server and the field -----------------------------------------
MODEL_LISTS = {"owned_by a list": {"owned_by": ["vllm"]}, "owned_by an object": {"owned_by": {"name": "vllm"}},
               "owned_by a number": {"owned_by": 5}, "created text": {"created": "yesterday"},
               "created a list": {"created": [1]}, "created a float": {"created": 1.5}}


@pytest.mark.parametrize("what", list(MODEL_LISTS))
def test_a_model_list_field_of_the_wrong_type_is_dropped_and_the_model_still_loads(what: str):
    wrong = MODEL_LISTS[what]
    with fake_server(stream_tokens(2), models=[{"id": "m", "object": "model", **wrong}]) as srv:
        listed = served_models(srv.url)
        model = load_remote(ModelSpec(source="m", backend="remote", base_url=srv.url))
        model.close()
    assert listed == [{"id": "m", "object": "model"}]  # (it only names the server's kind: nothing is lost)
    assert model.dialect == OPENAI and model.model == "m"


def test_a_model_list_field_of_its_type_is_kept():
    entry_ = {"id": "m", "object": "model", "owned_by": "vllm", "created": 1700000000, "max_model_len": 4096}
    with fake_server(stream_tokens(2), models=[entry_]) as srv:
        assert served_models(srv.url) == [entry_]


COMPLETIONS = {  # what the server sends in one choice -> the field the line names
    "top_logprobs a number": ({"text": "a", "logprobs": {"content": [chat_entry(top_logprobs=5)]}},
                              "logprobs.content[0].top_logprobs is not a list: 5"),
    "a candidate not an object": ({"text": "a", "logprobs": {"content": [chat_entry(top_logprobs=["a"])]}},
                                  "logprobs.content[0].top_logprobs[0] is not a log-probability entry"),
    "a log-probability as text": ({"text": "a", "logprobs": {"content": [chat_entry(logprob="-0.5")]}},
                                  "logprobs.content[0].logprob is not a number: '-0.5'"),
    "a log-probability true": ({"text": "a", "logprobs": {"content": [chat_entry(logprob=True)]}},
                               "logprobs.content[0].logprob is not a number: True"),
    "legacy: a token a number": ({"text": "a", "logprobs": {"tokens": [5], "token_logprobs": [-0.5]}},
                                 "logprobs.tokens[0] is not text: 5"),
    "legacy: token_logprobs a number": ({"text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": 5}},
                                        "logprobs.token_logprobs is not a list of one per token (1): 5"),
    "legacy: token_logprobs short": ({"text": "ab", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1]}},
                                     "logprobs.token_logprobs is not a list of one per token (2): [-1]"),
    "legacy: top_logprobs a number": ({"text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": [-0.5],
                                                                 "top_logprobs": 5}},
                                      "logprobs.top_logprobs is not a list of one per token (1): 5"),
    "legacy: a top a list": ({"text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": [-0.5],
                                                        "top_logprobs": [["a", -0.5]]}},
                             "logprobs.top_logprobs[0] is not an object (token -> log-probability)"),
    "legacy: a top's value text": ({"text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": [-0.5],
                                                              "top_logprobs": [{"a": "high"}]}},
                                   "logprobs.top_logprobs[0]['a'] is not a number: 'high'"),
    "a delta as text": ({"delta": "a", "logprobs": {"content": [chat_entry()]}},
                        "choices[0].delta is not an object: a"),
    "a message's content a number": ({"message": {"content": 5}, "logprobs": {"content": [chat_entry()]}},
                                     "choices[0].message.content is not text: 5"),
}


@pytest.mark.parametrize("whole", [False, True], ids=["streamed", "whole"])
@pytest.mark.parametrize("what", list(COMPLETIONS))
def test_a_completion_value_of_the_wrong_type_is_one_line_naming_the_server_and_the_field(what: str, whole: bool):
    choice, words = COMPLETIONS[what]
    with model_on(sending(choice)) as (srv, model):
        line = fail_line(model, whole)
    said = f"{where(srv.url)}/completions sent a malformed answer" if whole else \
        f"{where(srv.url)} sent a malformed stream (after 0 tokens)"
    assert line.startswith(said) and words in line


# 2. token ids and log-probabilities ------------------------------------------------------------------------------
@pytest.mark.parametrize("token_id", [2**40, 2**31, -5, -1, 5.0, 2.5, True, "7", [7]])
def test_a_token_id_that_no_record_holds_is_refused_naming_it(token_id):
    with model_on(sending({"text": "a", "logprobs": {"content": [chat_entry(id=token_id)]}})) as (srv, model):
        line = fail_line(model)
    assert where(srv.url) in line and "logprobs.content[0].id is not a token id (a whole number from 0 to " \
        f"{MAX_ID})" in line


def test_a_token_id_past_int32_ends_the_cli_run_in_one_line(capsys):
    from app.cli.main import main

    with fake_server(sending({"text": "a", "logprobs": {"content": [chat_entry(id=2**40)]}})) as srv:
        code = main(["generate", "--base-url", srv.url, "--model", "fake-model", "--prompt", "x"])
    err = capsys.readouterr().err
    assert code == 1 and "logprobs.content[0].id is not a token id" in err and "Overflow" not in err


def test_the_largest_token_id_and_a_log_probability_of_minus_infinity_are_recorded_and_reopen(tmp_path):
    from app.cli.main import main

    raw = json.dumps({"choices": [{"index": 0, "text": "a", "logprobs": {"content": [{
        "token": "a", "logprob": -0.25, "id": MAX_ID, "top_logprobs": [
            {"token": "a", "logprob": -0.25, "id": MAX_ID}, {"token": "b", "logprob": "-inf", "id": 0}]}]}}]})
    raw = raw.replace('"-inf"', "-Infinity")  # (as Python's json writes it)
    with fake_server(sending({}, raw)) as srv:
        code = main(["generate", "--base-url", srv.url, "--model", "fake-model", "--prompt", "x", "--top-n", "2",
                     "--trace", str(tmp_path / "t.jsonl")])
    assert code == 0
    sample = RunTrace.load(tmp_path / "t.jsonl").steps[0].sample
    assert sample.token == MAX_ID and sample.top_ids.tolist() == [MAX_ID, 0]
    assert sample.raw_probs.tolist() == pytest.approx([0.7788, 0.0], abs=1e-4)  # -inf: a probability of 0


@pytest.mark.parametrize("logprob", ["NaN", "Infinity", "0.5", "null", '"-1"', str(10**400)])
def test_a_log_probability_no_probability_has_is_refused_naming_it(logprob: str):
    raw = json.dumps({"choices": [{"index": 0, "text": "a", "logprobs": {"content": [chat_entry(logprob="@")]}}]})
    with model_on(sending({}, raw.replace('"@"', logprob))) as (srv, model):
        line = fail_line(model)
    assert where(srv.url) in line and "logprobs.content[0].logprob is " in line


def test_a_log_probability_below_a_floats_range_is_minus_infinity():
    top = [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": "@"}]
    raw = json.dumps({"choices": [{"index": 0, "text": "a", "logprobs": {"content": [chat_entry(top_logprobs=top)]}}]})
    with model_on(sending({}, raw.replace('"@"', f"-{10**400}"))) as (_, model):
        token = next(iter(model.complete({"max_tokens": 5}, prompt="hi", top_n=3)))
    assert [(c.text, c.logprob) for c in token.top] == [("a", -0.5), ("b", float("-inf"))]


# 3. sizes: 60,000 candidates in one step --------------------------------------------------------------------------
N = 60_000


def many_candidates(steps: int):
    """Each step lists N candidates by text alone (no ids: each is named here), the likeliest first."""
    top = [{"token": f"t{i}", "logprob": -(i + 1) / 1000} for i in range(N)]

    def behave(h: Handler, body: dict) -> None:
        h.start_stream()
        for _ in range(steps):
            h.event(chunk("t0", [{"token": "t0", "logprob": -0.001, "top_logprobs": top}]))
        h.event(chunk("", None, "length"))
        h.end_stream()

    return behave


def test_sixty_thousand_candidates_in_a_step_are_all_read_sorted_and_named_alike_each_step():
    with model_on(many_candidates(2)) as (_, model):  # (~2.6 MB an event: within the 4 MiB an event may have)
        got = list(model.complete({"max_tokens": 2}, prompt="hi", top_n=20))
    first, second, end = got
    assert isinstance(end, End) and isinstance(first, Token) and first.text == "t0" and first.id == -1
    assert len(first.top) == N and [c.text for c in first.top[:3]] == ["t0", "t1", "t2"]
    assert [c.id for c in first.top] == list(range(-1, -N - 1, -1))  # each its own name, in the order first seen
    assert [c.logprob for c in first.top] == sorted((c.logprob for c in first.top), reverse=True)
    assert second.top == first.top  # the same tokens, the same names


# 4. beam search on a server: refused before the server is asked --------------------------------------------------
def test_beam_search_on_a_server_is_refused_without_waiting_for_its_model_list():
    answer = threading.Event()
    with fake_server(stream_tokens(1), list_models=lambda h: answer.wait(60)) as srv:  # a list that never comes
        worker, out = ModelThread(), queue.Queue()
        try:
            request = BeamRequest(model=ModelSpec(source="m", backend="remote", base_url=srv.url), prompt="x")
            worker.start(Job("beam", (request,), out, status=worker.events))
            failed = out.get(timeout=MARGIN_S)
        finally:
            answer.set()
            worker.close()
        assert srv.gets == [] and srv.bodies == []  # nothing was asked: the refusal does not depend on the answer
    assert isinstance(failed, Failed) and "beam search needs a local forward pass" in failed.message
    assert "runs on a server" in failed.message


# 5. time: a request's deadline, set with --deadline ----------------------------------------------------------------
def test_a_server_sending_a_byte_at_a_time_ends_the_cli_run_at_the_deadline(capsys, tmp_path):
    from app.cli.main import main

    with fake_server(trickle(after=2)) as srv:
        t0 = time.monotonic()
        code = main(["generate", "--base-url", srv.url, "--model", "fake-model", "--prompt", "x", "--deadline", "1",
                     "--trace", str(tmp_path / "t.jsonl")])
        assert time.monotonic() - t0 < MARGIN_S
    out, err = capsys.readouterr()
    assert code == 1 and out.startswith("w0w1")
    assert f"{where(srv.url)} took more than 1 s to answer (after 2 tokens)" in err and "--deadline" in err
    assert [s.text for s in RunTrace.load(tmp_path / "t.jsonl").steps] == ["w0", "w1"]  # what came is kept


def test_a_model_list_trickling_ends_at_the_deadline(capsys):
    from app.cli.main import main

    def slow(h: Handler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "100000")
        h.end_headers()
        for _ in range(600):
            h.wfile.write(b" ")
            h.wfile.flush()
            time.sleep(0.1)

    with fake_server(stream_tokens(1), list_models=slow) as srv:
        t0 = time.monotonic()
        assert main(["models", "--base-url", srv.url, "--deadline", "0.5"]) == 1
        assert time.monotonic() - t0 < MARGIN_S
    assert f"{where(srv.url)}/models took more than 0.5 s to answer" in capsys.readouterr().err


def test_a_deadline_without_a_server_is_refused(capsys):
    from app.cli.main import main

    assert main(["models", "--deadline", "5"]) == 2
    assert "--deadline is for a server: give its --base-url too" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon", "1e9"])
def test_a_deadline_that_is_no_time_limit_is_refused_as_the_flag_is_read(value: str, capsys):
    from app.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["generate", "--base-url", "http://127.0.0.1:9/v1", "--prompt", "x", f"--deadline={value}"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--deadline" in err and len(err.strip().splitlines()) == 1
