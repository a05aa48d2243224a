"""The think budget on numpy and hand-made ids: the soft budget is a stage whose record is exactly the logit it added;
the hard one asks for the closing marker once the span holds the budget's think tokens."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.core.record.spans import Markers
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import sample
from app.core.sampler.think_budget import MAX_RAISE, SOFT_RAISE, ThinkState, soft_raise
from app.core.settings import SamplerSettings
from app.core.stage_table import STAGE
from backends.ops import NUMPY

VOCAB = 40
MARKERS = Markers("think-tags", open=(1,), close=(2,), answer=(3,))


def test_the_soft_raise_starts_at_three_quarters_of_the_budget_and_reaches_its_mark_at_the_budget():
    assert [soft_raise(c, 8) for c in (0, 5, 6, 7, 8)] == pytest.approx([0, 0, 0, SOFT_RAISE / 2, SOFT_RAISE])
    assert soft_raise(16, 8) == pytest.approx(SOFT_RAISE * 5) and soft_raise(10**6, 8) == MAX_RAISE
    assert soft_raise(5, 0) == 0


def test_the_soft_budget_s_stage_record_equals_the_logit_it_added():
    s = SamplerSettings(temperature=1.0, think_budget=8, think_soft=True)
    assert s.enabled_stages(VOCAB)[:1] == ("think_budget",) and STAGE["think_budget"].is_on(s)
    state = ThinkState.start(MARKERS, [1], [5] * 7, s)  # 7 think tokens drawn: halfway up the ramp
    history = History.start(NUMPY, VOCAB, [1], [5] * 7)
    history.think = state
    logits = np.random.default_rng(0).normal(size=VOCAB).astype(np.float32)
    rec = sample(NUMPY, logits, s, 0.3, history=history, top_n=VOCAB)
    i = rec.stage_index("think_budget")
    assert rec.thresholds[i] == pytest.approx(state.bias()) and state.bias() == pytest.approx(SOFT_RAISE / 2)
    into, out = rec.probs[i], rec.probs[i + 1]  # (row i: the stage's input)
    change = np.log(out) - np.log(into)  # (N,): each candidate's log-probability change through the stage
    close = int(np.flatnonzero(rec.top_ids[:VOCAB] == 2)[0])
    others = np.delete(change, close)
    assert np.ptp(others) < 1e-5  # every other token moved by the same normalizing shift
    assert change[close] - others[0] == pytest.approx(SOFT_RAISE / 2, abs=1e-4)  # the marker: by the raise


def test_outside_the_think_span_the_soft_budget_adds_nothing():
    s = SamplerSettings(think_budget=1, think_soft=True)
    state = ThinkState.start(MARKERS, [1, 9, 2], [9, 9], s)  # the span closed in the prompt
    assert not state.tracker.thinking and state.bias() == 0 and not state.bias_vector(VOCAB).any()


def test_the_hard_budget_asks_for_the_closing_marker_after_exactly_its_think_tokens():
    s = SamplerSettings(think_budget=3)
    state = ThinkState.start(MARKERS, [7, 1, 8], [], s)  # the prompt's own think token does not count
    asked = []
    for token in (11, 12, 13, 14):
        due = state.due()
        asked.append(due)
        state.push(due if due is not None else token)
    assert asked == [None, None, None, 2] and state.forced and not state.tracker.thinking
    assert state.tracker.think_tokens == 3
    assert state.due() is None  # closed: nothing more is due


def test_a_branch_counts_the_think_tokens_it_inherited():
    state = ThinkState.start(MARKERS, [1], [5, 6], SamplerSettings(think_budget=3))
    assert state.due() is None
    state.push(7)
    assert state.due() == 2


def test_a_soft_budget_never_forces():
    state = ThinkState.start(MARKERS, [1], [5] * 50, SamplerSettings(think_budget=3, think_soft=True))
    assert state.due() is None and state.bias() == pytest.approx(min(SOFT_RAISE * (50 - 2.25) / 0.75, MAX_RAISE))
    assert math.isclose(state.bias_vector(VOCAB)[2], state.bias(), rel_tol=1e-6)


def test_no_thinking_closes_a_span_as_soon_as_it_opens_soft_budget_or_not():
    for s in (SamplerSettings(think=False), SamplerSettings(think=False, think_budget=8, think_soft=True)):
        opened = ThinkState.start(MARKERS, [7, 1], [], s)  # a template that opens the span for the model
        assert opened.due() == 2
        state = ThinkState.start(MARKERS, [7], [], s)
        assert state.due() is None  # in the answer: nothing to close
        state.push(1)  # the model opens one anyway
        assert state.due() == 2
        state.push(2)
        assert state.forced and not state.tracker.thinking and state.due() is None
