"""What the step views read of a record: each stage's survivors and kept mass (from `kept_counts`), the drawn token
outside the candidates drawn, and a preview that is one record over the recorded logits, saying what of it is
approximate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.core.record.trace import RunTrace, Sample, StepTrace
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import sample
from app.core.sampler.step_view import RAW_ROW, drawn_outside, make_preview, stages_kept
from app.core.settings import SamplerSettings, StageOrder
from backends.ops import NUMPY

FILTERS = SamplerSettings(temperature=0.8, top_k=20, top_p=0.9, min_p=0.05)


def draw(x: np.ndarray, settings: SamplerSettings, u: float = 0.4, **kw: object) -> Sample:
    s = sample(NUMPY, x.astype(np.float32), settings, u, **kw)
    assert isinstance(s, Sample)
    return s


def flat_run(order: StageOrder, steps: int = 8, vocab: int = 3000) -> RunTrace:
    """A run over flat seeded logits: the top 256 hold only part of the mass, as with a real model's tail."""
    rng = np.random.default_rng(11)
    settings = FILTERS.with_(order=order)
    run = RunTrace(prompt_ids=[1, 2], settings=settings, seed=1)
    hist = History.start(NUMPY, vocab, [1, 2])
    for i in range(steps):
        s = draw(rng.normal(size=vocab) * 1.2, settings, float(rng.random()), history=hist)
        run.steps.append(StepTrace(i, s, f"t{i}", tuple(f"c{int(t)}" for t in s.top_ids[:20]), 0.0))
    return run


def test_each_stage_says_what_it_kept_and_the_mass_of_its_input_they_hold():
    x = np.log(np.array([0.4, 0.3, 0.15, 0.1, 0.05]))
    s = draw(x, SamplerSettings(temperature=1.0, top_k=3, top_p=0.8, order="temperature-last"))
    got = stages_kept(s)
    assert [g.name for g in got] == ["top_k", "top_p", "temperature"]
    assert got[0].kept == 3 and got[0].mass == pytest.approx(0.85, abs=1e-6)  # 0.4 + 0.3 + 0.15 of the raw
    assert got[1].kept == 2 and got[1].mass == pytest.approx(0.7 / 0.85, abs=1e-6)  # of top-k's renormalized
    assert got[2].kept is None and got[2].mass is None  # temperature cuts nothing
    assert [int(c) for c in s.kept_counts[:2]] == [got[0].kept, got[1].kept]  # the recorded counts


def test_a_mass_is_given_only_where_every_survivor_is_a_recorded_candidate():
    x = np.random.default_rng(0).normal(size=500)
    s = draw(x, SamplerSettings(temperature=1.0, top_k=60), top_n=20)
    (_, top_k), = [(g.name, g) for g in stages_kept(s) if g.name == "top_k"]
    assert top_k.kept == 60 and top_k.mass is None  # 40 of its 60 survivors are outside the 20 recorded


def test_the_drawn_token_outside_the_candidates_drawn_is_found_with_its_numbers():
    x = np.linspace(1, 0, 100)  # nearly flat: u = 0.99 draws a token far down
    s = draw(x, SamplerSettings(temperature=2.0), u=0.99)
    assert s.rank >= 20
    out = drawn_outside(s, 20)
    assert out.rank == s.rank and out.final == s.prob
    assert out.raw == pytest.approx(math.exp(s.raw_logprob))
    assert drawn_outside(s, s.rank + 1) is None


@pytest.mark.parametrize("order", list(StageOrder))
def test_a_preview_is_one_record_every_line_of_which_is_what_the_sampler_computes(order):
    """The issue: top-k's line came from the 256 recorded logits while its marks were the whole vocabulary's, so
    candidates top-k kept sat under its line. Now each stage's row and threshold come from one re-sample."""
    run = flat_run(order)
    new = run.settings.with_(temperature=1.78)
    for i in range(len(run.steps)):
        p = make_preview(run, i, new)
        s = p.sample
        k = s.stage_index("top_k")
        kept, marks, line = s.kept[k], s.probs[k], s.thresholds[k]
        assert (marks[kept] >= line).all() and (marks[~kept] < line).all()
        st = run.steps[i].sample
        alone = draw(st.top_logits[np.argsort(st.top_ids, kind="stable")], new, st.u,
                     history=_history_of(run, i, st), top_n=20)  # the sampler on the recorded logits alone
        np.testing.assert_array_equal(s.probs, alone.probs)
        np.testing.assert_array_equal(s.thresholds, alone.thresholds)
        np.testing.assert_array_equal(s.kept, alone.kept)


def _history_of(run: RunTrace, i: int, st: Sample) -> History:
    ids = np.sort(st.top_ids)
    at = {int(t): j for j, t in enumerate(ids)}
    local = [at[t] for t in [*run.prompt_ids, *run.token_ids[:i]] if t in at]
    hist = History.start(NUMPY, len(ids), local)
    gen = np.bincount([at[t] for t in run.token_ids[:i] if t in at], minlength=len(ids))
    hist.generated = gen.astype(np.float32)
    return hist


def test_a_preview_names_the_rows_before_top_k_as_approximate_and_the_mass_the_recorded_logits_hold():
    first = make_preview(flat_run(StageOrder.TEMPERATURE_FIRST), 3, FILTERS.with_(temperature=1.5))
    assert first.approximate == (RAW_ROW, "temperature") and 0 < first.recorded_mass < 0.9
    last = make_preview(flat_run(StageOrder.TEMPERATURE_LAST), 3, FILTERS.with_(temperature=1.5,
                                                                              order="temperature-last"))
    assert last.approximate == (RAW_ROW,)  # top-k ran first: every row after it is exact
    no_k = make_preview(flat_run(StageOrder.TEMPERATURE_FIRST), 3, FILTERS.with_(top_k=0))
    assert no_k.approximate == (RAW_ROW, "temperature", "top_p", "min_p")
