"""The step chart draws the core's record and nothing it computes: every number on it is held to the record, for
real sampler output in both stage orders; and the window's header, chart and selected token show one step."""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import replace

import numpy as np
import pytest
from PySide6.QtCore import Qt

from app.core.events import Step
from app.core.record.span_stats import confidence, varentropy
from app.core.record.trace import Sample, StepTrace
from app.core.sampler.sampling import sample
from app.core.settings import SamplerSettings, StageOrder
from app.ui.charts.shared import RAW, _faded, stage_style
from app.ui.charts.step_chart import StepChart
from app.ui.charts.timeline import TimelineChart
from app.ui.formatting import format_prob
from app.ui.main_window import MainWindow
from backends.ops import NUMPY

FILTERS = SamplerSettings(temperature=0.5, top_k=12, top_p=0.8, min_p=0.3)  # T ≠ 1 with every filter on
RUN_TIMEOUT = 60_000


def record(settings: SamplerSettings, seed: int = 0, vocab: int = 300) -> tuple[Sample, tuple[str, ...]]:
    rng = np.random.default_rng(seed)
    s = sample(NUMPY, (rng.normal(size=vocab) * 1.5).astype(np.float32), settings, float(rng.random()))
    assert isinstance(s, Sample)
    return s, tuple(f"t{int(i)}" for i in s.top_ids[: s.top_n])


@pytest.fixture
def chart(qtbot) -> StepChart:
    c = StepChart()
    qtbot.addWidget(c)
    c.resize(900, 400)
    c.show()
    return c


def outlined(chart: StepChart) -> list[int]:
    return [i for i, pen in enumerate(chart.final.opts["pens"] or []) if pen.style() != Qt.PenStyle.NoPen]


def greyed(chart: StepChart) -> list[bool]:
    return [b.color().alpha() < 255 for b in chart.raw.opts["brushes"]]


def legend(chart: StepChart) -> list[str]:
    return [label.text for _, label in chart.legend.items]


def tops(chart: StepChart, bars: object) -> np.ndarray:
    """The probability each bar reaches, read back through the chart's axis (its scale: log or linear)."""
    return chart.scale.prob(np.asarray(bars.opts["height"], dtype=np.float64) + bars.opts["y0"])


def assert_bars_are(chart: StepChart, bars: object, probs: np.ndarray) -> None:
    """Bars stand on the axis's floor and reach each recorded probability (one above the floor: exactly where the
    scale puts it, and read back the same to float precision)."""
    np.testing.assert_array_equal(bars.opts["height"], chart.scale.y(probs) - chart.scale.base)
    above = probs > chart.scale.prob(chart.scale.base)
    np.testing.assert_allclose(tops(chart, bars)[above], probs[above], rtol=1e-9)


