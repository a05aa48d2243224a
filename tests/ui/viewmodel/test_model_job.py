"""A `ModelJob` hands its request and its own queue to the model thread, emits each queued event in order on its
timer, and stops draining once the view says the job is done."""

from __future__ import annotations

import queue

from app.core.decoding.beam import BeamFinished, BeamSettings, BeamStarted, BeamStepped
from app.core.events import Failed
from app.core.runs.beam_run import BeamRequest
from app.ui.viewmodel.model_job import ModelJob


def test_events_come_out_in_order_until_done(qtbot, window) -> None:
    job = ModelJob(window.playground)
    request = BeamRequest(model=window.playground.editing.model, prompt="Hi", settings=BeamSettings(2))
    seen, states = [], []
    job.event.connect(seen.append)
    job.running_changed.connect(states.append)

    def submit(r: BeamRequest, out: queue.Queue) -> None:
        assert r is request
        for i in range(3):
            out.put(i)

    job.start(request, submit)
    assert job.running and job.request is request and states == [True]
    qtbot.waitUntil(lambda: seen == [0, 1, 2], timeout=2000)
    job.done()
    assert not job.running and job.request is None and states == [True, False]
    job.stop()  # idle: nothing to cancel, no error


def test_a_real_search_arrives_started_first_finished_last(qtbot, window) -> None:
    job = ModelJob(window.playground)
    request = BeamRequest(model=window.playground.editing.model, prompt="Hi", settings=BeamSettings(2, max_tokens=3))
    seen = []
    job.event.connect(seen.append)
    job.start(request, window.playground.worker.beam)
    qtbot.waitUntil(lambda: any(isinstance(ev, (BeamFinished, Failed)) for ev in seen), timeout=60_000)
    job.done()
    assert isinstance(seen[0], BeamStarted) and isinstance(seen[-1], BeamFinished), seen[-1]
    assert all(isinstance(ev, BeamStepped) for ev in seen[1:-1]) and len(seen) > 2
