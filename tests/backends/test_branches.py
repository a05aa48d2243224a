"""Branches on both real backends: a fork takes its parent's first k steps and a forced token, reuses the cached
prefix, and continues the parent's sequence of uniforms; a replay re-draws a run under new settings."""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest

from app.core.decoding.generation import Prefix, generate
from app.core.events import Finished, Request, Step
from app.core.session.branches import replay, replay_request
from app.core.settings import SamplerSettings

PROMPT = "def add(a, b):\n    return a + b\n\nfor i in range(10):"
SAMPLING = SamplerSettings(temperature=1.0, top_k=40, seed=5, max_tokens=12)
PENALTIES = SAMPLING.with_(repetition_penalty=1.3, frequency_penalty=0.4, presence_penalty=0.2)


def run(model, request: Request, prefix: Prefix | None = None) -> tuple[list[Step], Finished]:
    events = list(generate(model, request, threading.Event(), prefix))
    return [e for e in events if isinstance(e, Step)], next(e for e in events if isinstance(e, Finished))


def branch(parent: Finished, k: int, **kw) -> Request:
    t = parent.trace
    return Request(prompt_ids=tuple(t.prompt_ids), settings=kw.pop("settings", t.settings),
                   inherited=tuple(t.steps[:k]), parent=(t.run_id, k), **kw)


@pytest.mark.parametrize("settings", [SAMPLING, PENALTIES], ids=["plain", "penalties"])
def test_forking_with_the_drawn_token_continues_exactly_as_the_parent(model, settings):
    """The branch point changes nothing else: same uniforms from step k on, same penalty counts."""
    prefix = Prefix()
    _, parent = run(model, Request(prompt=PROMPT, settings=settings, ignore_eos=True), prefix)
    k = 4
    steps, child = run(model, branch(parent, k, force=parent.trace.steps[k].token_id), prefix)
    assert child.trace.token_ids == parent.trace.token_ids
    assert [s.step for s in steps] == list(range(len(parent.trace.steps)))
    assert child.trace.steps[k].sample.u == parent.trace.steps[k].sample.u


def test_a_fork_takes_the_forced_token_reuses_the_prefix_and_records_the_step(model):
    prefix = Prefix()
    _, parent = run(model, Request(prompt=PROMPT, settings=SAMPLING, ignore_eos=True), prefix)
    k, at = 3, parent.trace.steps[3]
    runner_up = int(next(t for t in at.sample.top_ids if t != at.token_id))
    steps, child = run(model, branch(parent, k, force=runner_up, branch="fork"), prefix)
    t = child.trace
    assert t.token_ids[:k] == parent.trace.token_ids[:k] and t.token_ids[k] == runner_up
    assert t.parent == (parent.trace.run_id, k) and t.branch == "fork"
    n_prompt = len(parent.trace.prompt_ids)
    assert child.metrics.reused_tokens == n_prompt + k - 1  # only the last inherited token is computed again
    forced = t.steps[k].sample
    i = int(np.flatnonzero(forced.top_ids == runner_up)[0])
    assert forced.rank == i and forced.prob == pytest.approx(float(forced.final_probs[i]))
    # the step's distribution is the parent's (same context): only the token taken differs
    np.testing.assert_allclose(forced.probs, at.sample.probs, rtol=1e-4, atol=1e-6)
    assert len(steps) == len(t.steps) == SAMPLING.max_tokens


def test_regenerating_from_a_step_keeps_what_precedes_it(model):
    _, parent = run(model, Request(prompt=PROMPT, settings=SAMPLING, ignore_eos=True))
    _, child = run(model, branch(parent, 5, settings=SAMPLING.with_(seed=99), branch="regenerate"))
    assert child.trace.token_ids[:5] == parent.trace.token_ids[:5]
    assert child.trace.steps[:5] == parent.trace.steps[:5]


def test_a_replay_under_the_same_settings_changes_nothing(model):
    _, parent = run(model, Request(prompt=PROMPT, settings=SAMPLING))
    r = replay(parent.trace, SAMPLING)
    assert r.diverged is None and [s.token for s in r.samples] == parent.trace.token_ids


@pytest.mark.parametrize("new", [SamplerSettings(temperature=0, max_tokens=12),
                                 SAMPLING.with_(temperature=0.6, top_k=3)], ids=["greedy", "top-k 3"])
def test_a_replay_without_the_model_draws_what_the_model_would(model, new):
    """Greedy and top-k runs are decided by the recorded top-256 logits: replaying a run's record gives the
    tokens a run with the model and the same seed draws, up to and including the first one that differs."""
    _, parent = run(model, Request(prompt=PROMPT, settings=SAMPLING, ignore_eos=True))
    r = replay(parent.trace, new.with_(seed=parent.trace.seed))
    assert r.diverged is not None  # (the seed makes these settings draw differently within the run)
    assert r.exact == r.diverged + 1  # the record alone decided every step up to the one that differs
    _, fresh = run(model, Request(prompt=PROMPT, settings=new.with_(seed=parent.trace.seed), ignore_eos=True))
    upto = r.diverged + 1
    assert [s.token for s in r.samples[:upto]] == fresh.trace.token_ids[:upto]
    # the model takes over after the first differing token and goes on as a fresh run with that seed would
    assert fresh.trace.token_ids[r.diverged] != parent.trace.token_ids[r.diverged]
    request = replace(replay_request(parent.trace, new, r), ignore_eos=True)
    _, cont = run(model, request)
    assert cont.trace.token_ids == fresh.trace.token_ids
    assert cont.trace.parent == (parent.trace.run_id, r.diverged) and cont.trace.branch == "replay"
