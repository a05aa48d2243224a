"""Token healing in the real window (tiny torch model): the surprisal view names a prompt that ends at a boundary the
model rarely saw (the core's reading of the `Scored` record), Heal runs the prompt as typed and healed together
(the healed one shown, its text starting with the backed-off token) and draws their first steps side by side from
the runs' records; what cannot be healed says why in one line."""

from __future__ import annotations

import math

from app.core.decoding.healing import Boundary, text_of
from app.core.settings import SamplerSettings
from app.core.stage_inputs import Constraint
from app.ui.run_view.healing_view import DRAWN

RUN_TIMEOUT = 60_000
PROMPT = "The quick brown fox jumps over the lazy "


def test_the_notice_names_a_rare_boundary_and_only_then(qtbot, window):
    view = window.prompt.surprisal
    rare = Boundary(7, " ", math.log(0.02), ((8, " lazy", 0.4), (9, " dog", 0.1)))
    view.show_boundary(rare, healable=True)
    assert view.notice.isVisibleTo(view) and "<code>·lazy</code> 0.400 and others" in view.notice.label.text()
    view.show_boundary(Boundary(7, " ", math.log(0.9), ((8, " lazy", 0.05),)), healable=True)
    assert not view.notice.isVisibleTo(view)
    view.show_boundary(rare, healable=False)  # a chat: nothing to heal at the template's end
    assert not view.notice.button.isEnabled()


def test_heal_runs_typed_and_healed_together_and_shows_their_first_steps(qtbot, window):
    window.prompt.set_prompt(PROMPT)
    window.sampler.set_settings(SamplerSettings(max_tokens=4, seed=3))
    healer = window.prompt.scoring.healer
    with qtbot.waitSignal(healer.compared, timeout=RUN_TIMEOUT) as sig:
        assert healer.heal()
    _typed, healed, text = sig.args
    assert text == " " and healed.text.startswith(" ")
    shown = window.playground.shown
    assert shown.request.prompt == PROMPT[:-1] and shown.request.settings.constraint == Constraint("regex",
                                                                                                    " (?s:.*)")
    qtbot.waitUntil(lambda: window.prompt.surprisal.healed.isVisibleTo(window.prompt.surprisal), timeout=RUN_TIMEOUT)
    bars = window.prompt.surprisal.healed.after_bars.rows
    final = dict(zip(healed.top_texts, healed.sample.final_probs.tolist(), strict=False))
    assert bars and [p for _, p, _ in bars] == sorted((p for p in final.values() if p > 0), reverse=True)[: len(bars)]
    tok = window.playground.tokenizer
    texts = {tok.token_text(t): t for t in healed.sample.top_ids[: len(healed.top_texts)].tolist()}
    assert all(text_of(tok)(texts[text]).startswith(" ") for text, _, _ in bars)  # healing left only these
    assert [text for text, _, colour in bars if colour == DRAWN] in ([healed.text], [])  # (drawn past the rows: [])


def test_a_constraint_set_refuses_healing_in_one_line(qtbot, window):
    window.prompt.set_prompt(PROMPT)
    window.sampler.set_settings(SamplerSettings(constraint=Constraint("regex", "[a-z]+"), seed=1))
    with qtbot.waitSignal(window.playground.refused, timeout=5000) as sig:
        assert not window.prompt.scoring.healer.heal()
    assert sig.args[0] == "healing constrains the text to start with the backed-off token: turn the constraint off"
