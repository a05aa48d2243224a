"""Branches without a model: which steps a record decides under new settings, the uncertain steps, the runner-up,
a forced token's record."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.core.record.trace import RunTrace, StepTrace
from app.core.sampler import forcing
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import sample
from app.core.sampler.step_view import resample_step
from app.core.session.branches import Replay, decided_by_record, replay, replay_finished, runner_up, uncertain_steps
from app.core.settings import SamplerSettings, StageOrder
from backends.ops import NUMPY

VOCAB = 1000  # above the 256 recorded logits: the tail is unknown to a replay


def recorded_run(settings: SamplerSettings, steps: int = 12, seed: int = 0) -> tuple[RunTrace, list[np.ndarray]]:
    """A run sampled by the real pipeline over seeded logits, and the full logits of each step."""
    rng = np.random.default_rng(seed)
    run = RunTrace(prompt_ids=[1, 2, 3], settings=settings, seed=7)
    history = History.start(NUMPY, VOCAB, run.prompt_ids) if settings.uses_penalties else None
    logits = []
    for i in range(steps):
        x = (rng.normal(size=VOCAB) * 2.5).astype(np.float32)
        s = sample(NUMPY, x, settings, float(rng.random()), history=history)
        run.steps.append(StepTrace(i, s, f"t{i}", tuple(str(int(t)) for t in s.top_ids[:20]), 0.0))
        logits.append(x)
    return run, logits


def full_draw(run: RunTrace, logits: list[np.ndarray], i: int, settings: SamplerSettings) -> int:
    """What the whole vocabulary draws at step i under `settings` with the step's own uniform."""
    history = History.start(NUMPY, VOCAB, run.prompt_ids, run.token_ids[:i]) if settings.uses_penalties else None
    return sample(NUMPY, logits[i], settings, run.steps[i].sample.u, history=history, record=False)


SETTINGS = [
    SamplerSettings(temperature=0),
    SamplerSettings(temperature=0.7, top_k=5),
    SamplerSettings(temperature=1.3, top_k=50, top_p=0.5),
    SamplerSettings(temperature=0.5, min_p=0.2),
    SamplerSettings(temperature=2.0, min_p=0.05, order=StageOrder.TEMPERATURE_LAST),
    SamplerSettings(temperature=0.9, top_k=8, repetition_penalty=1.5, frequency_penalty=0.5),
]


@pytest.mark.parametrize("new", SETTINGS, ids=lambda s: s.describe() if hasattr(s, "describe") else None)
def test_a_step_the_record_decides_draws_what_the_whole_vocabulary_draws(new):
    run, logits = recorded_run(SamplerSettings(temperature=1.0, seed=7))
    decided = [i for i in range(len(run.steps)) if decided_by_record(run, i, new)]
    assert decided  # each of these settings is decided by the record at some step of this run
    for i in decided:
        assert resample_step(run, i, new).token == full_draw(run, logits, i, new), i


@pytest.mark.parametrize("new", [SamplerSettings(temperature=0.8), SamplerSettings(top_p=0.3)], ids=["T", "top-p"])
def test_sampling_over_the_whole_vocabulary_is_never_decided_by_the_record(new):
    """Plain temperature sampling, and top-p alone, depend on the unrecorded tail's mass."""
    run, _ = recorded_run(SamplerSettings(temperature=1.0))
    assert not any(decided_by_record(run, i, new) for i in range(len(run.steps)))


def test_a_replay_stops_at_the_first_differing_token_or_the_first_undecided_step():
    run, logits = recorded_run(SamplerSettings(temperature=1.0, top_k=40))
    r = replay(run, SamplerSettings(temperature=0))
    assert r.diverged is not None and r.exact == r.diverged + 1
    assert [s.token for s in r.samples[: r.diverged]] == run.token_ids[: r.diverged]
    assert r.samples[r.diverged].token == int(np.argmax(logits[r.diverged])) != run.token_ids[r.diverged]
    steps = r.steps(run)
    assert [s.token_id for s in steps] == run.token_ids[: r.diverged] and [s.text for s in steps] == [
        s.text for s in run.steps[: r.diverged]]
    undecided = replay(run, SamplerSettings(temperature=0.5))
    assert undecided.exact == 0 and undecided.diverged is None


def test_a_replay_the_record_decides_to_the_end_finishes_without_the_model():
    run, _ = recorded_run(SamplerSettings(temperature=0))
    run.finish_reason = "eos"
    same = replay(run, SamplerSettings(temperature=0, top_k=3))
    assert same.diverged is None and same.exact == len(run.steps)
    assert replay_finished(run, same, SamplerSettings(temperature=0)) == "eos"
    run.finish_reason = "length"
    assert replay_finished(run, same, SamplerSettings(temperature=0, max_tokens=len(run.steps))) == "length"
    assert replay_finished(run, same, SamplerSettings(temperature=0, max_tokens=len(run.steps) + 1)) is None
    assert replay_finished(run, Replay(same.samples[:3], None), SamplerSettings(temperature=0)) is None


def test_uncertain_steps_are_the_top_share_or_those_above_a_threshold():
    h = [0.1, 2.0, math.nan, 0.0, 3.5, 1.0, 0.2, 2.5, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.1, 1.2, 1.3, 1.4, 1.5,
         1.6]
    assert uncertain_steps(h) == [4, 7]  # 5 % of 21 steps, rounded up: two, by entropy
    assert uncertain_steps(h, share=0.01) == [4]
    assert uncertain_steps(h, above=1.45) == [1, 4, 7, 19, 20]
    assert uncertain_steps([0.0, math.nan]) == []  # no step had a choice
    assert uncertain_steps([]) == []


def test_the_runner_up_and_a_forced_token_come_from_the_record():
    run, _ = recorded_run(SamplerSettings(temperature=1.0, top_k=10), steps=1)
    s = run.steps[0].sample
    alt = runner_up(s)
    assert alt == next(int(t) for t in s.top_ids if int(t) != s.token)
    forced = forcing.forced(s, alt)
    i = int(np.flatnonzero(s.top_ids == alt)[0])
    assert (forced.token, forced.rank, forced.u) == (alt, i, s.u)
    assert forced.prob == pytest.approx(float(s.final_probs[i]))
    assert forced.raw_logprob == pytest.approx(float(s.top_logits[i]) - s.raw_lse)
    np.testing.assert_array_equal(forced.probs, s.probs)
    with pytest.raises(ValueError, match="not among"):
        forcing.forced(s, VOCAB + 5)
