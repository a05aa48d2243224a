"""The model thread runs requests together (`ModelThread.submit_together`): columns on one model decode in one
batch, columns on other models (another local model, a server) stream beside them, a model that does not fit
beside the others fails alone, and one cancel ends the job. Real tiny models, a real local HTTP server."""

from __future__ import annotations

import queue
from dataclasses import replace
from pathlib import Path

import pytest

from app.core.events import Failed, Finished, Loaded, Prefilled, Request, Step
from app.core.models.catalog import estimate_memory
from app.core.models.sources import ModelSpec
from app.core.runs.model_thread import ModelThread
from app.core.settings import SamplerSettings
from tests.records import assert_same_record
from tests.remote_fake import fake_server, stream_tokens
from tests.tiny import make_model

PROMPT = "def add(a, b):\n    return a + b\n\nfor i in range(10):"
WIDE = SamplerSettings(temperature=1.0, top_p=0.95, seed=11, max_tokens=10)
NARROW = SamplerSettings(temperature=0.7, top_k=20, repetition_penalty=1.3, seed=5, max_tokens=6)


@pytest.fixture(scope="module")
def other_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second tiny model: other weights, the same tokenizer."""
    return make_model(tmp_path_factory.mktemp("models") / "tiny-other", chat=True, seed=1)


@pytest.fixture
def worker():
    w = ModelThread()
    yield w
    assert w.close()


def until_done(worker: ModelThread, requests: list[Request], timeout: float = 60) -> list:
    """The events until every request has ended (each of its runs Finished, or the request Failed)."""
    pending = {r.id: set(r.run_ids) for r in requests}
    out = []
    while pending:
        try:
            ev = worker.events.get(timeout=timeout)
        except queue.Empty:
            pytest.fail("the model thread went silent")
        out.append(ev)
        if isinstance(ev, Failed):
            pending.pop(ev.request_id, None)
        elif isinstance(ev, Finished) and ev.request_id in pending:
            pending[ev.request_id].discard(ev.run_id)
            if not pending[ev.request_id]:
                del pending[ev.request_id]
    return out


def alone(request: Request, worker: ModelThread | None = None) -> list:
    """The events of the same request (same ids) run by itself: on a thread of its own (a cold prefix cache: the
    same prefill), or on `worker`."""
    again, own = replace(request), worker is None
    worker = ModelThread() if own else worker
    try:
        worker.submit(again)
        return until_done(worker, [again])
    finally:
        assert not own or worker.close()


def steps(events: list, request: Request) -> list[Step]:
    return [e for e in events if isinstance(e, Step) and e.request_id == request.id]


def assert_same_steps(got: list[Step], want: list[Step]) -> None:
    assert [(s.run_id, s.sequence, s.step, s.token_id, s.text) for s in got] == \
        [(s.run_id, s.sequence, s.step, s.token_id, s.text) for s in want]
    for a, b in zip(got, want, strict=True):
        if a.trace is not None and a.trace.sample.stage_names:  # a full record: within float32's rounding by rows
            assert_same_record(a.trace.sample, b.trace.sample, f"step {a.step}")


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_columns_on_one_model_decode_in_one_batch_each_as_it_would_alone(worker, tiny_path: Path, backend: str):
    spec = ModelSpec(str(tiny_path), backend)
    requests = [Request(model=spec, prompt=PROMPT, settings=WIDE, n=2),
                Request(model=spec, prompt=PROMPT, settings=NARROW)]
    assert worker.submit_together(requests) == tuple(r.id for r in requests)
    events = until_done(worker, requests)
    assert not any(isinstance(e, Failed) for e in events)
    assert sum(isinstance(e, Loaded) for e in events) == 1
    prefilled = [e for e in events if isinstance(e, Prefilled)]
    assert [p.request_id for p in prefilled] == [r.id for r in requests] and len({p.seconds for p in prefilled}) == 1
    # (one prefill: the same seconds) and one batch: the shorter column's steps come among the longer one's
    who = [e.request_id for e in events if isinstance(e, Step)]
    assert who.index(requests[1].id) < 3 and who[-1] == requests[0].id
    for r in requests:
        assert_same_steps(steps(events, r), steps(alone(r), r))


@pytest.mark.needs("torch", "mlx")
def test_columns_on_two_models_stream_together_each_as_it_would_alone(worker, tiny_path: Path, other_path: Path):
    a = Request(model=ModelSpec(str(tiny_path), "torch"), prompt=PROMPT, settings=WIDE, ignore_eos=True)
    b = Request(model=ModelSpec(str(other_path), "mlx"), prompt=PROMPT, settings=NARROW, ignore_eos=True)
    worker.submit_together([a, b])
    events = until_done(worker, [a, b])
    assert {e.request_id for e in events if isinstance(e, Loaded)} == {a.id, b.id}
    who = [e.request_id for e in events if isinstance(e, Step)]
    assert who[:12] == [a.id, b.id] * 6 and who[12:] == [a.id] * 4  # one step each in turn, then the longer one
    got_a, got_b = steps(events, a), steps(events, b)
    assert [s.token_id for s in got_a] != [s.token_id for s in got_b][: len(got_a)]
    assert_same_steps(got_a, steps(alone(a), a))
    assert_same_steps(got_b, steps(alone(b), b))


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_a_model_that_does_not_fit_beside_the_others_fails_alone(tiny_path: Path, other_path: Path, backend: str):
    one = estimate_memory(tiny_path).needed_bytes
    worker = ModelThread(memory=one * 3 // 2)  # room for one tiny model, not for two
    try:
        a = Request(model=ModelSpec(str(tiny_path), backend), prompt=PROMPT, settings=WIDE)
        b = Request(model=ModelSpec(str(other_path), backend), prompt=PROMPT, settings=NARROW)
        worker.submit_together([a, b])
        events = until_done(worker, [a, b])
    finally:
        assert worker.close()
    (failed,) = [e for e in events if isinstance(e, Failed)]
    assert failed.request_id == b.id
    assert failed.message.startswith("tiny-other does not fit beside tiny-llama in memory: this model needs about")
    (fin,) = [e for e in events if isinstance(e, Finished)]
    assert fin.request_id == a.id and fin.reason == "length" and len(steps(events, a)) == 10


@pytest.mark.needs("torch")
def test_cancelling_one_column_cancels_the_whole_job(worker, tiny_path: Path, other_path: Path):
    long = WIDE.with_(max_tokens=100_000)
    a = Request(model=ModelSpec(str(tiny_path), "torch"), prompt=PROMPT, settings=long, n=2, ignore_eos=True)
    b = Request(model=ModelSpec(str(other_path), "torch"), prompt=PROMPT, settings=long, ignore_eos=True)
    worker.submit_together([a, b])
    seen = 0
    while seen < 6:
        seen += isinstance(worker.events.get(timeout=60), Step)
    worker.cancel(b.id)
    fins = [e for e in until_done(worker, [a, b]) if isinstance(e, Finished)]
    assert sorted((f.request_id, f.sequence, f.reason) for f in fins) == \
        [(a.id, 0, "cancelled"), (a.id, 1, "cancelled"), (b.id, 0, "cancelled")]
    assert all(f.metrics.generated_tokens < 1000 for f in fins)


@pytest.mark.needs("torch")
def test_a_server_can_be_a_column_beside_a_local_model(worker, tiny_path: Path):
    local = Request(model=ModelSpec(str(tiny_path), "torch"), prompt=PROMPT, settings=WIDE, ignore_eos=True)
    with fake_server(stream_tokens(5, delay=0.01)) as srv:
        served = Request(model=ModelSpec("", "remote", base_url=srv.url), prompt=PROMPT,
                         settings=NARROW.with_(max_tokens=5))
        worker.submit_together([local, served])
        events = until_done(worker, [local, served])
    assert not any(isinstance(e, Failed) for e in events)
    assert [s.text for s in steps(events, served)] == [f"w{i}" for i in range(5)]
    who = [e.request_id for e in events if isinstance(e, Step)]
    assert who[:10] == [local.id, served.id] * 5
    assert_same_steps(steps(events, local), steps(alone(local), local))


@pytest.mark.needs("torch")
def test_a_later_job_of_one_model_frees_the_models_held_beside_it(worker, tiny_path: Path, other_path: Path):
    def both() -> list[Request]:
        return [Request(model=ModelSpec(str(p), "torch"), prompt=PROMPT, settings=NARROW)
                for p in (tiny_path, other_path)]

    first = both()
    worker.submit_together(first)
    assert {e.request_id for e in until_done(worker, first) if isinstance(e, Loaded)} == {r.id for r in first}
    again = both()
    worker.submit_together(again)  # both still held: nothing loads
    assert not any(isinstance(e, Loaded) for e in until_done(worker, again))
    alone(again[0], worker)  # a job of the main model alone: the other goes
    last = both()
    worker.submit_together(last)
    assert [e.request_id for e in until_done(worker, last) if isinstance(e, Loaded)] == [last[1].id]
    held = alone(last[1], worker)  # a job of the model held beside: it becomes the main one, loaded already
    assert not any(isinstance(e, Loaded) for e in held) and isinstance(held[-1], Finished)


def test_two_columns_on_one_server_stream_side_by_side(worker):
    with fake_server(stream_tokens(4, delay=0.01)) as srv:
        spec = ModelSpec("", "remote", base_url=srv.url)
        cols = [Request(model=spec, prompt=PROMPT, settings=s.with_(max_tokens=4)) for s in (WIDE, NARROW)]
        worker.submit_together(cols)
        events = until_done(worker, cols)
        sent = sorted(b["temperature"] for b in srv.bodies)
    assert sum(isinstance(e, Loaded) for e in events) == 1
    assert [e.request_id for e in events if isinstance(e, Step)] == [cols[0].id, cols[1].id] * 4
    assert [f.reason for f in events if isinstance(f, Finished)] == ["length", "length"]
    assert sent == [0.7, 1.0]  # each column's own settings
