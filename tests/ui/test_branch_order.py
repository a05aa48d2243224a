"""The branch tree's tooltip says when a branch runs its stages in another order than its parent: an old order, an
engine's chain or a custom one, in the real window after real runs."""

from __future__ import annotations

from dataclasses import replace

from app.core.settings import SamplerSettings, parse_order
from app.ui.main_window import MainWindow
from app.ui.run_view.branch_tree import settings_diff

RUN_TIMEOUT = 60_000


def run_and_wait(qtbot, w: MainWindow, start) -> object:
    with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT) as done:
        assert start()
    qtbot.waitUntil(lambda: not w.playground.busy, timeout=RUN_TIMEOUT)
    qtbot.wait(10)  # the tree redraws on the next turn of the event loop
    return done.args[0]


def chained(s: SamplerSettings, text: str) -> SamplerSettings:
    order, chain = parse_order(text)
    return replace(s, order=order, chain=chain)


def test_a_branch_under_a_custom_chain_says_so_in_its_tooltip(qtbot, window):
    pg = window.playground
    window.prompt.set_prompt("Hello there")
    pg.editing.set_settings(SamplerSettings(temperature=1.0, top_k=20, top_p=0.9, max_tokens=8, seed=3))
    root = run_and_wait(qtbot, window, lambda: pg.generate(replace(pg.make_request(), ignore_eos=True)))
    pg.editing.set_settings(chained(pg.editing.settings, "top_p,temperature,top_k"))
    branch = run_and_wait(qtbot, window, lambda: pg.branches.regenerate(2))
    assert pg.session.get(branch.run_id).parent == (root.run_id, 2)
    tip = window.branches.item_of(branch.run_id).toolTip(0)
    assert "settings vs its parent: order → top-p → temperature → top-k" in tip


def test_the_diff_names_an_engines_chain_and_an_old_order():
    base = SamplerSettings(top_k=5, top_p=0.9)
    assert settings_diff(base, chained(base, "llama.cpp")) == "order → llama.cpp"
    assert settings_diff(base, chained(base, "temperature-last")) == "order → temperature-last"
    assert settings_diff(chained(base, "llama.cpp"), base) == "order → temperature-first"
    assert settings_diff(base, chained(base, "top_k,temperature").with_(top_k=3)) == (
        "top-k 5→3, order → top-k → temperature → top-p")
    assert settings_diff(base, base.with_(seed=4)) == ""
