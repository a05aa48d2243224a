""""Sample ×N" in the real window: one batched run of N samples, its list and statistics held to the core's."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.core.compare.statistics import compare
from app.ui.main_window import MainWindow
from app.ui.tools.samples_view import SamplesView

RUN_TIMEOUT = 60_000


def sampled(qtbot, w: MainWindow, n: int = 6, max_tokens: int = 10) -> SamplesView:
    """Open Run → Sample ×N… and draw n samples of a short prompt, hot enough to differ."""
    w.prompt.set_prompt("Hello there")
    w.sampler.editors["max_tokens"].setValue(max_tokens)
    w.sampler.editors["temperature"].setValue(1.2)
    w.tools["samples"].trigger()
    view = w.tools["samples"].view
    assert view is not None and view.isVisible()
    view.count.setValue(n)
    qtbot.mouseClick(view.sample_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.result is not None and not w.playground.busy, timeout=RUN_TIMEOUT)
    return view


def shown_rows(view: SamplesView) -> list[tuple[int, str, str, str]]:
    """(run id, mean logprob, perplexity, length) as each row of the list shows them."""
    t = view.table
    return [(int(t.item(r, 0).data(Qt.ItemDataRole.UserRole)), t.item(r, 2).text(), t.item(r, 3).text(),
             t.item(r, 4).text()) for r in range(t.rowCount())]


def test_n_samples_are_one_request_and_the_view_shows_the_core_s_statistics(qtbot, window):
    view = sampled(qtbot, window, n=6)
    runs = sorted(window.playground.session.of_request(view.request.id), key=lambda r: r.sequence)
    assert len(runs) == 6 and view.table.rowCount() == 6
    seed = view.request.settings.seed
    assert [r.trace.seed for r in runs] == [seed + i for i in range(6)]  # sample i draws with seed + i
    want = compare([r.trace for r in runs])
    ids = [tuple(r.trace.token_ids) for r in runs]
    tokens = [t for s in ids for t in s]
    assert want.stats.distinct_1 == pytest.approx(len(set(tokens)) / len(tokens))  # the definition, by hand
    assert want.stats.unique == len(set(ids))
    by_run = {s.run_id: s for s in want.samples}
    for run_id, mean, ppl, length in shown_rows(view):
        s = by_run[run_id]
        assert (mean, ppl, length) == (f"{s.mean_logprob:.3f}", f"{s.perplexity:.2f}", str(s.length))
    assert list(view.chart.bars.opts["height"]) == list(want.stats.agreement)  # the chart draws the record
    assert f"distinct-2 <b>{want.stats.distinct_2:.3f}</b>" in view.summary.text()
    assert f"<b>{want.stats.unique}</b> of 6" in view.summary.text()


def test_the_list_sorts_by_mean_logprob_perplexity_and_length(qtbot, window):
    view = sampled(qtbot, window, n=5)
    view.sort.setCurrentText("mean logprob")
    means = [s.mean_logprob for s in view.shown_samples()]
    assert means == sorted(means, reverse=True)
    assert [r[0] for r in shown_rows(view)] == [s.run_id for s in view.shown_samples()]
    view.table.horizontalHeader().sectionClicked.emit(2)  # the same column again: the other way round
    assert [s.mean_logprob for s in view.shown_samples()] == sorted(means)
    view.table.horizontalHeader().sectionClicked.emit(4)
    lengths = [int(r[3]) for r in shown_rows(view)]
    assert lengths == sorted(lengths, reverse=True)


def test_a_sample_opens_as_the_shown_run_and_forks(qtbot, window):
    view = sampled(qtbot, window, n=4)
    pg = window.playground
    row = 2
    run_id = int(view.table.item(row, 0).data(Qt.ItemDataRole.UserRole))
    view.table.cellDoubleClicked.emit(row, 1)
    assert pg.shown.id == run_id and window.output.text.toPlainText().startswith(pg.shown.trace.text[:3])
    step = 1
    token = int(pg.shown.steps[step].sample.top_ids[1])  # the runner-up there
    with qtbot.waitSignal(pg.finished, timeout=RUN_TIMEOUT):
        assert pg.branches.fork(step, token)
    qtbot.waitUntil(lambda: not pg.busy, timeout=RUN_TIMEOUT)
    child = pg.shown
    assert child.parent == (run_id, step) and child.steps[step].token_id == token
    assert view.result is not None and view.table.rowCount() == 4  # the list still shows its samples
