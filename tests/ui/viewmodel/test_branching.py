"""Exploring in the real window: fork from a bar or a token, the branch tree, replay, uncertain steps."""

from __future__ import annotations

import bisect
from dataclasses import replace

import numpy as np
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QApplication, QMenu

from app.core.events import Finished, Request
from app.core.metrics import Metrics
from app.core.session.branches import runner_up, uncertain_steps
from app.core.session.store import Session
from app.ui.formatting import INHERITED
from app.ui.main_window import MainWindow
from app.ui.run_view.branch_tree import RUN_ID, node_label
from app.ui.viewmodel.display import CHART_MS

RUN_TIMEOUT = 60_000


def first_run(qtbot, w: MainWindow, max_tokens: int = 16, **settings) -> object:
    """A run that only max tokens ends (a random model may draw end-of-text anywhere), sampled, seeded."""
    w.prompt.set_prompt("Hello there")
    w.sampler.editors["max_tokens"].setValue(max_tokens)
    for k, v in {"temperature": 1.0, "top_k": 40, **settings}.items():
        w.sampler.editors[k].setValue(v)
    with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT) as done:
        assert w.playground.generate(replace(w.playground.make_request(), ignore_eos=True))
    qtbot.waitUntil(lambda: not w.playground.busy, timeout=RUN_TIMEOUT)
    return done.args[0]


def wait_run(qtbot, w: MainWindow, start) -> object:
    with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT) as done:
        start()
    qtbot.waitUntil(lambda: not w.playground.busy, timeout=RUN_TIMEOUT)
    qtbot.wait(10)  # the tree redraws on the next turn of the event loop
    return done.args[0]


def tree_ids(w: MainWindow) -> list[tuple[int, int | None]]:
    """(run id, parent run id) of every node of the branch tree."""
    out = []
    for item in w.branches._items():
        parent = item.parent()
        out.append((item.data(0, RUN_ID), parent.data(0, RUN_ID) if parent is not None else None))
    return sorted(out)


def click_bar(qtbot, w: MainWindow, i: int) -> QMenu:
    """Click candidate i's bars in the step chart; returns the menu that pops up."""
    chart = w.step_panel.chart.chart
    scene = chart.getPlotItem().vb.mapViewToScene(QPointF(i, 0.02))
    qtbot.mouseClick(chart.viewport(), Qt.MouseButton.LeftButton, pos=chart.mapFromScene(scene))
    qtbot.waitUntil(lambda: isinstance(QApplication.activePopupWidget(), QMenu))
    return QApplication.activePopupWidget()


def test_a_click_on_a_bar_forks_there_with_that_token_reusing_the_prefix(qtbot, window):
    root = first_run(qtbot, window)
    pg, k = window.playground, 5
    pg.select_step(k)
    at = pg.steps[k]
    i = next(j for j in range(1, at.top_n) if int(at.sample.top_ids[j]) != at.token_id)
    token = int(at.sample.top_ids[i])
    menu = click_bar(qtbot, window, i)
    assert at.top_texts[i].strip() in menu.actions()[0].text().replace("·", " ")
    fin = wait_run(qtbot, window, menu.actions()[0].trigger)
    child = pg.session.get(fin.run_id)
    assert child.parent == (root.run_id, k) and child.trace.branch == "fork"
    assert child.trace.token_ids[:k] == root.trace.token_ids[:k] and child.trace.token_ids[k] == token
    n_prompt = len(root.trace.prompt_ids)
    assert fin.metrics.reused_tokens == n_prompt + k - 1  # no second prefill: one token computed again
    assert tree_ids(window) == [(root.run_id, None), (child.id, root.run_id)]
    assert window.branches.tree.currentItem().data(0, RUN_ID) == child.id
    assert window.output.text.toPlainText().startswith(child.trace.text)
    assert window.timeline.chart.diverged_line.isVisible() and window.timeline.chart.diverged_line.value() == k


def test_the_output_menu_forks_and_regenerates_and_the_tree_shows_each_branch(qtbot, window):
    root = first_run(qtbot, window)
    pg, view = window.playground, window.output.text
    menu = QMenu()
    view.branch_menu(3, menu)
    labels = [a.text() for a in menu.actions()]
    assert labels[-1].startswith("Regenerate from here") and all("Continue with" in t for t in labels[:-1])
    fork = wait_run(qtbot, window, menu.actions()[0].trigger)
    assert pg.session.get(fork.run_id).trace.token_ids[3] != root.trace.token_ids[3]
    window.branches.tree.setCurrentItem(window.branches.item_of(root.run_id))  # show the root again
    assert pg.shown.id == root.run_id and window.output.text.toPlainText().startswith(root.trace.text)
    regen = wait_run(qtbot, window, menu.actions()[-1].trigger)
    again = pg.session.get(regen.run_id)
    assert again.parent == (root.run_id, 3) and again.trace.branch == "regenerate"
    assert again.trace.token_ids[:3] == root.trace.token_ids[:3] and again.trace.seed != root.trace.seed
    assert tree_ids(window) == sorted([(root.run_id, None), (fork.run_id, root.run_id), (regen.run_id, root.run_id)])


