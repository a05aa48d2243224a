"""A `ModelJob` starts a job on the model thread with its own queue, emits each queued event in order on its timer,
and stops draining once the view says the job is done, or once the thread has ended the job and all are emitted."""

from __future__ import annotations

from app.core.decoding.beam import BeamFinished, BeamSettings, BeamStarted, BeamStepped
from app.core.events import Failed
from app.core.runs.beam_run import BeamRequest
from app.core.runs.jobs import Job
from app.ui.viewmodel.model_job import ModelJob


def held_jobs(monkeypatch, window) -> list[Job]:
    """The jobs the window's model thread is given, held there unserved (the test plays the thread)."""
    started: list[Job] = []
    monkeypatch.setattr(window.playground.worker, "start", lambda job: started.append(job) or job)
    return started


def test_events_come_out_in_order_until_done(qtbot, window, monkeypatch) -> None:
    started = held_jobs(monkeypatch, window)
    job = ModelJob(window.playground)
    request = BeamRequest(model=window.playground.editing.model, prompt="Hi", settings=BeamSettings(2))
    seen, states = [], []
    job.event.connect(seen.append)
    job.running_changed.connect(states.append)
    job.start("beam", request)
    (given,) = started
    assert given.kind == "beam" and given.requests == (request,) and given.status is window.playground.worker.events
    assert job.running and job.request is request and states == [True]
    for i in range(3):
        given.out.put(i)
    qtbot.waitUntil(lambda: seen == [0, 1, 2], timeout=2000)
    job.done()
    assert not job.running and job.request is None and states == [True, False]
    job.stop()  # idle: nothing to cancel, no error
    job.done()  # and nothing more to end: no second signal
    assert states == [True, False]


def test_a_job_the_thread_ended_is_done_once_drained(qtbot, window, monkeypatch) -> None:
    started = held_jobs(monkeypatch, window)
    job = ModelJob(window.playground)
    seen, states = [], []
    job.event.connect(seen.append)
    job.running_changed.connect(states.append)
    job.start("beam", BeamRequest(model=window.playground.editing.model, prompt="Hi"))
    job.stop()
    assert started[0].cancel.is_set()
    started[0].out.put("last")
    started[0].ended.set()  # (a cancelled download: no final event of the search)
    qtbot.waitUntil(lambda: not job.running, timeout=2000)
    assert seen == ["last"] and states == [True, False]


def test_a_real_search_arrives_started_first_finished_last(qtbot, window) -> None:
    job = ModelJob(window.playground)
    request = BeamRequest(model=window.playground.editing.model, prompt="Hi", settings=BeamSettings(2, max_tokens=3))
    seen = []
    job.event.connect(seen.append)
    job.start("beam", request)
    qtbot.waitUntil(lambda: any(isinstance(ev, (BeamFinished, Failed)) for ev in seen), timeout=60_000)
    job.done()
    assert isinstance(seen[0], BeamStarted) and isinstance(seen[-1], BeamFinished), seen[-1]
    assert all(isinstance(ev, BeamStepped) for ev in seen[1:-1]) and len(seen) > 2
