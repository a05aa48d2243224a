"""The model thread: loads, generates and frees on one long-lived thread (MLX streams are thread-local)."""

from __future__ import annotations

import queue
from pathlib import Path

import pytest

from app.core.events import Failed, Finished, Loaded, Loading, Prefilled, Request, Scored, Step, job_id
from app.core.models.sources import ModelSpec
from app.core.runs.jobs import Job, stream
from app.core.runs.model_thread import ModelThread
from app.core.settings import SamplerSettings


def events_until_end(worker: ModelThread, timeout: float = 60) -> list:
    out = []
    while True:
        try:
            ev = worker.events.get(timeout=timeout)
        except queue.Empty:
            pytest.fail("the model thread went silent")
        out.append(ev)
        if isinstance(ev, (Finished, Failed)):
            return out


@pytest.fixture
def worker():
    w = ModelThread()
    yield w
    assert w.close()


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_generates_on_the_worker_thread(worker, tiny_path: Path, backend: str):
    spec = ModelSpec(str(tiny_path), backend)
    worker.submit(Request(model=spec, prompt="Hello", settings=SamplerSettings(max_tokens=6, seed=1)))
    evs = events_until_end(worker)
    kinds = [type(e) for e in evs]
    assert kinds[:1] != [Failed] and Loaded in kinds and Prefilled in kinds
    assert isinstance(evs[-1], Finished) and sum(isinstance(e, Step) for e in evs) == evs[-1].metrics.generated_tokens
    # the second request reuses the loaded model: no second load
    worker.submit(Request(model=spec, prompt="Hello", settings=SamplerSettings(max_tokens=6, seed=1)))
    again = events_until_end(worker)
    assert not any(isinstance(e, Loaded) for e in again)
    assert [e.token_id for e in again if isinstance(e, Step)] == [e.token_id for e in evs if isinstance(e, Step)]


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_errors_travel_as_events_and_the_thread_lives_on(worker, tiny_path: Path, backend: str):
    worker.submit(Request(model=ModelSpec("/no/such/dir", backend), prompt="x"))
    (failed,) = [e for e in events_until_end(worker) if isinstance(e, Failed)]
    assert "no model folder" in failed.message
    worker.submit(Request(model=ModelSpec(str(tiny_path), backend), prompt="",
                          messages=None, settings=SamplerSettings(max_tokens=2)))
    assert isinstance(events_until_end(worker)[-1], Finished)  # an empty prompt starts from BOS


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_cancel_stops_a_long_run(worker, tiny_path: Path, backend: str):
    worker.submit(Request(model=ModelSpec(str(tiny_path), backend), prompt="Hi",
                          settings=SamplerSettings(max_tokens=100_000), ignore_eos=True))
    n = 0
    while n < 5:
        if isinstance(worker.events.get(timeout=60), Step):
            n += 1
    worker.cancel()
    evs = events_until_end(worker)
    assert evs[-1].reason == "cancelled" and evs[-1].metrics.generated_tokens < 1000


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_each_job_streams_its_own_events_and_ends(worker, tiny_path: Path, backend: str):
    """A command's jobs, each on its own queue: a load's stream ends at its `Loaded`, a run's at its last `Finished`,
    a score's at its `Scored`; nothing of one reaches another's, nor the window's queue."""
    spec = ModelSpec(str(tiny_path), backend)
    load = worker.start(Job("load", (Request(model=spec, id=job_id()),)))
    run = worker.start(Job("plain", (Request(model=spec, prompt="Hi", settings=SamplerSettings(max_tokens=3), n=2),)))
    score = worker.start(Job("score", (Request(model=spec, prompt="Hi", id=job_id()),)))
    loaded, ran, scored = list(stream(load)), list(stream(run)), list(stream(score))
    assert isinstance(loaded[-1], Loaded) and {ev.request_id for ev in loaded} == {load.request.id}
    assert [type(ev) for ev in scored] == [Scored]  # the model is loaded already: no loading events
    assert {ev.run_id for ev in ran if isinstance(ev, Finished)} == set(run.request.run_ids)
    assert isinstance(ran[-1], Finished) and not any(isinstance(ev, (Loading, Loaded)) for ev in ran)
    assert worker.events.empty()


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_a_failed_job_ends_with_its_failed(worker, backend: str):
    events = list(stream(worker.start(Job("load", (Request(model=ModelSpec("/no/such/dir", backend), id=job_id()),)))))
    assert isinstance(events[-1], Failed) and "no model folder" in events[-1].message
