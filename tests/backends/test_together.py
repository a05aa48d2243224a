"""Requests on one prompt decoded together (`generate_together`) on both real backends: one prefill, one batch,
and every request's events those it makes alone: the same tokens, draws and stages, its float32 records within
`tests.records`' tolerance (a CPU's matrix kernels round by the number of rows)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from app.core.decoding.generation import Prefix, PromptError, generate
from app.core.decoding.together import generate_together
from app.core.events import Finished, Prefilled, Request, Step
from app.core.settings import SamplerSettings
from tests.records import assert_same_record

PROMPT = "def add(a, b):\n    return a + b\n\nfor i in range(10):"
WIDE = SamplerSettings(temperature=1.0, top_p=0.95, seed=11, max_tokens=12)
NARROW = SamplerSettings(temperature=0.7, top_k=20, repetition_penalty=1.3, seed=5, max_tokens=5)


class Counting:
    """The real model, its forward calls' batch sizes and lengths noted: (rows, tokens per row)."""

    def __init__(self, model: Any) -> None:
        self.model, self.calls = model, []

    def forward(self, tokens: Any, cache: Any, positions: str = "last") -> Any:
        self.calls.append((len(tokens), len(tokens[0])))
        return self.model.forward(tokens, cache, positions)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def columns() -> list[Request]:
    """Two columns on one prompt: different settings, seeds, sample counts and lengths (3 rows in all)."""
    return [Request(prompt=PROMPT, settings=WIDE, n=2), Request(prompt=PROMPT, settings=NARROW)]


def of(events: list, request: Request) -> list:
    return [e for e in events if e.request_id == request.id]


def same_step(a: Step, b: Step) -> None:
    assert (a.request_id, a.run_id, a.sequence, a.step, a.token_id, a.text) == \
        (b.request_id, b.run_id, b.sequence, b.step, b.token_id, b.text)
    assert_same_record(a.trace.sample, b.trace.sample, f"step {a.step}")  # (float32: within the tolerance)
    assert set(a.trace.top_texts) == set(b.trace.top_texts)


def test_each_request_makes_the_events_it_makes_alone(model):
    requests = columns()
    together = list(generate_together(model, requests, threading.Event()))
    for r in requests:
        got, alone = of(together, r), list(generate(model, r, threading.Event()))
        assert [type(e) for e in got] == [type(e) for e in alone]
        for a, b in zip(got, alone, strict=True):
            if isinstance(a, Step):
                same_step(a, b)
            elif isinstance(a, Finished):
                assert (a.reason, a.run_id, a.sequence) == (b.reason, b.run_id, b.sequence)
                assert a.trace.token_ids == b.trace.token_ids and a.trace.seed == b.trace.seed
                assert a.metrics.generated_tokens == b.metrics.generated_tokens
                assert a.metrics.kv_cache_bytes == b.metrics.kv_cache_bytes  # its rows' share of the cache
            else:
                assert (a.prompt_ids, a.prompt_text, a.seed) == (b.prompt_ids, b.prompt_text, b.seed)
    wide, narrow = (of(together, r) for r in requests)
    assert [f.trace.seed for f in wide if isinstance(f, Finished)] == [11, 12]
    assert sum(isinstance(e, Step) for e in narrow) == 5 and isinstance(narrow[-1], Finished)
    # the shorter column ends as soon as it is done, while the longer one goes on
    assert together.index(narrow[-1]) < together.index([e for e in wide if isinstance(e, Step)][-1])


def test_one_prefill_and_one_batch_serve_every_request(model):
    counting = Counting(model)
    requests = columns()
    events = list(generate_together(counting, requests, threading.Event()))
    prefilled = [e for e in events if isinstance(e, Prefilled)]
    assert [p.request_id for p in prefilled] == [r.id for r in requests]
    assert len({p.seconds for p in prefilled}) == 1
    prefills = [tokens for rows, tokens in counting.calls if rows == 1]
    assert sum(prefills) == len(prefilled[0].prompt_ids)  # the prompt, once (in chunks)
    steps = [c for c in counting.calls if c[0] != 1]
    assert len(steps) == len(counting.calls) - len(prefills) >= 11
    assert set(steps) == {(3, 1)}  # every step: the three rows in one forward


def test_the_shared_prompt_is_reused_by_the_next_run(model):
    prefix = Prefix()
    first = list(generate_together(model, columns(), threading.Event(), prefix))
    again = list(generate_together(model, columns(), threading.Event(), prefix))
    n = len(first[0].prompt_ids)
    assert {e.reused for e in again if isinstance(e, Prefilled)} == {n - 1}

    def tokens(events: list) -> list[list[int]]:
        return [f.trace.token_ids for f in events if isinstance(f, Finished)]

    assert tokens(again) == tokens(first)


def test_cancel_ends_every_request_and_leaves_the_prompt_reusable(model):
    cancel, prefix = threading.Event(), Prefix()
    requests = [Request(prompt=PROMPT, settings=WIDE.with_(max_tokens=200), n=2, ignore_eos=True),
                Request(prompt=PROMPT, settings=NARROW.with_(max_tokens=200), ignore_eos=True)]
    fins, seen = [], 0
    for e in generate_together(model, requests, cancel, prefix):
        seen += isinstance(e, Step)
        if seen > 4:
            cancel.set()
        fins += [e] if isinstance(e, Finished) else []
    assert [(f.request_id, f.reason) for f in fins] == [(requests[0].id, "cancelled")] * 2 + \
        [(requests[1].id, "cancelled")]
    greedy = Request(prompt=PROMPT, settings=SamplerSettings(temperature=0, max_tokens=6))
    warm = list(generate(model, greedy, threading.Event(), prefix))
    cold = list(generate(model, greedy, threading.Event()))
    assert warm[0].reused == len(warm[0].prompt_ids) - 1
    assert [e.token_id for e in warm if isinstance(e, Step)] == [e.token_id for e in cold if isinstance(e, Step)]


def test_a_cancel_before_the_prefill_finishes_every_run(model):
    cancel = threading.Event()
    cancel.set()
    fins = list(generate_together(model, columns(), cancel))
    assert [f.reason for f in fins] == ["cancelled"] * 3 and all(isinstance(f, Finished) for f in fins)


def test_a_prompt_too_long_for_the_context_is_a_prompt_error(model):
    ids = (5,) * model.info.context_length
    requests = [Request(prompt_ids=ids, settings=WIDE), Request(prompt_ids=ids, settings=NARROW)]
    with pytest.raises(PromptError, match="context holds"):
        list(generate_together(model, requests, threading.Event()))


def test_requests_on_different_prompts_are_refused(model):
    with pytest.raises(ValueError, match="share the model, the prompt"):
        generate_together(model, [Request(prompt="a"), Request(prompt="b")], threading.Event())
