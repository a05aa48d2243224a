"""The remote backend against a careless or hostile server (tests/remote_fake.py, real HTTP on 127.0.0.1) and
careless input: no secret in any message, time and size limits the server cannot defeat, URLs that cannot work,
and every value a server sends. Each ends in one `RemoteError` line (or is ignored where harmless), never a
traceback or a hang. Limits are made small here; every wait has a generous margin (none depends on load)."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager

import pytest

from backends.remote.backend import RemoteModel
from backends.remote.http import RemoteError, normalize_url, redact, where
from backends.remote.logprobs import MalformedError
from backends.remote.replies import End
from backends.remote.sse import _lines, sse_events
from backends.remote.tokens import Token
from tests.remote_fake import TOKENS, Handler, chunk, entry, fake_server, stream_tokens

KEY = "sk-live-5ecretKEY0123456789abcdef"
PASSWORD = "hunter2-Pw-0987654321"
MARGIN_S = 10.0  # a limit of about 1 s must have ended the request within this


@contextmanager
def model_on(behave, key: str | None = None, url: Callable[[str], str] = lambda u: u,
             **limits) -> Iterator[tuple]:
    with fake_server(behave) as srv, closing(RemoteModel(url(srv.url), "fake-model", key, **{
            "timeout": 5.0, **limits})) as model:
        yield srv, model


def fail_line(model: RemoteModel, *, whole: bool = False) -> str:
    """The one line a completion on `model` ends with."""
    if whole:
        model._learnt.streams_logprobs = False  # the server is asked for the run whole
    with pytest.raises(RemoteError) as e:
        list(model.complete({"max_tokens": 5}, prompt="hi", top_n=3))
    line = str(e.value)
    assert line and "\n" not in line and "Traceback" not in line and "\x1b" not in line
    return line


def no_secret(text: str) -> None:
    for secret in (KEY, KEY[:8], KEY[-12:], PASSWORD, PASSWORD[:8], base64.b64encode(
            f"alice:{PASSWORD}".encode()).decode()[:12]):
        assert secret.lower() not in text.lower()


def serving_models(monkeypatch, answer: Callable[[Handler], None]) -> None:
    """GET /models answers as `answer` writes it (for this test)."""
    monkeypatch.setattr(Handler, "do_GET", lambda h: answer(h))


def raw(h: Handler, code: int, data: bytes, ctype: str = "application/json") -> None:
    h.send_response(code)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


# 1. secrets ---------------------------------------------------------------------------------------------------
def echo_stream(data: str) -> Callable:
    def behave(h: Handler, body: dict) -> None:
        h.start_stream()
        h.event(chunk("w0", [entry("w0", -0.5, [("w0", -0.5)])]))
        h.send_chunk(f"data: {data}\n\n")
        h.end_stream()

    return behave


ECHOES = {
    "401 body": lambda h, b: h.answer(401, {"error": {"message": f"Incorrect API key provided: {KEY}."}}),
    "500 text body": lambda h, b: raw(h, 500, f"upstream said: Authorization: Bearer {KEY}".encode(), "text/plain"),
    "400 refusal": lambda h, b: h.answer(400, {"error": {"message": f"logprobs invalid for key {KEY.upper()}"}}),
    "429 body": lambda h, b: h.answer(429, {"error": f"slow down, {KEY}"}),
    "reason phrase": lambda h, b: (h.send_response(503, f"down for {KEY}"), h.send_header("Content-Length", "0"),
                                   h.end_headers()),
    "redirect": lambda h, b: (h.send_response(302), h.send_header("Location", f"http://evil/?key={KEY}"),
                              h.send_header("Content-Length", "0"), h.end_headers()),
    "mid-stream error": echo_stream(json.dumps({"error": {"message": f"key {KEY} revoked"}})),
    "malformed line": echo_stream(f"{{not json {KEY}"),
    "malformed excerpt cut in the key": echo_stream("x" * 70 + KEY),
    "FastAPI detail": lambda h, b: h.answer(500, {"detail": [{"msg": f"bad header {KEY}"}]}),
    "a bad entry": echo_stream(json.dumps({"choices": [{"text": "a", "logprobs": {
        "content": [{"junk": "y" * 60 + KEY}]}}]})),
}


@pytest.mark.parametrize("echo", list(ECHOES))
def test_an_api_key_the_server_echoes_is_in_no_message(echo: str):
    with model_on(ECHOES[echo], KEY) as (srv, model):
        line = fail_line(model)
        assert srv.auth[0] == f"Bearer {KEY}"
    no_secret(line + repr(model) + model.base_url + model.info.device)


def test_an_api_key_in_a_whole_answer_or_the_model_list_is_in_no_message(monkeypatch):
    serving_models(monkeypatch, lambda h: h.answer(500, {"error": f"cannot list for {KEY}"}))
    with model_on(lambda h, b: raw(h, 200, f"<html>{KEY}</html>".encode()), KEY) as (_, model):
        no_secret(fail_line(model, whole=True))
        with pytest.raises(RemoteError) as e:
            model.models()
    no_secret(str(e.value))


def test_strings_in_the_model_list_are_redacted(monkeypatch):
    serving_models(monkeypatch, lambda h: h.answer(200, {"data": [{"id": "m", "owned_by": f"key {KEY}",
                                                                   "meta": {KEY: [KEY]}}]}))
    with model_on(stream_tokens(1), KEY) as (_, model):
        listed = model.models()
    assert listed[0]["id"] == "m"
    no_secret(json.dumps(listed))


def echo_auth(h: Handler, body: dict) -> None:
    """A 401 that quotes the Authorization header the server got, and the password decoded from it."""
    got = h.headers.get("Authorization", "")
    decoded = base64.b64decode(got.split()[-1]).decode() if got.startswith("Basic") else ""
    h.answer(401, {"error": f"bad credentials {got} ({decoded})"})


def test_a_password_in_the_base_url_is_sent_as_basic_auth_and_never_shown():
    with_login = lambda u: u.replace("http://", f"http://alice:{PASSWORD}@")
    with model_on(echo_auth, url=with_login) as (srv, model):
        line = fail_line(model)
        assert srv.auth == ["Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()]
        assert "refused the API key (HTTP 401)" in line and where(srv.url) in line
        shown = line + repr(model) + model.base_url + model.info.device + where(with_login(srv.url))
    no_secret(shown)
    with model_on(echo_auth, KEY, url=with_login) as (srv, model):  # with an API key too: the key is sent
        no_secret(fail_line(model))
        assert srv.auth == [f"Bearer {KEY}"]


def test_a_percent_encoded_password_is_decoded_for_basic_auth():
    with model_on(echo_auth, url=lambda u: u.replace("http://", "http://al%40ce:p%3Aw%2Fd@")) as (srv, model):
        fail_line(model)
    assert srv.auth == ["Basic " + base64.b64encode(b"al@ce:p:w/d").decode()]


def test_an_api_key_no_header_can_carry_is_refused_without_showing_it():
    with pytest.raises(RemoteError, match="cannot carry") as e:
        RemoteModel("http://127.0.0.1:9/v1", "m", "sk-abc\nX-Injected: 1")
    assert "sk-abc" not in str(e.value)


def test_the_cli_never_prints_the_password(monkeypatch, capsys):
    from app.cli.main import main

    serving_models(monkeypatch, lambda h: echo_auth(h, {}))
    with fake_server(stream_tokens(1)) as srv:
        url = srv.url.replace("http://", f"http://alice:{PASSWORD}@")
        assert main(["models", "--base-url", url]) == 1
        assert main(["models", "--base-url", f"http://alice:{PASSWORD}@127.0.0.1:99999/v1"]) in (1, 2)
        assert main(["generate", "--backend", "remote", "--base-url", url, "--model", "fake-model", "--prompt",
                     "x", "--max-tokens", "2"]) == 1
    out, err = capsys.readouterr()
    no_secret(out + err)
    assert "Traceback" not in err and len([x for x in err.splitlines() if "error" in x]) == 3


def test_redact_finds_a_secret_however_it_is_written():
    from backends.remote.http import keep_secret

    keep_secret(KEY)
    for text in (f"a {KEY} b", f"a {KEY.upper()} b", f"{KEY}{KEY}", f"cut: {KEY[:10]}", f"k={KEY[:20]}",
                 json.dumps(f"{KEY}/x")):
        assert KEY[:8].lower() not in redact(text).lower(), text
    assert redact(f"a {KEY} b") == "a *** b"
    assert redact("nothing secret here") == "nothing secret here"


# 3. URLs ------------------------------------------------------------------------------------------------------
BAD_URLS = ["http://[::1/v1", "http://host:99999/v1", "http://host:abc/v1", "ftp://host/v1", "file:///etc/v1",
            "http://exa mple/v1", "http:///v1", "http://:8000/v1", "localhost:8000", "", "   ",
            "http://h\x00st/v1", "http://☃.com/v1", "http://host/v1?x=1", "http://host:0/v1",
            f"http://alice:{PASSWORD}@[::1/v1", f"http://alice:{PASSWORD}@host:99999/v1"]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_url_no_request_could_go_to_is_one_line_before_any_request(url: str):
    with pytest.raises(RemoteError) as e:
        RemoteModel(url, "m")
    line = str(e.value)
    assert "base URL" in line and "\n" not in line
    no_secret(line)


def test_good_urls_are_normalized_and_named_without_their_login():
    assert normalize_url(" http://[::1]:8000/ ") == "http://[::1]:8000/v1"
    assert where("http://[::1]:8000/v1") == "http://[::1]:8000/v1"
    assert where(f"https://alice:{PASSWORD}@gpu.local/api/v1") == "https://gpu.local/api/v1"
    assert PASSWORD not in where(f"http://alice:{PASSWORD}@[::1/v1")
    model = RemoteModel(f"http://alice:{PASSWORD}@127.0.0.1:9", "m")
    assert model.base_url == "http://127.0.0.1:9/v1"
    model.close()


@pytest.mark.parametrize("url", ["http://[::1/v1", "http://127.0.0.1:99999/v1", "http://exa mple:8000/v1"])
def test_cli_models_on_a_bad_url_is_one_line(url: str, capsys):
    from app.cli.main import main

    assert main(["models", "--base-url", url]) in (1, 2)  # (2: refused as the flag is read)
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "base URL" in err


# 2. limits: time ----------------------------------------------------------------------------------------------
def trickling(before: Callable[[Handler], None], byte: Callable[[Handler], None], every: float = 0.2):
    def behave(h: Handler, body: dict) -> None:
        before(h)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:  # (ends sooner: the write fails once the client has gone)
            byte(h)
            time.sleep(every)

    return behave


def raw_write(data: bytes) -> Callable[[Handler], None]:
    def write(h: Handler) -> None:
        h.wfile.write(data)
        h.wfile.flush()

    return write


TRICKLES = {
    "a byte a time in one line": trickling(lambda h: (h.start_stream(), h.send_chunk(": ")),
                                           lambda h: h.send_chunk("x")),
    "the headers a byte a time": trickling(raw_write(b"HTTP/1.1 200 OK\r\nX-Slow: "), raw_write(b"a")),
    "events without tokens": trickling(Handler.start_stream, lambda h: h.event({"choices": []}), every=0.05),
    "a keep-alive a time": trickling(Handler.start_stream, lambda h: h.send_chunk(": keep-alive\n\n")),
}


@pytest.mark.parametrize("how", list(TRICKLES))
def test_a_trickling_server_meets_the_overall_deadline(how: str):
    with model_on(TRICKLES[how], deadline=1.0) as (_, model):
        t0 = time.monotonic()
        line = fail_line(model)
        assert time.monotonic() - t0 < MARGIN_S
    assert "took more than 1 s to answer" in line


def test_a_stream_of_keep_alives_alone_ends_at_the_event_cap():
    with model_on(TRICKLES["a keep-alive a time"], event_timeout=0.8, deadline=60) as (_, model):
        t0 = time.monotonic()
        line = fail_line(model)
        assert time.monotonic() - t0 < MARGIN_S
    assert "sent nothing but keep-alives for 0.8 s (after 0 tokens)" in line


def test_tokens_keep_a_stream_alive_past_the_event_cap():
    with model_on(stream_tokens(8, delay=0.2), event_timeout=1.0, deadline=60) as (_, model):  # 1.6 s in all
        got = list(model.complete({"max_tokens": 8}, prompt="hi", top_n=3))
    assert len([t for t in got if isinstance(t, Token)]) == 8 and isinstance(got[-1], End)


def test_a_whole_answer_and_the_model_list_meet_the_deadline_too(monkeypatch):
    slow = trickling(lambda h: (h.send_response(200), h.send_header("Content-Length", "100000"), h.end_headers()),
                     raw_write(b" "))
    serving_models(monkeypatch, lambda h: slow(h, {}))
    with model_on(slow, deadline=0.5) as (_, model):
        t0 = time.monotonic()
        assert "took more than 0.5 s to answer" in fail_line(model, whole=True)
        with pytest.raises(RemoteError, match=r"/models took more than 0.5 s to answer.*--model NAME"):
            model.models()
        assert time.monotonic() - t0 < 2 * MARGIN_S


# 2. limits: size ----------------------------------------------------------------------------------------------
def endless(h: Handler, piece: str) -> None:
    h.start_stream()
    for _ in range(2000):  # up to 128 MiB, unless the client stops first
        h.send_chunk(piece)


SIZES = {
    "one endless line": (lambda h, b: endless(h, "data: " + "x" * 65536), "a line longer than"),
    "one endless event": (lambda h, b: endless(h, "data: x\n" * 8192), "an event longer than"),
}


@pytest.mark.parametrize("how", list(SIZES))
def test_a_line_or_event_too_long_is_cut_short(how: str):
    behave, words = SIZES[how]
    with model_on(behave, max_event=100_000) as (_, model):
        t0 = time.monotonic()
        line = fail_line(model)
        assert time.monotonic() - t0 < MARGIN_S
    assert "malformed" in line and words in line


def test_a_whole_answer_or_model_list_too_big_is_refused(monkeypatch):
    big = json.dumps({"data": [{"id": f"m{i}"} for i in range(5000)]}).encode()
    serving_models(monkeypatch, lambda h: raw(h, 200, big))
    with model_on(lambda h, b: raw(h, 200, big), max_body=10_000) as (_, model):
        assert "sent an answer of more than 9.76562 KiB" in fail_line(model, whole=True)
        with pytest.raises(RemoteError, match="/models sent an answer of more than"):
            model.models()


def test_a_huge_declared_length_is_refused_before_reading(monkeypatch):
    def liar(h: Handler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", str(10**12))
        h.end_headers()
        h.wfile.write(b"{")

    serving_models(monkeypatch, liar)
    with model_on(stream_tokens(1)) as (_, model), pytest.raises(RemoteError, match="more than 64 MiB"):
        model.models()


def test_a_huge_error_body_is_read_in_part():
    with model_on(lambda h, b: raw(h, 500, b"E" * (32 << 20), "text/plain")) as (_, model):
        t0 = time.monotonic()
        line = fail_line(model)
        assert time.monotonic() - t0 < MARGIN_S
    assert "failed (HTTP 500" in line and len(line) < 400


# 4. every value a server sends ---------------------------------------------------------------------------------
DEEP = "[" * 100_000
MODEL_LISTS = {"empty": b"", "not an object": b"[1, 2]", "data not a list": b'{"data": 5}',
               "a non-string id": b'{"data": [{"id": 5}]}', "an entry not an object": b'{"data": ["m"]}',
               "nested 100,000 deep": DEEP.encode(), "deep but parsable": b"[" * 500 + b"]" * 500,
               "binary": bytes(range(256)) * 4, "an id with an escape": b'{"data": [{"id": "m\\u001b[31m"}]}',
               "a huge id": json.dumps({"data": [{"id": "m" * 10_000}]}).encode()}


@pytest.mark.parametrize("what", list(MODEL_LISTS))
def test_a_broken_model_list_names_the_endpoint_and_the_next_step(monkeypatch, what: str):
    serving_models(monkeypatch, lambda h: raw(h, 200, MODEL_LISTS[what]))
    with model_on(stream_tokens(1)) as (srv, model), pytest.raises(RemoteError) as e:
        model.models()
    line = str(e.value)
    assert f"{where(srv.url)}/models answered HTTP 200" in line and "\n" not in line and "\x1b" not in line
    assert f"type the model name instead: logitlab generate --base-url {where(srv.url)} --model NAME" in line
    assert e.value.status == 200 and e.value.model_list_failed and len(line) < 600


def close_at_once(h: Handler) -> None:
    h.close_connection = True
    h.connection.shutdown(2)


MODEL_FAILURES = {  # mlx_lm.server without a Hugging Face cache folder: a 500, a closed connection
    "500": (lambda h: h.answer(500, {"error": "FileNotFoundError: no cache"}), "/models failed (HTTP 500",
            500),
    "closed": (close_at_once, "/models closed the connection without a complete answer", None),
    "404": (lambda h: h.answer(404, {"detail": "Not Found"}), "/models is not there (HTTP 404): Not Found", 404),
    "500 deep": (lambda h: raw(h, 500, b'{"error": ' * 100_000), "/models failed (HTTP 500", 500),
    "500 binary": (lambda h: raw(h, 500, b"\xff\xfe\x00" * 100), "/models failed (HTTP 500", 500),
}


@pytest.mark.parametrize("what", list(MODEL_FAILURES))
def test_a_failing_model_list_names_the_endpoint_its_status_and_the_next_step(monkeypatch, what: str):
    answer, words, code = MODEL_FAILURES[what]
    serving_models(monkeypatch, answer)
    with model_on(stream_tokens(1)) as (srv, model), pytest.raises(RemoteError) as e:
        model.models()
    line = str(e.value)
    assert where(srv.url) + words in line and "\n" not in line and "\x00" not in line
    assert f"type the model name instead: logitlab generate --base-url {where(srv.url)} --model NAME" in line
    assert e.value.status == code and e.value.model_list_failed


def test_cli_models_on_a_crashing_server_says_what_failed_and_what_to_do(monkeypatch, capsys):
    from app.cli.main import main

    serving_models(monkeypatch, close_at_once)
    with fake_server(stream_tokens(1)) as srv:
        assert main(["models", "--base-url", srv.url]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "/models closed the connection" in err and "--model NAME" in err


def test_a_wrong_key_or_no_server_is_not_told_to_type_a_model_name(monkeypatch):
    serving_models(monkeypatch, lambda h: h.answer(401, {"error": "no"}))
    with model_on(stream_tokens(1)) as (_, model), pytest.raises(RemoteError, match="refused the API key") as e:
        model.models()
    assert "--model NAME" not in str(e.value) and not e.value.model_list_failed
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with closing(RemoteModel(f"http://127.0.0.1:{port}/v1", "m")) as model, pytest.raises(RemoteError) as e:
        model.models()
    assert "connection refused" in str(e.value) and "--model NAME" not in str(e.value) and e.value.unreachable


def test_model_list_fields_that_are_not_counts_are_dropped(monkeypatch):
    entries_ = [{"id": "a", "max_model_len": "4096"}, {"id": "b", "max_model_len": -1},
                {"id": "c", "context_length": 1.5}, {"id": "d", "max_model_len": True}, {"id": "e", "max_model_len":
                8192}]
    serving_models(monkeypatch, lambda h: raw(h, 200, json.dumps({"data": entries_}).encode()
                                              .replace(b"1.5", b"NaN")))
    with model_on(stream_tokens(1)) as (_, model):
        listed = model.models()
    assert [m.get("max_model_len") or m.get("context_length") for m in listed] == [None, None, None, None, 8192]


ERROR_BODIES = {
    "nested 100,000 deep": b'{"error": ' * 100_000,
    "deep but parsable": b'{"error": ' + b"[" * 500 + b"]" * 500 + b"}",
    "binary": bytes(range(256)),
    "an escape sequence": b'{"error": "\\u001b]0;pwned\\u0007\\u001b[2J gone"}',
    "a list": b'{"detail": [{"loc": ["body"], "msg": "field required"}]}',
}


@pytest.mark.parametrize("what", list(ERROR_BODIES))
def test_any_error_body_is_one_line(what: str):
    with model_on(lambda h, b: raw(h, 503, ERROR_BODIES[what])) as (_, model):
        line = fail_line(model)
    assert "failed (HTTP 503" in line and len(line) < 400 and "\x07" not in line
    assert what != "binary" or "(an answer of 256 bytes that is not text)" in line


@pytest.mark.parametrize("data", [DEEP, '{"choices": ' * 100_000, "[1]", "null", '"text"', "\x00\x01",
                                  '{"choices": [{"text": 5, "logprobs": null}]}', '{"choices": {"a": 1}}'])
def test_any_stream_data_is_a_malformed_line(data: str):
    with model_on(echo_stream(data)) as (_, model):
        line = fail_line(model)
    assert "malformed" in line and len(line) < 400


def finishing(last: dict) -> Callable:
    def behave(h: Handler, body: dict) -> None:
        h.start_stream()
        h.event(chunk("w0", [entry("w0", -0.5, [("w0", -0.5)])]))
        h.event(last)
        h.end_stream()

    return behave


@pytest.mark.parametrize("count", ["12", -3, 2.5, "NaN", True, [1], {"n": 1}, 10**30])
def test_a_prompt_token_count_that_is_not_a_count_is_ignored(count):
    last = {**chunk("", None, "length"), "usage": {"prompt_tokens": count}}
    body = json.dumps(last).replace('"NaN"', "NaN")
    with model_on(echo_stream(body)) as (_, model):
        end = list(model.complete({"max_tokens": 5}, prompt="hi", top_n=3))[-1]
    assert isinstance(end, End) and end.reason == "length" and end.prompt_tokens is None


@pytest.mark.parametrize("reason", [5, {"why": "stop"}, ["stop"], True, ""])
def test_a_finish_reason_that_is_not_a_string_is_ignored(reason):
    with model_on(finishing({"choices": [{"index": 0, "text": "", "finish_reason": reason}]})) as (_, model):
        assert "without finishing the completion (after 1 tokens)" in fail_line(model)


def test_a_stop_reason_that_is_neither_text_nor_a_token_id_is_dropped():
    last = {"choices": [{"index": 0, "text": "", "finish_reason": "stop" * 100, "stop_reason": {"x": [1]}}]}
    with model_on(finishing(last)) as (_, model):
        end = list(model.complete({"max_tokens": 5}, prompt="hi", top_n=3))[-1]
    assert end.stop_reason is None and len(end.reason) <= 64


@pytest.mark.parametrize("after", ["nan", "inf", "-3", "1e400", "soon"])
def test_a_retry_after_that_is_not_a_wait_is_ignored(after: str):
    with model_on(lambda h, b: h.answer(429, {"error": "slow"}, {"Retry-After": after})) as (_, model), \
            pytest.raises(RemoteError, match="rate-limiting") as e:
        list(model.complete({"max_tokens": 5}, prompt="hi", top_n=3))
    assert e.value.retry_after is None and "wait" not in str(e.value)


def test_a_redirect_is_one_line_naming_where_it_goes():
    def behave(h: Handler, body: dict) -> None:
        h.send_response(307)
        h.send_header("Location", "https://elsewhere:8443/v1/completions")
        h.send_header("Content-Length", "0")
        h.end_headers()

    with model_on(behave) as (_, model):
        line = fail_line(model)
    assert "redirects (HTTP 307) to https://elsewhere:8443/v1/completions" in line


# reading ------------------------------------------------------------------------------------------------------
def test_lines_are_split_however_the_bytes_arrive():
    text = "data: a\r\n\r\ndata: é\n\ndata: b\r\rdata: c"
    data = text.encode()
    for size in (1, 2, 3, 7, len(data)):
        pieces = [data[i:i + size] for i in range(0, len(data), size)]
        assert list(sse_events(_lines(pieces))) == ["a", "é", "b", "c"], size
    with pytest.raises(MalformedError, match="longer than"):
        list(_lines([b"x" * 10] * 10, max_line=50))


def test_tokens_still_stream_through_the_limits():
    with model_on(stream_tokens(50), deadline=30, event_timeout=5, max_event=10_000) as (_, model):
        got = list(model.complete({"max_tokens": 50}, prompt="hi", top_n=3))
    assert [t.text for t in got if isinstance(t, Token)] == [t for t, _, _ in TOKENS[:50]]


def test_a_key_is_kept_under_the_base_url_without_its_password_and_is_redacted():
    import keyring
    from keyring.backends import fail

    from app.core.remote import secrets

    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())  # (no keychain: the session keeps it, under the same name)
    try:
        secrets.store_key(f"http://alice:{PASSWORD}@gpu:8000/", f" {KEY}\n")
        assert list(secrets._session) == ["http://gpu:8000/v1"]
        assert secrets.api_key("http://gpu:8000/v1") == secrets.api_key("http://bob:x@gpu:8000") == KEY
        assert redact(f"echo {KEY}") == "echo ***"
        secrets.forget_key("http://gpu:8000")
        assert secrets.api_key("http://gpu:8000/v1") is None
    finally:
        keyring.set_keyring(before)
        secrets._session.clear()