def test_tree_keys_rename_and_delete(qtbot, window):
    root = first_run(qtbot, window)
    pg, tree = window.playground, window.branches.tree
    child = wait_run(qtbot, window, lambda: window.playground.branches.regenerate(2))
    tree.setFocus()
    qtbot.keyClick(tree, Qt.Key.Key_Left)  # to the parent
    qtbot.keyClick(tree, Qt.Key.Key_Left)
    assert pg.shown.id == root.run_id
    item = window.branches.item_of(child.run_id)
    item.setText(0, "my idea")  # what an edit in place commits
    qtbot.waitUntil(lambda: "my idea" in window.branches.item_of(child.run_id).text(0))
    assert pg.session.get(child.run_id).name == "my idea"
    tree.setCurrentItem(window.branches.item_of(child.run_id))
    qtbot.keyClick(tree, Qt.Key.Key_Delete)
    qtbot.waitUntil(lambda: len(tree_ids(window)) == 1)
    assert child.run_id not in pg.session.runs and pg.shown.id == root.run_id
    order = list(pg.session.runs)
    qtbot.keyClick(tree, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)  # Edit → Undo, the tree in focus
    qtbot.waitUntil(lambda: len(tree_ids(window)) == 2)
    back = pg.session.get(child.run_id)
    assert back is not None and back.name == "my idea" and list(pg.session.runs) == [*order, child.run_id]
    assert pg.shown.id == child.run_id  # shown again, as it was when deleted
    assert not pg.branches.undo()  # one delete, one undo


def test_replay_marks_the_first_step_that_differs_in_the_output_and_the_timeline(qtbot, window):
    root = first_run(qtbot, window, temperature=1.5)
    window.sampler.editors["temperature"].setValue(0.0)  # greedy: decided by the record, step by step
    fin = wait_run(qtbot, window, window.controls.replay_action.trigger)
    pg = window.playground
    run = pg.session.get(fin.run_id)
    mine, theirs = run.trace.token_ids, root.trace.token_ids
    d = next(i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b)
    assert run.trace.branch == "replay" and run.parent == (root.run_id, d) and run.trace.seed == root.trace.seed
    assert window.timeline.chart.diverged_line.isVisible() and window.timeline.chart.diverged_line.value() == d
    view = window.output.text
    i = bisect.bisect_left(view._step_of, d)  # (a token without text of its own: the next one)
    cursor = QTextCursor(view.document())
    cursor.setPosition(view._starts[i] + 1)
    assert cursor.charFormat().underlineStyle() == QTextCharFormat.UnderlineStyle.WaveUnderline
    steps_before = [s for s in view._step_of if s < d]
    if steps_before:  # taken over from the run it replays: drawn muted
        cursor.setPosition(view._starts[0] + 1)
        assert cursor.charFormat().foreground().color() == INHERITED


def test_uncertain_steps_are_marked_from_the_record_and_a_mark_forks_with_the_runner_up(qtbot, window):
    root = first_run(qtbot, window, max_tokens=24)
    pg, tl = window.playground, window.timeline.chart
    entropies = [s.sample.entropy for s in pg.steps]
    marked = tl.marks.data["x"].astype(int).tolist()
    assert marked == uncertain_steps(entropies) and len(marked) == 2  # the top 5 % of 24 steps, rounded up
    np.testing.assert_allclose(tl.marks.data["data"].astype(float), [entropies[i] for i in marked], rtol=1e-6)
    assert (tl.marks.data["y"] > 1.0).all()  # in their row above the curves, not on the p(drawn) area
    window.timeline_panel.uncertain.setValue(float(np.median(entropies)))
    assert tl.marks.data["x"].astype(int).tolist() == [i for i, h in enumerate(entropies)
                                                        if h > window.timeline_panel.uncertain.value()]
    step = marked[0]
    want = runner_up(pg.steps[step].sample)
    fin = wait_run(qtbot, window, lambda: tl.uncertain_clicked.emit(step))
    child = pg.session.get(fin.run_id)
    assert child.parent == (root.run_id, step) and child.trace.token_ids[step] == want


def test_deleting_the_last_run_leaves_every_view_empty_and_new_does_too(qtbot, window):
    first_run(qtbot, window)
    pg, tree = window.playground, window.branches.tree
    assert window.output.text.toPlainText() and window.step_panel.trace is not None
    assert "—" not in window.metrics.values["rate"].text()
    tree.setFocus()
    tree.setCurrentItem(window.branches.item_of(pg.shown.id))
    qtbot.keyClick(tree, Qt.Key.Key_Delete)
    qtbot.waitUntil(lambda: not tree_ids(window))

    def not_empty() -> list[str]:
        """The views still showing something of a run (none: every view is in its empty state)."""
        chart, line = window.timeline.chart, window.output.branch_note.text()
        said = {"a run shown": pg.shown is not None, "output text": bool(window.output.text.toPlainText()),
                "step panel's trace": window.step_panel.trace is not None,
                "step chart's note": "press Generate" not in window.step_panel.chart.chart.note.toPlainText(),
                "timeline's steps": chart.n != 0, "timeline's cursor": chart.cursor.isVisible(),
                f"branch note {line!r}": bool(line),
                **{f"metric {k}": not label.text().endswith(": —") for k, label in window.metrics.values.items()}}
        return [what for what, shown in said.items() if shown]

    def stays_empty() -> None:
        """Empty within a few frames (a frame's timers may still be due), and still empty a while later."""
        qtbot.waitUntil(lambda: not not_empty(), timeout=2000)
        qtbot.wait(3 * CHART_MS)
        assert not not_empty()

    stays_empty()
    first_run(qtbot, window)
    window.sessions.ask = lambda: "discard"
    assert window.sessions.new()
    stays_empty()


def test_a_run_without_text_yet_is_named_in_words_not_as_an_empty_text():
    """A run that has drawn nothing shows "…" while it runs and "(no text)" once it ended (not "∅", which is how
    an empty token's text is shown)."""
    run = Session().start(Request(prompt="x"))[0]
    assert node_label(run, None) == "…"
    run.finished = Finished(run.request.id, "length", Metrics(), None, run.id, 0)
    assert node_label(run, None) == "(no text)"
