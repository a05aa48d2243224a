"""The multiverse dock in the real window: it grows on the model thread and draws blocks exactly as tall as the
recorded path probabilities (in either space; the sampler's cuts hatched), zooms into a node and back out, forks a
node's path into a run of the session whose first tokens are that path, looks ahead from a run's step the step
panel names, and is kept in the session."""

from __future__ import annotations

import pytest

from app.core.record.multiverse import ROOT
from app.core.settings import SamplerSettings
from app.ui.tools.multiverse.icicle import MARGIN
from tests.ui.conftest import RUN_TIMEOUT

SETTINGS = SamplerSettings(top_k=3, max_tokens=6, seed=3)  # width 5, top-k 3: two children of each node cut


def open_dock(window):
    window.tools["multiverse"].trigger()
    view = window.tools["multiverse"].view
    assert view is not None and view.isVisible()
    view.resize(1000, 640)
    return view


def grow(qtbot, view, budget: int = 16, depth: int = 3):
    view.controls.budget.setValue(budget)
    view.controls.depth.setValue(depth)
    view.controls.width_box.setValue(5)
    assert view.run()
    qtbot.waitUntil(lambda: view.tree is not None and view.tree.reason != "running" and not view.running,
                    timeout=RUN_TIMEOUT)
    return view.tree


def heights(view) -> dict[int, float]:
    """Each drawn node block's height as a share of the drawing's height."""
    span = view.icicle.viewport().height() - 2 * MARGIN
    return {d.node: d.rect.height() / span for d in view.icicle.drawn() if d.kind in ("node", "prefix")}


def test_the_blocks_are_as_tall_as_the_recorded_path_probabilities(qtbot, window) -> None:
    window.sampler.set_settings(SETTINGS)
    view = open_dock(window)
    tree = grow(qtbot, view)
    assert tree.reason == "budget" and tree.ranked == 16 and tree.space == "model"
    for space, label in (("model", "the model's own"), ("sampled", "after your sampler")):
        view.controls.space.setCurrentText(label)
        drawn = heights(view)
        assert set(drawn) == {n.id for n in tree.nodes if n.path_prob(space) > 0}
        for node, h in drawn.items():
            assert h == pytest.approx(tree.node(node).path_prob(space), rel=1e-6, abs=1e-9)
    blocks = view.icicle.drawn()
    cut = {d.node for d in blocks if d.kind == "cut"}  # the sampler's space: the cut children, hatched in a lane
    assert cut == {n.id for n in tree.nodes if n.cut_by and n.sampled == 0 and tree.node(n.parent).sampled_path > 0}
    assert cut and all(d.hatched for d in blocks if d.kind == "cut")
    view.controls.space.setCurrentText("the model's own")  # there: a child the sampler would cut, hatched
    assert {d.node for d in view.icicle.drawn() if d.hatched} == {n.id for n in tree.nodes if n.cut_by}
    node = max(tree.children(ROOT), key=lambda k: tree.node(k).path)
    view.icicle.zoom(node)  # renormalized: the node spans the height, its children their share of it
    zoomed = heights(view)
    assert zoomed[node] == pytest.approx(1.0)
    for k in tree.children(node):
        assert zoomed[k] == pytest.approx(tree.node(k).path / tree.node(node).path, rel=1e-6)
    assert "zoomed" in view.crumbs.text() and view.zoom_out.isEnabled()
    view.zoom_out.click()
    assert view.icicle.focus == ROOT
    assert tree.path_text(node) in view.icicle.path_info(node).replace("·", " ")


def test_a_node_forked_from_a_runs_step_takes_its_path_and_the_session_keeps_the_tree(qtbot, window) -> None:
    window.sampler.set_settings(SETTINGS)
    pg = window.playground
    with qtbot.waitSignal(pg.finished, timeout=RUN_TIMEOUT):
        assert pg.generate()
    parent = pg.shown
    window.step_panel.look_ahead_requested.emit(2)  # the step panel's "Look ahead from step 2"
    view = window.tools["multiverse"].view
    assert view.origin == (parent.id, 2)
    tree = grow(qtbot, view, budget=10, depth=2)
    assert tree.origin == (parent.id, 2) and tree.start == tuple(parent.trace.token_ids[:2])
    assert pg.session.views.multiverse.multiverse == tree  # kept in the session
    node = max((n for n in tree.nodes if n.depth == 2), key=lambda n: n.path)
    with qtbot.waitSignal(view.forked, timeout=RUN_TIMEOUT) as forked:
        assert view.fork(node.id)
    run = pg.session.get(forked.args[0])
    assert run.parent == (parent.id, 2)
    qtbot.waitUntil(lambda: run.finished is not None, timeout=RUN_TIMEOUT)
    assert run.trace.token_ids[:4] == parent.trace.token_ids[:2] + list(tree.path_ids(node.id))
    view.icicle.show_tree(None)
    pg.session_replaced.emit()  # a reopened session draws its tree again
    assert view.tree == tree and {d.node for d in view.icicle.drawn()} >= {n.id for n in tree.nodes[1:] if n.path}