def assert_draws_the_record(chart: StepChart, s: Sample, texts: tuple[str, ...]) -> None:
    n = len(texts)
    x = np.arange(n)
    assert chart.n == n
    assert_bars_are(chart, chart.raw, s.probs[0])  # raw bars: row 0
    np.testing.assert_array_equal(chart.raw.opts["x"], x - 0.2)
    assert_bars_are(chart, chart.final, s.probs[-1])  # sampled from: the last row
    np.testing.assert_array_equal(chart.final.opts["x"], x + 0.2)
    assert greyed(chart) == [not s.kept[:, i].all() for i in range(n)]
    assert outlined(chart) == np.flatnonzero(s.top_ids[:n] == s.token).tolist()
    cut = [s.cut_by(i) for i in range(n)]  # a cut candidate's model bar: the colour of the stage that cut it
    assert [b.color().getRgb() for b in chart.raw.opts["brushes"]] == [
        (RAW if c is None else _faded(stage_style(c).color)).getRgb() for c in cut]
    names = [f"cut by {stage_style(c).label}" for c in dict.fromkeys(cut) if c is not None]  # each named once
    assert [t for t in legend(chart) if t.startswith("cut by")] == names
    for i, c in enumerate(cut):  # and its tooltip says which stage cut it, and why, with the record's threshold
        tip = chart.bar_tip(i)
        assert f"model (raw) {format_prob(s.raw_probs[i])} → sampled from {format_prob(s.final_probs[i])}" in tip
        if c is None:
            assert "cut by" not in tip
        else:
            t = float(s.thresholds[s.stage_index(c)])
            assert f"cut by {c.replace('_', '-')}" in tip
            assert c == "greedy" or format_prob(t) in tip
    ticks = chart.getPlotItem().getAxis("bottom")._tickLevels[0][:n]
    assert [x for x, _ in ticks] == list(range(n))
    for (_, label), text in zip(ticks, texts, strict=True):  # each candidate's text, cut to fit if need be
        assert label == text or (label.endswith("…") and text.startswith(label[:-1]))
    if "top_p" in s.stage_names:
        cx, cy = chart.cumulative.getData()
        np.testing.assert_array_equal(cx, x)
        np.testing.assert_array_equal(cy, s.top_p_cumulative)  # top-p's own running mass
        p = s.thresholds[s.stage_index("top_p")]
        assert chart.top_p_line.isVisible() and chart.top_p_line.value() == p
        assert chart.top_p_line.label.toPlainText() == f"top-p {p:.2f}"  # the label says the drawn value
    else:
        assert chart.cumulative.getData()[0] is None or len(chart.cumulative.getData()[0]) == 0
        assert not chart.top_p_line.isVisible()
    for name, stage in chart.stage_lines.items():
        i = s.stage_index(name)
        assert stage.line.isVisible() == (i is not None) and stage.marks.isVisible() == (i is not None)
        if i is None:
            continue
        assert stage.threshold == s.thresholds[i]  # the line, in the space of its stage's input ...
        assert stage.line.value() == chart.scale.y(s.thresholds[i])
        mx, my = stage.marks.getData()
        np.testing.assert_array_equal(my, np.repeat(chart.scale.y(s.probs[i]), 2))  # ... drawn over that input
        np.testing.assert_allclose(mx.reshape(-1, 2).mean(axis=1), x)
    assert chart.shown == (s, texts)


@pytest.mark.parametrize("order", list(StageOrder))
@pytest.mark.parametrize("seed", range(3))
def test_every_number_on_the_step_chart_is_the_records(chart, order, seed):
    s, texts = record(FILTERS.with_(order=order), seed)
    assert s.stage_names == (("temperature", "top_k", "top_p", "min_p") if order == StageOrder.TEMPERATURE_FIRST
                             else ("top_k", "top_p", "min_p", "temperature"))
    chart.show_sample(s, texts)
    assert_draws_the_record(chart, s, texts)
    k, m = (float(s.thresholds[s.stage_index(name)]) for name in ("top_k", "min_p"))
    shown = legend(chart)
    assert shown[:3] == ["model (raw)", "sampled from", "top-p's running mass (right)"]
    for entry, name, value in zip(shown[3:5], ("top-k", "min-p"), (k, m), strict=True):  # the line's value, rounded
        assert entry == f"{name}'s input · cut at {format_prob(value)}"


@pytest.mark.parametrize("order", list(StageOrder))
def test_a_threshold_line_separates_what_its_stage_kept_from_what_it_cut(chart, order):
    # The issue: at T = 0.5 with min-p the line was drawn over the raw probabilities, so a token the core cut
    # stood above it. Now each line is drawn over the probabilities its stage received.
    s, texts = record(FILTERS.with_(order=order, top_k=0, top_p=1.0), seed=4)
    chart.show_sample(s, texts)
    stage = chart.stage_lines["min_p"]
    _, marks = stage.marks.getData()
    kept = s.kept[s.stage_index("min_p")]
    assert (~kept).any() and kept.any()
    assert (marks[::2][kept] >= stage.line.value()).all() and (marks[::2][~kept] < stage.line.value()).all()
    chart.set_log(False)  # on either axis
    _, marks = stage.marks.getData()
    assert (marks[::2][kept] >= stage.line.value()).all() and (marks[::2][~kept] < stage.line.value()).all()


