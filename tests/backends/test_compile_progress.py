"""With --compile the model thread says when the decode step starts compiling and how long it took (`Compiling`
events, the words the window, the CLI and the bench show): a real torch.compile of the tiny Llama, once per batch
size, in order, and never again for a size already compiled."""

from __future__ import annotations

import pytest

from app.core.events import Compiling, Event, Failed, Finished, Request, Step
from app.core.models.sources import ModelSpec
from app.core.runs.model_thread import ModelThread
from app.core.settings import SamplerSettings
from backends.base import LoadOptions

torch = pytest.importorskip("torch")

from backends.torch import static as torch_static  # noqa: E402 - after the skip

STATIC_LEN = 48


def events_of(thread: ModelThread, request: Request) -> list[Event]:
    """Every event of `request`, up to its last sample's end."""
    thread.submit(request)
    seen: list[Event] = []
    left = set(request.run_ids)
    while left:
        ev = thread.events.get(timeout=300)
        assert not isinstance(ev, Failed), ev.message
        seen.append(ev)
        if isinstance(ev, Finished):
            left.discard(ev.run_id)
    return seen


def test_each_batch_sizes_compile_is_said_once_as_it_starts_and_when_done(tiny_path, monkeypatch):
    monkeypatch.setattr(torch_static, "CPU_MODE", "default")  # a CPU's max-autotune tunes for minutes
    monkeypatch.setattr(torch_static, "CPU_SIZES", (1, 2))  # as on CUDA, where every batch size compiles
    spec = ModelSpec(str(tiny_path), "torch",
                     options=LoadOptions(device="cpu", dtype="float32", compile_len=STATIC_LEN))
    thread = ModelThread()
    settings = SamplerSettings(temperature=0.0, max_tokens=4)
    try:
        runs = [events_of(thread, Request(model=spec, prompt="Hello", settings=settings, ignore_eos=True, n=n))
                for n in (1, 1, 2)]
    finally:
        thread.close()
    said = [[(ev.rows, ev.seconds is None) for ev in run if isinstance(ev, Compiling)] for run in runs]
    assert said == [[(1, True), (1, False)], [], [(2, True), (2, False)]]
    first = runs[0]
    start, done = (i for i, ev in enumerate(first) if isinstance(ev, Compiling))
    steps = [i for i, ev in enumerate(first) if isinstance(ev, Step)]
    assert steps[0] < start < done < steps[1]  # the first decode step (step 1) waits for the compile
    assert first[done].seconds > 0 and first[done].request_id == first[steps[0]].request_id
    assert first[start].message == "Compiling the decode step (first run only)…"
    assert first[done].message == f"Compiled the decode step in {first[done].seconds:.0f} s"
    assert "for 2 rows" in next(ev for ev in runs[2] if isinstance(ev, Compiling)).message


def test_no_compile_asked_no_compile_said(tiny_path):
    thread = ModelThread()
    spec = ModelSpec(str(tiny_path), "torch", options=LoadOptions(device="cpu", dtype="float32"))
    try:
        run = events_of(thread, Request(model=spec, prompt="Hello", settings=SamplerSettings(max_tokens=3)))
    finally:
        thread.close()
    assert [ev for ev in run if isinstance(ev, Compiling)] == []
    assert any(isinstance(ev, Step) for ev in run)
