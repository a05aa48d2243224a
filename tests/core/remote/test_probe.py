"""The server probe against real servers on 127.0.0.1 (tests/remote_fake.py's sampling server: honest, or ignoring
the fields a test names, or reporting the sampled distribution's log-probabilities): it must name exactly the fields
a server ignores. The fake's randomness is seeded and it honours seeds, so every verdict here is the same on every
run; each statistical one would be wrong with chance at most 1e-6 anyway."""

from __future__ import annotations

import threading
import time
from contextlib import closing

import pytest

from app.core.remote.probe import CHECKS, Report, connect, probe
from backends.remote.backend import RemoteError
from tests.remote_fake import SAMPLED_FIELDS, chunk, fake_server, sampling_server

JUDGED = {"honoured", "raw"}


def probe_fake(ignores: set[str] = frozenset(), reports: str = "raw", **kw) -> tuple[Report, list[dict]]:
    with fake_server(sampling_server(ignores, reports)) as server, closing(connect(server.url)) as model:
        return probe(model, **kw), server.bodies


def test_an_honest_server_is_found_to_apply_every_field_and_to_report_raw_log_probabilities():
    report, bodies = probe_fake()
    assert [v.verdict for v in report.verdicts if v.verdict not in JUDGED] == []
    assert report.ignored == [] and report.logprobs == "raw"
    assert [v.check for v in report.verdicts] == [c.name for c in CHECKS]
    assert report.requests == len(bodies) <= report.budget


def test_a_server_ignoring_top_k_and_min_p_and_reporting_sampled_log_probabilities_is_named_exactly():
    report, _ = probe_fake({"top_k", "min_p"}, reports="sampled")
    assert report.ignored == ["min_p", "top_k"]
    assert report.logprobs == "after sampling"
    verdicts = {v.check: v for v in report.verdicts}
    assert verdicts["top_k"].confidence.startswith("exact") and "outside" in verdicts["top_k"].detail
    assert "temperature applied" in verdicts["log-probs"].detail
    assert {v.verdict for c, v in verdicts.items() if c not in ("top_k", "min_p", "log-probs")} == {"honoured"}


DEAF = {"top_p", "repetition_penalty", "frequency_penalty", "presence_penalty", "seed", "stop", "logit_bias", "n",
        "echo", "top_logprobs"}


def test_a_server_ignoring_the_other_fields_is_named_exactly_too():
    report, _ = probe_fake(DEAF)
    assert report.ignored == sorted(DEAF)
    assert {v.check: v.verdict for v in report.verdicts if v.check in ("top_k", "min_p", "temperature")} == {
        "top_k": "honoured", "min_p": "honoured", "temperature": "honoured"}
    additive = [v for v in report.verdicts if v.check in ("frequency_penalty", "presence_penalty")]
    assert all(v.confidence == "exact" and "led the best unseen token by" in v.detail for v in additive)


def test_every_field_the_fake_samples_by_has_a_check():
    assert set(SAMPLED_FIELDS) <= {f for c in CHECKS for f in c.fields}


def test_a_server_ignoring_temperature_leaves_what_needs_greedy_untested():
    report, _ = probe_fake({"temperature"})
    assert report.ignored == ["temperature"]
    needing = [v for v in report.verdicts if v.check in ("stop", "logit_bias", "presence_penalty")]
    assert {v.verdict for v in needing} == {"untested"} and all(v.requests == 0 for v in needing)


def test_the_probe_never_sends_more_requests_than_its_budget():
    report, bodies = probe_fake(budget=40)
    assert report.requests == len(bodies) <= 40
    assert "inconclusive" in {v.verdict for v in report.verdicts}
    assert sum(v.requests for v in report.verdicts) + 3 == report.requests  # (3: the reference's prompts)


def test_a_field_the_server_refuses_is_reported_refused():
    honest = sampling_server()

    def refuse_n(h, body):
        if body.get("n", 1) != 1:
            h.answer(400, {"error": {"message": "n must be 1"}})
        else:
            honest(h, body)

    with fake_server(refuse_n) as server, closing(connect(server.url)) as model:
        report = probe(model)
    assert report.fields("refused") == ["n"] and "n must be 1" in report.verdicts[-3].detail


def test_a_server_without_log_probabilities_is_one_error_line():
    def text_only(h, body):
        if body.get("stream"):
            h.start_stream()
            h.event(chunk(" ant", None, "length"))
            h.end_stream()
        else:
            h.answer(200, {"object": "text_completion", "choices": [chunk(" ant", None, "length")["choices"][0]]})

    with (fake_server(text_only) as server, closing(connect(server.url)) as model,
          pytest.raises(RemoteError, match="no log-probabilities")):
        probe(model)


def test_each_request_is_held_to_the_deadline():
    def stall(h, body):
        time.sleep(5)

    with fake_server(stall) as server, closing(connect(server.url, deadline=1.0)) as model:
        t0 = time.monotonic()
        with pytest.raises(RemoteError, match="took more than 1 s"):
            probe(model)
    assert time.monotonic() - t0 < 4


def test_the_report_as_json_names_the_bounds_and_every_check():
    report, _ = probe_fake({"n"})
    d = report.to_dict()
    assert d["ignored"] == ["n"] and d["logprobs"] == "raw" and d["alpha"] == 1e-6
    assert [c["check"] for c in d["checks"]] == [c.name for c in CHECKS]
    assert d["server"].startswith("http://127.0.0.1:") and d["model"] == "fake-model"


def test_a_server_that_goes_away_leaves_the_later_checks_untested():
    honest, served = sampling_server(), []

    def then_gone(h, body):
        served.append(body)
        if len(served) > 10:  # the reference and a few checks answered; then the server shuts down
            threading.Thread(target=lambda: (h.server.shutdown(), h.server.server_close()), daemon=True).start()
            h.cut()
        else:
            honest(h, body)

    with fake_server(then_gone) as server, closing(connect(server.url)) as model:
        t0 = time.monotonic()
        report = probe(model)
    verdicts = [v.verdict for v in report.verdicts]
    assert "error" in verdicts and verdicts[-1] == "untested" and time.monotonic() - t0 < 10
    assert report.requests < 30
