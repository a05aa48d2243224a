"""Run ▸ Logit lens… and Attention… in the real window, on the tiny model through the model thread: each draws the
record it got and nothing else — the live lens's shares as the step recorded them, the full lens's tokens and
probabilities and the drawn token's line, the attention's head means as small multiples and a layer's heads as a
map — and the step panel opens them at the step shown."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from PySide6.QtWidgets import QToolButton

from app.core.decoding.inside import LIVE_K, AttentionMap, LensGrid
from app.ui.formatting import visible
from app.ui.main_window import MainWindow
from app.ui.tools.inside.lens_view import FLOOR, LensView, percent
from tests.ui.conftest import RUN_TIMEOUT


def generate(qtbot, w: MainWindow, max_tokens: int = 6) -> object:
    """A greedy run (each drawn token is the model's top-1: among the live lens's candidates)."""
    w.prompt.set_prompt("Hello there")
    w.sampler.editors["max_tokens"].setValue(max_tokens)
    w.sampler.editors["temperature"].setValue(0.0)
    with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT) as done:
        assert w.playground.generate(replace(w.playground.make_request(), ignore_eos=True))
    qtbot.waitUntil(lambda: not w.playground.busy, timeout=RUN_TIMEOUT)
    return w.playground.session.get(done.args[0].run_id)


def cells(view: LensView) -> list[list[str]]:
    t = view.table
    return [[t.item(r, c).text() for c in range(t.columnCount())] for r in range(t.rowCount())]


def test_the_lens_view_draws_the_live_lens_then_the_full_lens(qtbot, window) -> None:
    view = window.tools["lens"].open()
    view.live.setChecked(True)
    assert window.playground.live_lens == LIVE_K
    run = generate(qtbot, window)
    window.playground.select_step(2)
    step = run.steps[2]
    lens = step.sample.lens
    assert lens is not None and lens.logits.shape == (3, LIVE_K)  # the embeddings and 2 layers
    shares = lens.shares()
    assert cells(view) == [[f"{s:.2f}" for s in row] for row in shares]  # the record's shares, as recorded
    drawn = lens.ids.tolist().index(step.token_id)
    assert view.table.item(0, drawn).font().bold()
    _, y = view.curve.line.getOriginalDataset()
    np.testing.assert_allclose(y, np.clip(shares[:, drawn], FLOOR, 1.0))

    with qtbot.waitSignal(view.shown, timeout=RUN_TIMEOUT, check_params_cb=lambda g: isinstance(g, LensGrid)):
        view.full.click()
    g = view.look.result
    assert g.step == 2 and g.token_id == step.token_id and g.layers == 3
    assert cells(view) == [[f"{visible(t)[:12]}\n{percent(p)}" for t, p in zip(g.top_texts[r], g.top_probs[r],
                                                                                strict=True)] for r in range(g.layers)]
    _, y = view.curve.line.getOriginalDataset()
    np.testing.assert_allclose(y, np.clip(g.token_probs, FLOOR, 1.0))
    assert view.curve.lead.isVisible() == (g.appears is not None)
    assert "Approximation" in view.note.text()

    window.playground.select_step(1)  # another step: its live lens again, no model asked
    assert cells(view) == [[f"{s:.2f}" for s in row] for row in run.steps[1].sample.lens.shares()]
    window.playground.select_step(2)  # back: the full lens kept for it
    assert view.look.result is g and cells(view)[0][0].startswith(visible(g.top_texts[0][0])[:12])


def test_the_attention_view_draws_the_head_means_and_a_layers_heads(qtbot, window) -> None:
    generate(qtbot, window)
    window.playground.select_step(3)
    view = window.tools["attention"].open()
    with qtbot.waitSignal(view.shown, timeout=RUN_TIMEOUT, check_params_cb=lambda a: isinstance(a, AttentionMap)):
        view.run.click()
    a = view.look.result
    assert a.step == 3 and a.weights.shape[:2] == (2, 4)
    assert len(view.grid.bars) == a.layers
    for bars, mean in zip(view.grid.bars, a.head_mean(), strict=True):
        np.testing.assert_array_equal(bars.opts["height"], mean)
    np.testing.assert_array_equal(view.heads.image.image, a.weights[0])
    view.grid.layer_clicked.emit(1)
    np.testing.assert_array_equal(view.heads.image.image, a.weights[1])
    assert "grouped-query" in view.note.text() and "4 query heads read 2 KV heads" in view.note.text()
    assert "KV head 1" in view.heads.tip(2, 0) and "[2, 3]" in view.heads.tip(2, 0)


def test_the_step_panel_opens_the_lens_at_the_step_shown(qtbot, window) -> None:
    generate(qtbot, window)
    window.playground.select_step(1)
    button = next(b for b in window.step_panel.findChildren(QToolButton) if b.text() == "Logit lens")
    button.click()
    view = window.tools["lens"].view
    assert isinstance(view, LensView)
    qtbot.waitUntil(lambda: isinstance(view.look.result, LensGrid), timeout=RUN_TIMEOUT)
    assert view.look.result.step == 1


def test_a_full_lens_cell_says_its_probability_as_a_short_percentage() -> None:
    shown = [percent(p) for p in (1.0, 0.22, 0.0996, 0.045, 0.003, 0.0002, 0.0)]
    assert shown == ["100%", "22%", "10%", "4.5%", "0.3%", "<0.1%", "0%"]
