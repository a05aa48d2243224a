"""Jobs, the runner table and ids, without a model: a job's stream ends when the thread says it has ended (not when a
reader guesses it from the events); the thread serves any row of the table and never changes for a new one; run
ids count 1, 2, 3 whatever else was asked in between."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from app.core.decoding.quant_diff import DiffRequest
from app.core.events import Failed, Loading, Request, job_id
from app.core.models.sources import ModelSpec
from app.core.runs import runners
from app.core.runs.beam_run import BeamRequest
from app.core.runs.jobs import Job, stream, waiting
from app.core.runs.model_thread import ModelThread
from app.core.settings import SettingsError


def test_a_stream_yields_every_event_in_order_then_ends_with_the_job():
    job = Job("plain", (Request(),))
    for i in range(3):
        job.put(Loading(job.request.id, f"event {i}"))

    def finish() -> None:
        time.sleep(0.05)
        job.put(Loading(job.request.id, "the last"))
        job.ended.set()

    threading.Thread(target=finish).start()
    assert [ev.message for ev in stream(job, poll=0.01)] == ["event 0", "event 1", "event 2", "the last"]
    assert job.over


def test_a_job_that_ended_with_nothing_streams_nothing():
    job = Job("score", (Request(id=job_id()),))
    job.ended.set()  # (a cancelled score says nothing)
    assert list(stream(job, poll=0.01)) == [] and list(waiting(job)) == []


def test_waiting_takes_what_is_there_and_never_blocks():
    job = Job("plain", (Request(),))
    job.put(Loading(job.request.id, "x"))
    assert [ev.message for ev in waiting(job)] == ["x"] and not job.over  # (not ended: more may come)


def test_loading_goes_to_the_status_queue_where_the_job_has_one():
    alone, beside = Job("beam", (BeamRequest(),)), Job("beam", (BeamRequest(),), status=Job("x", (Request(),)).out)
    for job in (alone, beside):
        job.say(Loading(job.request.id, "Finding…"))
    assert alone.out.qsize() == 1 and beside.out.empty() and beside.status.qsize() == 1


def test_run_ids_count_on_by_one_whatever_else_took_an_id():
    first = Request().id + 1
    others = [job_id(), BeamRequest().id, DiffRequest().id, Request(id=job_id()).id]
    run = Request(n=3)
    assert run.id == first and run.run_ids == (first, first + 1, first + 2)
    assert all(i < 0 for i in others) and len(set(others)) == len(others)  # never a run's id, each its own
    assert Request().id == first + 3


def test_each_strategy_is_a_row_and_a_request_picks_plain_or_speculative():
    assert set(runners.RUNNERS) == {"plain", "speculative", "together", "load", "score", "beam", "diff",
                                    "think_probes", "multiverse", "lens", "attention", "steer_vector"}
    assert runners.kind_of(Request()) == "plain"
    assert runners.kind_of(Request(draft=ModelSpec("builtin-draft"))) == "speculative"


@pytest.fixture
def worker():
    w = ModelThread()
    yield w
    assert w.close()


def test_the_thread_serves_a_new_row_unchanged_and_its_failure_ends_the_job(worker, monkeypatch):
    def echo(ctx: object, job: Job) -> Iterator[Loading]:
        yield Loading(job.request.id, "first")
        if job.request.prompt == "refuse":
            raise SettingsError("refused, in one line")
        yield Loading(job.request.id, "last")

    monkeypatch.setitem(runners.RUNNERS, "echo", echo)
    ok, refused = Request(prompt="ok"), Request(prompt="refuse")
    assert [ev.message for ev in stream(worker.start(Job("echo", (ok,))))] == ["first", "last"]
    events = list(stream(worker.start(Job("echo", (refused,)))))
    assert [type(ev) for ev in events] == [Loading, Failed] and events[-1].message == "refused, in one line"


def test_an_unknown_kind_is_refused_when_started(worker):
    with pytest.raises(ValueError, match="no runner for a 'telepathy' job"):
        worker.start(Job("telepathy", (Request(),)))


def test_cancel_by_id_reaches_the_job_of_that_request(worker, monkeypatch):
    release = threading.Event()

    def wait(ctx: object, job: Job) -> Iterator[Loading]:
        release.wait(5)
        yield from ()

    monkeypatch.setitem(runners.RUNNERS, "wait", wait)
    running, queued = worker.start(Job("wait", (Request(),))), worker.start(Job("wait", (Request(), Request())))
    worker.cancel(queued.requests[1].id)
    assert queued.cancel.is_set() and not running.cancel.is_set()
    release.set()
    assert list(stream(running)) == [] and list(stream(queued)) == []


def test_a_beam_search_or_a_diff_reads_its_prompt_without_taking_a_run_id():
    first = Request().id + 1
    beam, diff = BeamRequest(prompt="x"), DiffRequest(prompt="x")
    assert beam.as_request().id == beam.id and diff.as_request().id == diff.id
    assert Request().id == first
