"""Run ▸ Speculative decoding… in the real window: a draft proposes, the window's model verifies, on the model
thread; the dock draws each round's record as it was recorded, and a draft with another tokenizer is refused in
one line with the window still usable."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.models.drafts import BUILTIN_DRAFT_PATH
from app.ui.tools.speculative_view import COLUMNS, VERDICT_COLORS, draft_rows, summary_line
from tests.tiny import make_model
from tests.ui.conftest import RUN_TIMEOUT


@pytest.fixture(scope="module")
def draft_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("models") / "tiny-draft", seed=1, hidden=32, layers=1)


def open_dock(window, qtbot, source: str, k: int):
    window.tools["speculative"].trigger()
    view = window.tools["speculative"].view
    view.controls.draft.setEditText(source)
    view.controls.k.setValue(k)
    window.sampler.set_settings(window.editing.settings.with_(max_tokens=16))
    return view


def test_the_dock_draws_every_round_as_recorded_and_the_run_joins_the_session(window, qtbot, draft_path):
    view = open_dock(window, qtbot, str(draft_path), 3)
    assert view.run()
    qtbot.waitUntil(lambda: view.summary is not None and not window.playground.busy, timeout=RUN_TIMEOUT)
    rows = [row for r in view.rounds for row in draft_rows(r)]
    assert view.table.rowCount() == len(rows) == sum(len(r.drafts) + 1 for r in view.rounds) > 0
    drawn = [[view.table.item(i, j).text() for j in range(len(COLUMNS))] for i in range(view.table.rowCount())]
    assert drawn == [list(row) for row in rows]
    for i, row in enumerate(rows):  # each row's colour is its verdict's
        assert view.table.item(i, 0).background().color() == VERDICT_COLORS[row[5]]
    assert view.status.text() == summary_line(view.stats, view.summary)
    assert view.summary.stats == view.stats and view.stats.rounds == len(view.rounds)
    run = window.playground.shown  # the speculative run is a run of the session, its tokens those the rounds kept
    assert run.request.draft is not None and run.finished is not None
    assert len(run.steps) == view.stats.tokens == sum(r.kept for r in view.rounds)
    assert {"accepted", "bonus"} & {row[5] for row in rows}


def test_a_draft_with_another_tokenizer_is_refused_in_one_line(window, qtbot):
    view = open_dock(window, qtbot, str(BUILTIN_DRAFT_PATH.parent / "builtin-model"), 2)
    assert view.run()
    qtbot.waitUntil(lambda: not window.playground.busy, timeout=RUN_TIMEOUT)
    assert "must share its target's tokenizer" in view.status.text() and "\n" not in view.status.text()
    assert view.table.rowCount() == 0 and view.controls.run.isEnabled()


def test_a_think_budget_is_refused_by_the_core_in_one_line(window, qtbot, draft_path):
    view = open_dock(window, qtbot, str(draft_path), 2)
    window.sampler.set_settings(window.editing.settings.with_(think_budget=8))
    assert view.run()
    qtbot.waitUntil(lambda: not window.playground.busy, timeout=RUN_TIMEOUT)
    assert view.status.text().startswith("a think budget runs on plain decoding and samples, not on speculative")
    assert view.table.rowCount() == 0 and view.controls.run.isEnabled()


def test_a_plain_step_is_a_row_of_its_own_and_a_pause_is_said_in_the_summary():
    """An adaptive run's plain steps (the target's own draw, no drafts) are drawn as such, and why drafting is paused
    is in the summary line, as the record says it."""
    from app.core.record.spec_record import SpecRound, SpecStats

    note = "drafting paused: acceptance 20% does not pay"
    plain = SpecRound(7, 30, (), 11, "x", 0.5, False, 1, note)
    [row] = draft_rows(plain)
    assert row == ("7", "30", "x", "", "0.500", "plain", "") and "plain" in VERDICT_COLORS
    stats = SpecStats().add(plain, 0)
    assert stats.plain_rounds == 1 and stats.note == note
    assert summary_line(stats).endswith(f"1 tokens in 1 rounds (1 plain steps) · {note}")
