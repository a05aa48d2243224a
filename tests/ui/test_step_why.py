"""A candidate's tooltip says why each stage cut it, in that stage's terms, with the threshold the record holds:
for every stage that can cut, on real sampler output (no hand-made record)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.core.record.trace import Sample
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import sample
from app.core.settings import SamplerSettings
from app.core.stage_table import RECORD_NAMES, STAGE
from app.ui.charts.shared import CUT, STAGES, stage_style
from app.ui.charts.step_chart import StepChart
from app.ui.formatting import format_prob
from backends.ops import NUMPY

VOCAB = 300


def logits(seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=VOCAB) * 3).astype(np.float32)


def first_cut(chart: StepChart, s: Sample, stage: str) -> str:
    """The tooltip of the first candidate `stage` cut (the test fails if it cut none)."""
    cut = [i for i in range(s.top_n) if s.cut_by(i) == stage]
    assert cut, f"{stage} cut no candidate"
    tip = chart.bar_tip(cut[0])
    assert f"<b>cut by {stage_style(stage).label}</b>: " in tip
    return tip


@pytest.fixture
def chart(qtbot) -> StepChart:
    c = StepChart()
    qtbot.addWidget(c)
    c.resize(900, 400)
    return c


@pytest.mark.parametrize(("stage", "changes", "says"), [
    ("typical_p", {"typical_p": 0.5}, "its surprise is further from the entropy than the tokens that already hold "
                                      "typical-p's {t} of the probability"),
    ("top_n_sigma", {"top_n_sigma": 1.0}, "below top-n-sigma's line ({t}: n standard deviations"),
    ("epsilon_cutoff", {"epsilon_cutoff": 0.01}, "below epsilon's cutoff ({t})"),
    ("eta_cutoff", {"eta_cutoff": 0.02}, "below eta's cutoff ({t}: min(ε, √ε · e^-entropy))"),
    ("xtc", {"xtc_probability": 1.0, "xtc_threshold": 0.05}, "XTC's coin fired and it is more likely than {t}, the "
                                                            "least likely candidate above the threshold"),
])
def test_a_cut_candidates_tooltip_gives_its_stages_reason_and_recorded_threshold(chart, stage, changes, says):
    s = sample(NUMPY, logits(), SamplerSettings(**changes), 0.5)
    chart.show_sample(s, tuple(f"t{int(i)}" for i in s.top_ids[: s.top_n]))
    t = float(s.thresholds[s.stage_index(stage)])
    assert math.isfinite(t) and t > 0
    assert says.format(t=format_prob(t)) in first_cut(chart, s, stage)


def test_mirostat_names_its_mu_from_the_recorded_line(chart):
    s = sample(NUMPY, logits(), SamplerSettings(mirostat_tau=3.0), 0.5)
    chart.show_sample(s, tuple(f"t{int(i)}" for i in s.top_ids[: s.top_n]))
    line = float(s.thresholds[s.stage_index("mirostat")])  # 2^-μ, μ starting at 2τ = 6
    assert f"above mirostat's μ = {-math.log2(line):.3g} (probability below {format_prob(line)})" in first_cut(
        chart, s, "mirostat")
    assert f"μ = {6:.3g} " in first_cut(chart, s, "mirostat")


def test_dry_cuts_only_where_its_penalty_overflows_and_says_so(chart):
    x = logits()
    top = int(np.argmax(x))
    history = History.start(NUMPY, VOCAB, [1, 2, 3])
    history.dry = np.zeros(VOCAB, dtype=np.float32)
    history.dry[top] = np.inf  # multiplier × base^L past float32's range, as `dry_vector` casts it
    s = sample(NUMPY, x, SamplerSettings(dry_multiplier=5.0), 0.5, history=history)
    chart.show_sample(s, tuple(f"t{int(i)}" for i in s.top_ids[: s.top_n]))
    assert s.cut_by(0) == "dry" and int(s.top_ids[0]) == top
    assert "it would extend a repeat so long that DRY's penalty is infinite" in first_cut(chart, s, "dry")


def test_the_charts_keep_a_colour_per_stage_and_read_its_label_from_the_stage_table():
    assert set(STAGES) <= set(RECORD_NAMES)  # no colour for a stage the table does not know
    for name in RECORD_NAMES:
        assert stage_style(name).label == STAGE[name].label
    assert stage_style("warp").label == "warp" and stage_style("warp").color == CUT  # an unknown name: grey
