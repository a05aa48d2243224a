"""A constraint in the other loops, on a real tiny model: side by side (each column its own constraint, or none), beam
search (every hypothesis of constrained beams keeps to the grammar) and speculative decoding (drafts and the target's
draws alike: the output keeps to it, and a constraint placed after the draw is refused in one line)."""

from __future__ import annotations

import re
import threading

import pytest

from app.core.decoding.beam import BeamSettings
from app.core.decoding.speculative.rounds import check_settings
from app.core.decoding.together import generate_together
from app.core.events import Finished, Request
from app.core.runs.beam_run import BeamRequest, run_beam
from app.core.runs.speculative_run import run_speculative
from app.core.settings import SamplerSettings, SettingsError
from app.core.stage_inputs import Constraint

CODE = r"[0-9]{3}-[a-z]{2,4}"
YES_NO = Constraint("choices", "yes\nno")


def finished(events) -> list[Finished]:
    return [e for e in events if isinstance(e, Finished)]


def test_side_by_side_columns_each_keep_to_their_own_constraint(torch_model):
    columns = [SamplerSettings(seed=1, max_tokens=30, constraint=Constraint("regex", CODE)),
               SamplerSettings(seed=1, max_tokens=30, constraint=YES_NO),
               SamplerSettings(seed=1, max_tokens=30)]
    requests = [Request(prompt="Hello", settings=s, n=2) for s in columns]
    done = finished(generate_together(torch_model, requests, threading.Event()))
    by_request = {r.id: [f.trace.text for f in done if f.request_id == r.id] for r in requests}
    assert all(re.fullmatch(CODE, t) for t in by_request[requests[0].id])
    assert all(t in ("yes", "no") for t in by_request[requests[1].id])
    free = [f for f in done if f.request_id == requests[2].id]
    assert len(free) == 2 and all(st.sample.grammar is None for f in free for st in f.trace.steps)


def test_every_constrained_beam_keeps_to_the_grammar(torch_model):
    request = BeamRequest(prompt="Code:", settings=BeamSettings(width=3, max_tokens=16),
                          constraint=Constraint("regex", CODE))
    events = list(run_beam(torch_model, request, threading.Event()))
    result = events[-1]
    assert len(result.texts) == 3 and len(set(result.texts)) == 3
    assert all(re.fullmatch(CODE, t) for t in result.texts), result.texts
    assert all(h.reason == "eos" for h in result.result.hypotheses)


def test_speculative_drafts_and_the_targets_draws_keep_to_the_grammar(torch_model):
    for seed in range(3):
        settings = SamplerSettings(temperature=1.0, seed=seed, max_tokens=30, constraint=Constraint("regex", CODE))
        done = finished(run_speculative(torch_model, torch_model, Request(prompt="Hello", settings=settings,
                                                                          draft_k=3), threading.Event()))
        assert done[0].reason == "eos" and re.fullmatch(CODE, done[0].trace.text), done[0].trace.text
        assert all(st.sample.grammar is not None for st in done[0].trace.steps)


def test_speculative_decoding_refuses_a_constraint_checked_after_the_draw():
    with pytest.raises(SettingsError, match="place the constraint first"):
        check_settings(SamplerSettings(constraint=Constraint("regex", CODE, "on_reject")))