def test_after_top_k_the_cumulative_curve_is_renormalized_as_top_p_saw_it(chart):
    s, texts = record(SamplerSettings(temperature=1.0, top_k=3, top_p=0.99, order="temperature-last"), seed=2)
    chart.show_sample(s, texts)
    _, cy = chart.cumulative.getData()
    assert cy[2] == pytest.approx(1.0, abs=1e-6)  # all of top-p's mass is in the three top-k kept
    assert cy[2] > np.cumsum(s.probs[0])[2] + 0.05  # not the raw running mass


def test_every_record_is_drawn_whole_whatever_was_drawn_before(chart):
    """Stages come and go between steps (a preview, another run): each record is drawn as if on a new chart."""
    sequence = [SamplerSettings(temperature=0.7), FILTERS, SamplerSettings(temperature=0), FILTERS.with_(top_p=0.6)]
    for i, settings in enumerate(sequence):
        s, texts = record(settings, seed=i)
        chart.show_sample(s, texts)
        assert_draws_the_record(chart, s, texts)


def test_temperature_alone_draws_no_lines_and_penalties_are_a_stage(chart):
    s, texts = record(SamplerSettings(temperature=0.7))
    chart.show_sample(s, texts)
    assert_draws_the_record(chart, s, texts)
    assert legend(chart) == ["model (raw)", "sampled from"]
    assert not any(chart.bar_tip(i).count("cut by") for i in range(len(texts)))


def test_a_partial_trace_shows_only_what_the_server_reported(chart):
    full, texts = record(FILTERS)
    chart.show_sample(full, texts)  # a full record first: nothing of it may remain
    reported = [math.log(p) for p in (0.5, 0.3, 0.15, 0.05)]
    s = Sample.partial(8, reported[1], [4, 8, 15, 16], reported)
    chart.show_sample(s, ("a", "b", "c", "d"))
    assert_bars_are(chart, chart.final, s.probs[0])
    np.testing.assert_array_equal(chart.final.opts["x"], np.arange(4))
    assert len(chart.raw.opts["height"]) == 0  # no raw-versus-final split
    assert outlined(chart) == [1]
    assert not chart.top_p_line.isVisible() and not any(st.line.isVisible() for st in chart.stage_lines.values())
    assert len(chart.cumulative.getData()[1] if chart.cumulative.getData()[1] is not None else []) == 0
    assert "cut by" not in chart.bar_tip(1) and "sampled from 0.300, as the server reported" in chart.bar_tip(1)
    assert "stages not observed" in chart.note.toPlainText()
    assert legend(chart) == ["sampled from"]
    chart.show_sample(full, texts)  # and back: the full record is drawn whole again
    assert_draws_the_record(chart, full, texts)
    assert chart.note.toPlainText() == ""


def test_the_timeline_draws_each_steps_best_known_p_and_leaves_gaps_for_what_was_not_reported(qtbot):
    """A branch of a local run continued on a server: two full steps, then partial ones (the model's p, no
    entropy), one of which reported nothing. The area is each record's `drawn_prob`; the entropy line stops
    where the server's steps begin (a gap, not a 0); the axis, note and point tooltips say which p is which."""
    full = [record(SamplerSettings(temperature=0.7), seed=k)[0] for k in range(2)]
    partial = [Sample.partial(5, math.log(0.25), [5, 6], [math.log(0.25), math.log(0.6)], "raw"),
               Sample.partial(6, None, [5, 6], [math.log(0.3), math.log(0.6)], "raw"),
               Sample.partial(6, math.log(0.6), [5, 6], [math.log(0.3), math.log(0.6)], "raw")]
    steps = [StepTrace(k, s, "x", ("a", "b"), 0.0) for k, s in enumerate(full + partial)]
    tl = TimelineChart()
    qtbot.addWidget(tl)
    tl.resize(700, 200)
    tl.show()
    tl.append_steps([Step(1, st.step, st.token_id, st.text, st, 0) for st in steps])
    tl.show_step(4, steps[4])
    _, y = tl.prob.getData()
    expected = [full[0].prob, full[1].prob, 0.25, math.nan, 0.6]
    np.testing.assert_allclose(y, expected, rtol=1e-6)  # NaN where nothing was reported: a gap
    assert [st.drawn_prob[1] for st in steps] == ["sampled", "sampled", "model", None, "model"]
    assert tl.prob.opts["connect"] == "finite" and tl.entropy.opts["connect"] == "finite"
    _, h = tl.entropy.getData()
    np.testing.assert_allclose(h, [full[0].entropy, full[1].entropy, math.nan, math.nan, math.nan], rtol=1e-6)
    assert tl.getPlotItem().getAxis("left").labelText == "p(drawn)"  # mixed: the note says where it is the model's
    assert tl.note.toPlainText() == ("p under the model where the server's sampling was unseen · no entropy for "
                                     "some steps")
    assert "p(drawn) under the model 0.250 (the server's sampling not observed)" in tl.point_tip(2)
    assert tl.point_tip(3).startswith("step 3 · p(drawn) not reported · entropy not reported")
    assert tl.point_tip(0).startswith(f"step 0 · p(drawn) {format_prob(full[0].prob)} · entropy")
    tl.show_series("prob")  # the note names only what is drawn
    assert tl.note.toPlainText() == "p under the model where the server's sampling was unseen"
    tl.clear_run()
    assert not tl.note.isVisible() and tl.getPlotItem().getAxis("left").labelText == "p(drawn)"


