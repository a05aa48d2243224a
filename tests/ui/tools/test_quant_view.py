"""Run ▸ Compare quantization… in the real window, on the tiny model through the model thread: the dock draws the
`QuantDiff` it got and nothing else — each bar at its recorded KL, a mark over each position whose top-1 tokens
differ, each token of the text shaded by its KL and underlined where they differ, the summary line from the
record's summary."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from PySide6.QtGui import QTextCharFormat

from app.core.decoding.quant_diff import QuantDiff
from app.core.record.export import SHADES
from app.ui.charts.shared import DRAWN, RAW
from app.ui.formatting import shown_piece
from app.ui.main_window import MainWindow
from app.ui.run_view.surprisal_view import surprise_color
from app.ui.tools.quant_view import KL_FLOOR, QuantView, kl_level, kl_shade, summary_line
from tests.ui.conftest import needs_torch

RUN_TIMEOUT = 60_000


def generate(qtbot, w: MainWindow, max_tokens: int = 12) -> object:
    w.prompt.set_prompt("Hello there")
    w.sampler.editors["max_tokens"].setValue(max_tokens)
    with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT) as done:
        assert w.playground.generate(replace(w.playground.make_request(), ignore_eos=True))
    qtbot.waitUntil(lambda: not w.playground.busy, timeout=RUN_TIMEOUT)
    return done.args[0]


def compare(qtbot, w: MainWindow, dtype: str) -> tuple[QuantView, QuantDiff]:
    w.tools["quant"].trigger()
    view = w.tools["quant"].view
    view.controls.dtype.setCurrentText(dtype)
    with qtbot.waitSignal(view.finished, timeout=RUN_TIMEOUT) as done:
        assert view.run()
    assert not view.running and view.controls.run.isEnabled()
    return view, done.args[0]


def assert_draws_the_record(view: QuantView, d: QuantDiff) -> None:
    bars = view.chart.bars.opts
    n = len(d.kl)
    np.testing.assert_array_equal(bars["x"], np.arange(1, n + 1))
    np.testing.assert_array_equal(bars["height"], d.kl)  # every bar at its recorded KL (all finite here)
    assert [b.color() == DRAWN for b in bars["brushes"]] == (~d.agree).tolist()
    assert [b.color() == RAW for b in bars["brushes"]] == d.agree.tolist()
    mx, _ = view.chart.marks.getData()
    np.testing.assert_array_equal(mx, np.flatnonzero(~d.agree) + 1)  # a mark over each position that differs
    text = view.text
    assert text.span_count() == len(d.ids)
    for i, piece in enumerate(d.pieces):
        assert text.span_text(i) == shown_piece(piece)
    for t in range(n):  # span t + 1: the token position t predicts
        fmt = text.span_format(t + 1)
        assert fmt.background().color() == surprise_color(kl_shade(float(d.kl[t])) / (SHADES - 1))
        wavy = fmt.underlineStyle() == QTextCharFormat.UnderlineStyle.WaveUnderline
        assert wavy == (not d.agree[t])
        assert f"KL(A‖B) <b>{d.kl[t]:.3g}</b> nats" in text.span_tooltip(t + 1) == view.chart.bar_tip(t + 1)
    assert view.summary.text() == summary_line(d.summary())


@needs_torch
def test_the_shown_run_against_bfloat16_draws_its_record(qtbot, window):
    done = generate(qtbot, window)
    trace = window.playground.session.get(done.run_id).trace
    view, d = compare(qtbot, window, "bfloat16")
    assert d.ids == (*trace.prompt_ids, *trace.token_ids)  # the run's own tokens, teacher-forced
    assert d.label_b.endswith("torch bfloat16") and d.label_a.endswith("torch float32")
    assert (d.kl > 0).all() and d.beside
    assert_draws_the_record(view, d)
    assert f"B: {d.label_b}, loaded beside A" in view.status.text()


@needs_torch
def test_with_no_run_the_prompt_against_itself_is_all_clear(qtbot, window):
    window.prompt.set_prompt("def f(x):\n    return x\n")
    view, d = compare(qtbot, window, "as A")
    assert list(d.ids) == window.playground.tokenizer.encode("def f(x):\n    return x\n")
    assert (d.kl == 0).all() and d.agree.all()
    assert_draws_the_record(view, d)
    assert "top-1 agreement 100.0%" in view.summary.text() and "mean KL(A‖B) 0 nats" in view.summary.text()
    mx, _ = view.chart.marks.getData()
    assert len(mx) == 0


def test_a_failure_is_one_line_in_the_status_and_the_dock_can_run_again(qtbot, window):
    window.prompt.set_prompt("Hello")
    window.tools["quant"].trigger()
    view = window.tools["quant"].view
    view.controls.model.setText("/nonexistent/variant")
    assert view.run()
    qtbot.waitUntil(lambda: not view.running, timeout=RUN_TIMEOUT)
    assert view.status.text() == "no model folder at '/nonexistent/variant', and it is not a hub id like 'owner/name'"
    assert view.controls.run.isEnabled() and view.diff is None and window.editing.prompt.text == "Hello"
    assert view.controls.model.text() == "/nonexistent/variant"  # what the user typed stays, to be fixed


@pytest.mark.parametrize(("kl", "level"), [(0.0, 0.0), (KL_FLOOR, 0.0), (1e-3, 0.5), (1.0, 1.0), (5.0, 1.0),
                                           (float("inf"), 1.0)])
def test_the_shading_scale_is_log_kl_from_the_floor_to_one_nat(kl: float, level: float):
    assert kl_level(kl) == pytest.approx(level)
