"""The step chart reads at any size: a log axis by default (the tail and the cut lines above the floor), the drawn
token outside the candidates drawn shown after a gap, a legend that never sits on the bars, fewer candidates with
readable labels at a small width; the step panel's stage strip and preview say what the record says. Each widget
on its own, fed records; no window."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from app.core.record.trace import RunTrace, Sample, StepTrace
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import sample
from app.core.sampler.step_view import make_preview, stages_kept
from app.core.settings import SamplerSettings, StageOrder
from app.ui.charts.step_chart import StepChart
from app.ui.formatting import format_prob, stage_strip
from app.ui.run_view.step_panel import StepPanel
from backends.ops import NUMPY

FILTERS = SamplerSettings(temperature=0.8, top_k=12, top_p=0.9, min_p=0.02)


def record(settings: SamplerSettings, seed: int = 0, vocab: int = 400, u: float | None = None) -> Sample:
    rng = np.random.default_rng(seed)
    s = sample(NUMPY, (rng.normal(size=vocab) * 1.5).astype(np.float32), settings,
               float(rng.random()) if u is None else u)
    assert isinstance(s, Sample)
    return s


def texts_of(s: Sample) -> tuple[str, ...]:
    return tuple(f"tok{int(i)}" for i in s.top_ids[: s.top_n])


@pytest.fixture
def chart(qtbot) -> StepChart:
    c = StepChart()
    qtbot.addWidget(c)
    c.resize(900, 400)
    c.show()
    return c


def test_probabilities_are_written_one_way_and_never_as_zeros_that_hide_a_value():
    assert [format_prob(p) for p in (0.412, 0.0035, 3.1e-4, 2.5e-7, 0.0, 1.0)] == [
        "0.412", "0.0035", "3.1e-4", "2.5e-7", "0", "1.000"]
    for p in np.geomspace(1e-12, 1, 200):
        assert format_prob(float(p)) not in ("0.000", "0.0e+00", "0")


def test_the_default_axis_is_logarithmic_and_puts_the_tail_and_every_cut_line_above_its_floor(chart):
    s = record(FILTERS)
    chart.show_sample(s, texts_of(s))
    assert chart.scale.log and chart.getPlotItem().getAxis("left").labelText == "probability (log)"
    floor = chart.scale.prob(chart.scale.base)
    drawn = s.probs[:, : chart.n]
    assert floor < drawn[drawn > 0].min()  # the least candidate drawn still has a bar
    for name, line in chart.stage_lines.items():
        if line.line.isVisible():
            assert line.line.value() > chart.scale.base and line.threshold == s.thresholds[s.stage_index(name)]
    ticks = [label for _, label in chart.getPlotItem().getAxis("left")._tickLevels[0]]
    assert ticks[-3:] == ["0.01", "0.1", "1"]
    chart.set_log(False)  # linear: the bars are the record's numbers themselves
    np.testing.assert_array_equal(chart.raw.opts["height"], s.probs[0, : chart.n])
    assert chart.raw.opts["y0"] == 0


def test_a_drawn_token_outside_the_candidates_is_a_separate_outlined_bar_after_a_gap(chart):
    s = record(SamplerSettings(temperature=2.0), seed=3, vocab=3000, u=0.999)  # a token far down the list
    assert s.rank >= 20
    texts = texts_of(s)[:20]
    chart.show_sample(s, texts, drawn_text=" far")
    n = chart.n
    np.testing.assert_array_equal(chart.outside_bars.opts["x"], [n + 1 - 0.2, n + 1 + 0.2])  # one slot apart
    want = np.array([math.exp(s.raw_logprob), s.prob])
    np.testing.assert_allclose(chart.scale.prob(0) * 10 ** (chart.outside_bars.opts["height"] + chart.scale.base),
                               want, rtol=1e-9)
    ticks = dict(chart.getPlotItem().getAxis("bottom")._tickLevels[0])
    assert ticks[n + 1] == f"#{s.rank} ·far"
    tip = chart.bar_tip(n + 1)
    assert "<b>drawn</b>" in tip and f"rank {s.rank}" in tip and format_prob(s.prob) in tip
    inside = record(SamplerSettings(temperature=0.0), seed=3, vocab=3000)  # greedy: rank 0
    chart.show_sample(inside, texts_of(inside))
    assert len(chart.outside_bars.opts["x"]) == 0 and chart.bar_tip(chart.n + 1) == ""


@pytest.mark.parametrize("width", [480, 900, 1400])
def test_at_any_width_the_legend_is_above_the_bars_and_each_label_is_readable(chart, qtbot, width):
    chart.resize(width, 260)
    qtbot.wait(20)
    s = record(FILTERS)
    chart.show_sample(s, texts_of(s))
    qtbot.wait(20)
    legend = chart.legend.sceneBoundingRect()
    plot = chart.getPlotItem().vb.sceneBoundingRect()
    assert legend.bottom() <= plot.top() + 1 and legend.width() <= chart.width()  # a row of its own, all in view
    assert chart.n == min(20, max(8, int((width - 110) / 30)))  # fewer candidates where they would not fit
    labels = [label for _, label in chart.getPlotItem().getAxis("bottom")._tickLevels[0]]
    assert all(len(label) >= 4 for label in labels)  # never "," or "c…"


def run_of(order: StageOrder, steps: int = 4) -> RunTrace:
    rng = np.random.default_rng(5)
    settings = FILTERS.with_(order=order)
    run = RunTrace(prompt_ids=[1], settings=settings, seed=1)
    hist = History.start(NUMPY, 2000, [1])
    for i in range(steps):
        s = sample(NUMPY, (rng.normal(size=2000) * 1.2).astype(np.float32), settings, float(rng.random()),
                   history=hist)
        run.steps.append(StepTrace(i, s, f"w{i}", texts_of(s)[:20], 0.0))
    return run


@pytest.fixture
def panel(qtbot) -> StepPanel:
    p = StepPanel()
    qtbot.addWidget(p)
    p.resize(900, 420)
    p.show()
    return p


def test_the_stage_strip_says_each_stages_recorded_survivors_and_kept_mass(panel):
    run = run_of(StageOrder.TEMPERATURE_FIRST)
    st = run.steps[2]
    panel.show_step(2, st)
    s = st.sample
    assert panel.strip.text() == stage_strip(stages_kept(s))
    k, p = s.stage_index("top_k"), s.stage_index("top_p")
    assert panel.strip.text().startswith(f"temperature → top-k {int(s.kept_counts[k])} kept (")
    assert f"top-p {int(s.kept_counts[p])} kept" in panel.strip.text()
    assert re.search(r"p = (\S+) \(model: (\S+), rank", panel.title.text()).groups() == (
        format_prob(s.prob), format_prob(st.raw_prob))


@pytest.mark.parametrize("order", list(StageOrder))
def test_a_preview_draws_each_line_from_the_record_the_sampler_makes_and_says_what_is_approximate(panel, order):
    run = run_of(order)
    new = run.settings.with_(temperature=1.78)
    preview = make_preview(run, 3, new)
    panel.preview(preview, run.steps[3])
    chart = panel.chart.chart
    s = preview.sample
    assert chart.shown[0] is s
    for name, line in chart.stage_lines.items():  # each line and its marks: the re-sample's own row and threshold
        i = s.stage_index(name)
        assert line.line.isVisible() == (i is not None)
        if i is None:  # a stage these settings do not run
            continue
        assert line.threshold == s.thresholds[i]
        kept = s.kept[i, : chart.n]
        _, marks = line.marks.getData()
        assert (marks[::2][kept] >= line.line.value()).all() and (marks[::2][~kept] < line.line.value()).all()
    assert chart.top_p_line.value() == s.thresholds[s.stage_index("top_p")]
    assert "≈ approximate: model (raw)" in panel.strip.text()
    assert format_prob(preview.recorded_mass) in panel.strip.text()
    assert ("temperature" in panel.strip.text().splitlines()[1]) == (order == StageOrder.TEMPERATURE_FIRST)


def seven_entries() -> Sample:
    """A record whose legend names seven things: both bars, top-p's mass, two cut lines, two stages' cuts."""
    settings = SamplerSettings(temperature=0.8, top_k=8, top_p=0.9, min_p=0.02)
    for seed in range(100):
        rng = np.random.default_rng(seed)
        s = sample(NUMPY, rng.normal(size=300).astype(np.float32), settings, float(rng.random()))
        if {"top_p", "top_k"} <= {s.cut_by(i) for i in range(s.top_n)}:
            return s
    raise AssertionError("no record cut by both top-p and top-k")


@pytest.mark.parametrize("width", [700, 960, 1000, 1100, 1300, 1600])
def test_every_legend_entry_is_in_view_whatever_its_rows_hold(chart, qtbot, width):
    """Six entries in a row once read "cut by top-": the columns are sized to their contents, so a row holds only
    as many as fit and the others wrap to the next."""
    s = seven_entries()
    chart.resize(width, 400)
    qtbot.wait(20)
    chart.show_sample(s, texts_of(s))
    qtbot.wait(20)
    assert len(chart.legend.items) == 7 and chart.legend.isVisible()
    for sample_item, label in chart.legend.items:
        assert label.sceneBoundingRect().right() <= chart.width(), label.text
        assert sample_item.sceneBoundingRect().right() <= label.sceneBoundingRect().left()  # each beside its own
    rows = {round(label.sceneBoundingRect().top()) for _, label in chart.legend.items}
    assert len(rows) == math.ceil(7 / chart.legend.columnCount)


def test_a_chart_too_small_for_its_legend_folds_it_into_its_tooltip(chart, qtbot):
    """With the branch tree open at 900x600 the chart is ~300 px wide: a one-column legend would take half its
    height, so it folds into the tooltip (every entry named there) and comes back when there is room."""
    s = record(FILTERS)
    chart.resize(300, 260)
    qtbot.wait(20)
    chart.show_sample(s, texts_of(s))
    qtbot.wait(20)
    names = [name for _, name in chart.legend.entries]
    assert len(names) >= 4 and not chart.legend.isVisible()
    assert chart.toolTip() == "Legend: " + "; ".join(names)
    chart.resize(1400, 260)
    qtbot.wait(20)
    assert chart.legend.isVisible() and chart.toolTip() == ""
    assert chart.legend.boundingRect().height() <= 0.3 * chart.height()