# --- the window: header, chart and selected token show one step ---------------------------------------------

@pytest.fixture
def window(window):
    for name, value in (("temperature", 0.5), ("top_k", 12), ("top_p", 0.8), ("min_p", 0.05)):
        window.sampler.editors[name].setValue(value)
    return window


def shown_step(w: MainWindow) -> dict[str, int | None]:
    """The step each view shows: the header's number, the chart's record, its outlined bar, the selected token."""
    steps = w.playground.steps
    header = int(re.search(r"<b>Step (\d+)", w.step_panel.title.text()).group(1))
    chart = next(i for i, st in enumerate(steps) if st.sample is w.step_panel.chart.chart.shown[0])
    s = w.step_panel.chart.chart.shown[0]
    bar = outlined(w.step_panel.chart.chart)
    drawn = int(s.top_ids[bar[0]]) if bar else None
    text = w.output.text
    sels = text.extraSelections()
    selected = text._step_of[bisect.bisect_right(text._starts, sels[0].cursor.selectionStart()) - 1] if sels else None
    return {"header": header, "chart": chart, "drawn": drawn, "selected": selected,
            "p": re.search(r"p = ([0-9.e-]+)", w.step_panel.title.text()).group(1)}


def assert_one_step(w: MainWindow, k: int, selected: bool = True) -> None:
    st = w.playground.steps[k]
    got = shown_step(w)
    assert got["header"] == got["chart"] == k
    assert got["p"] == format_prob(st.prob)
    if st.token_id in w.step_panel.chart.chart.shown[0].top_ids[: st.top_n]:
        assert got["drawn"] == st.token_id
    if selected and st.text:
        assert got["selected"] == k


def test_after_a_run_the_header_chart_and_selected_token_are_the_last_step(qtbot, window):
    window.prompt.set_prompt("Hello")
    window.sampler.editors["max_tokens"].setValue(40)
    with qtbot.waitSignal(window.playground.finished, timeout=RUN_TIMEOUT):
        assert window.playground.generate(replace(window.playground.make_request(), ignore_eos=True))
    steps = window.playground.steps
    assert len(steps) == 40
    assert_one_step(window, 39)


def test_mid_run_a_pinned_step_stays_whole_and_following_shows_the_latest(qtbot, window):
    window.sampler.editors["max_tokens"].setValue(100_000)
    assert window.playground.generate(replace(window.playground.make_request(), ignore_eos=True))
    qtbot.waitUntil(lambda: len(window.playground.steps) >= 8, timeout=RUN_TIMEOUT)
    k = next(i for i, st in enumerate(window.playground.steps) if st.text)
    window.playground.select_step(k)  # as a click on the token does
    n = len(window.playground.steps)
    qtbot.waitUntil(lambda: len(window.playground.steps) > n + 10, timeout=RUN_TIMEOUT)
    qtbot.wait(150)  # a chart refresh or two while tokens keep coming
    assert_one_step(window, k)
    window.playground.select_step(None)  # follow the latest again
    qtbot.wait(250)
    got = shown_step(window)
    assert got["header"] == got["chart"] and got["selected"] is None  # the latest moves: no token selected
    assert got["p"] == format_prob(window.playground.steps[got["header"]].prob)
    with qtbot.waitSignal(window.playground.finished, timeout=RUN_TIMEOUT):
        window.playground.stop()
    assert_one_step(window, len(window.playground.steps) - 1)


