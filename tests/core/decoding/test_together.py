"""How requests are grouped to decode together, and how several event streams interleave (no models)."""

from __future__ import annotations

from collections.abc import Iterator

from app.core.decoding.together import groups, interleave, share_key
from app.core.events import Finished, Prefilled, Request, Step
from app.core.metrics import Metrics
from app.core.models.sources import ModelSpec
from app.core.settings import SamplerSettings


def test_requests_on_one_model_and_prompt_group_together_in_the_order_they_came():
    other = ModelSpec("/models/other", "torch")
    a = Request(prompt="x", settings=SamplerSettings(temperature=0.2))
    b = Request(prompt="x", settings=SamplerSettings(temperature=1.2), n=4)
    c = Request(model=other, prompt="x")
    d = Request(prompt="y")
    e = Request(prompt="x", top_n=5)  # records another top-N: its Sample arrays would differ
    assert groups([a, c, b, d, e]) == [[a, b], [c], [d], [e]]


def test_a_branch_a_forced_token_or_a_draft_runs_alone():
    base = Request(prompt="x")
    assert share_key(base) == share_key(Request(prompt="x", settings=SamplerSettings(seed=3)))
    for alone in (Request(prompt="x", force=5), Request(prompt="x", draft=ModelSpec("/d", "torch"))):
        assert share_key(alone) is None
        assert groups([base, alone, alone]) == [[base], [alone], [alone]]


def stream(rid: int, n: int) -> Iterator:
    yield Prefilled(rid, (1,), "x", 0, 0.0)
    for k in range(n):
        yield Step(rid, k, k, "t", None, None)
    yield Finished(rid, "length", Metrics(), None)


def test_streams_interleave_one_step_at_a_time_each_until_all_have_ended():
    events = list(interleave([stream(1, 3), stream(2, 1), stream(3, 2)]))
    steps = [(e.request_id, e.step) for e in events if isinstance(e, Step)]
    assert steps == [(1, 0), (2, 0), (3, 0), (1, 1), (3, 1), (1, 2)]
    for rid, n in ((1, 3), (2, 1), (3, 2)):  # each stream's own events, whole and in order
        assert [e for e in events if e.request_id == rid] == list(stream(rid, n))
    assert isinstance(events[0], Prefilled) and isinstance(events[1], Step)  # other events pass as they come
