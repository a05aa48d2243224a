"""A constrained run in the real window (tiny torch model): the step panel says what the grammar did at the step from
its record (legal count, mass removed, the favourite's fate, the best legal token and the margin, forced), a candidate
the grammar cut says so in its tooltip with the text it cannot follow, a server's run says the grammar was applied
there and not observed, and a run the core finds stuck says so in the banner."""

from __future__ import annotations

import html
from dataclasses import replace

import numpy as np

from app.core.record.record import GrammarStep
from app.core.record.trace import Sample, StepTrace
from app.core.settings import SamplerSettings
from app.core.stage_inputs import Constraint
from app.ui.formatting import format_prob, visible
from app.ui.run_view.step_panel import grammar_line

RUN_TIMEOUT = 60_000


def run(qtbot, window, settings: SamplerSettings) -> list[StepTrace]:
    window.prompt.set_prompt("Hello")
    window.sampler.set_settings(settings)
    with qtbot.waitSignal(window.playground.finished, timeout=RUN_TIMEOUT):
        assert window.playground.generate()
    return window.playground.steps


def test_the_step_panel_and_the_tooltip_say_what_the_grammar_did(qtbot, window):
    steps = run(qtbot, window, SamplerSettings(constraint=Constraint("regex", "[a-z]{4}"), max_tokens=6, seed=3))
    panel = window.step_panel
    qtbot.waitUntil(lambda: panel.chart.is_built, timeout=RUN_TIMEOUT)
    for st in steps[:2]:
        panel.show_step(st.step, st)
        g = st.sample.grammar
        line = panel.grammar.text()
        assert panel.grammar.isVisibleTo(panel) and line.startswith(f"grammar: {g.legal:,} legal")
        assert f"removed {format_prob(g.removed)} of the probability" in line
        if not g.favourite_kept:
            assert f"log-prob margin {g.margin:.2f}" in line
        chart, s = panel.chart.chart, st.sample
        cut = [i for i in range(len(st.top_texts)) if s.cut_by(i) == "grammar"]
        assert cut, "the grammar cut no recorded candidate"
        before = "".join(x.text for x in steps[: st.step])
        after = f"follow <code>{html.escape(visible(before))}</code>" if before else "come first"
        assert (f"<b>cut by the grammar</b>: <code>{html.escape(visible(st.top_texts[cut[0]]))}</code> cannot "
                f"{after}") in chart.bar_tip(cut[0])


def test_a_forced_step_and_a_servers_step_are_worded_from_the_record():
    partial = StepTrace(0, Sample.partial(5, -0.2, [5, 6], [-0.2, -1.9], "raw"), "x", ("x", "y"), 0.0)
    assert grammar_line(partial, constrained=True) == "grammar: applied by the server, not observed"
    assert grammar_line(partial) == ""
    forced = GrammarStep("first", 1, 0.3, 5, 6, 1.7, np.array([False, True]))
    st = replace(partial, sample=replace(partial.sample, grammar=forced))
    assert grammar_line(st) == "grammar: forced, <code>y</code> the only legal token"


def test_a_stuck_run_says_so_in_the_banner(qtbot, window):
    run(qtbot, window, SamplerSettings(constraint=Constraint("regex", " {100,200}x"), max_tokens=40, seed=1))
    qtbot.waitUntil(lambda: window.banner.isVisible(), timeout=RUN_TIMEOUT)
    assert "the constrained output looks stuck: the last 32 tokens were only whitespace (step 31)" in (
        window.banner.label.text())