def test_the_timeline_draws_either_curve_or_both_and_the_window_remembers_which(qtbot, window, store, tiny_path):
    with qtbot.waitSignal(window.playground.finished, timeout=RUN_TIMEOUT) as done:
        window.generate()
    entropies = [st.sample.entropy for st in done.args[0].trace.steps]
    tl = window.timeline.chart
    axes = tl.getPlotItem().getAxis
    assert tl.prob.isVisible() and tl.entropy.isVisible() and axes("left").isVisible() and axes("right").isVisible()
    window.timeline_panel.series.setCurrentIndex(window.timeline_panel.series.findData("entropy"))
    assert not tl.prob.isVisible() and not axes("left").isVisible() and tl.entropy.isVisible()
    np.testing.assert_allclose(tl.entropy.getData()[1], entropies, rtol=1e-6)  # the record's numbers
    first = done.args[0].trace.steps[0]  # and each point's tooltip says them
    conf, k = confidence(first.sample)  # (and the core's varentropy and DeepConf confidence of its record)
    assert tl.point_tip(0) == (f"step 0 · p(drawn) {format_prob(first.prob)} · entropy {first.sample.entropy:.2f} "
                               f"nats · varentropy {varentropy(first.sample):.2f} · confidence {conf:.2f} (k {k}) — "
                               "click to select") and tl.point_tip(len(entropies)) == ""
    window.timeline_panel.series.setCurrentIndex(window.timeline_panel.series.findData("prob"))
    assert tl.prob.isVisible() and not tl.entropy.isVisible() and not axes("right").isVisible()
    window.prefs.save()
    again = MainWindow(settings=store, spec=window.model_bar.spec())
    qtbot.addWidget(again)
    assert again.timeline_panel.series.currentData() == "prob"
    assert not again.timeline.is_built  # choosing builds nothing
    assert again.timeline.chart.prob.isVisible() and not again.timeline.chart.entropy.isVisible()  # applied when built
    again.sessions.ask = lambda: "discard"
    again.close()


def test_a_window_widened_from_900_px_gives_the_room_to_the_charts_and_the_side_column_back(qtbot, window):
    window.resize(900, 600)
    qtbot.waitUntil(lambda: window.main.sizes()[2] == 0, timeout=5_000)  # narrow: the side column folded
    left = window.main.sizes()[0]
    window.resize(1600, 1000)
    qtbot.waitUntil(lambda: window.main.sizes()[2] >= 200, timeout=5_000)  # the branch tree and model card
    assert window.main.sizes()[0] == left  # the prompt column kept its width: the charts took the rest


@pytest.mark.parametrize("size", [(900, 600), (1600, 1000)])
def test_a_dock_never_squashes_the_charts_below_a_readable_height(qtbot, window, size):
    """At 900x600 the speculative dock once left the timeline ~50 px with its ticks on top of each other: a dock
    goes under the charts only where there is room for both (else it floats), and the window keeps its size."""
    window.resize(*size)
    qtbot.wait(50)
    window.tools["speculative"].trigger()
    dock = window.tools["speculative"].view
    qtbot.wait(50)
    assert (window.width(), window.height()) == size
    assert window.timeline.height() >= 90 and window.step_panel.chart.height() >= 140
    assert dock.isFloating() == (size == (900, 600))  # docked in a large window
    assert dock.height() >= dock.minimumSizeHint().height()


def test_greedy_names_its_cut_once_and_draws_no_line_that_cuts_nothing(chart):
    s, texts = record(SamplerSettings(temperature=0.0, top_k=12))  # after greedy, top-k's k-th probability is 0
    chart.show_sample(s, texts)
    assert not chart.stage_lines["top_k"].line.isVisible()
    assert [t for t in legend(chart) if t.startswith("cut by")] == ["cut by greedy"]
    assert "greedy" in chart.bar_tip(1) and "cut by" not in chart.bar_tip(0)
