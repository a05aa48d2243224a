"""What the views showed, kept in the session file: the beam search, the speculative run, the sweep, the Sample ×N
list, the think probes and the steering grid are saved as the core recorded them and read back equal; their runs
follow the ids a reopened session gives; a field of the wrong type is named; whatever a fuzzer puts in them is read
whole or refused in one line; a file written before the probes (or the steering grid) were kept still opens."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.compare import steer_grid
from app.core.compare.statistics import Axis, compare, make_grid
from app.core.decoding.beam import BeamFinished, BeamResult, BeamSettings, BeamStarted, BeamStep, Candidate, Hypothesis
from app.core.decoding.probes import ThinkProbe
from app.core.models.sources import ModelSpec
from app.core.record.spec_record import DraftToken, SpecRound, SpecStats, SpecSummary
from app.core.session.session_file import MAX_RUN_ID, SessionFormatError, encode, from_lines, load, save, to_session
from app.core.session.store import Session
from app.core.session.view_records import (
    BeamRecord,
    ProbesRecord,
    SamplesRecord,
    SpecRecord,
    SteeredCell,
    SteerGridRecord,
    SweepRecord,
    SweptCell,
    Views,
)
from tests.core.record.test_trace import make_run, mutate, strict_json
from tests.core.session.test_session_file import SETTINGS, add_run, make_doc


def beam_record() -> BeamRecord:
    """Two steps of a width-1 search: a kept beam and a pruned one (log p -inf: banned), then a finished one."""
    steps = (BeamStep(0, (0.0,), (Candidate(0, 7, -0.5, -0.5, "kept", row=0),
                                  Candidate(0, 8, -math.inf, -math.inf, "pruned")), 2),
             BeamStep(1, (-0.5,), (Candidate(0, 2, -0.25, -0.75, "finished", score=-0.375),
                                   Candidate(0, 9, -3.0, -3.5, "pruned")), 2))
    result = BeamResult((Hypothesis((7, 2), -0.75, -0.375, 1, "eos"),), 2, "done")
    finished = BeamFinished(41, result, ("a",), (tuple(make_run(steps=2).steps),))
    return BeamRecord(ModelSpec("/models/tiny", "torch"), BeamSettings(1, 1.0, "never", 0, 8),
                      BeamStarted(41, (3, 1, 4), "π ≈", 8), steps, {7: "a", 8: "b", 2: "</s>", 9: "↵"}, finished)


def spec_record(run_id: int) -> SpecRecord:
    kept, rejected = DraftToken(5, "x", 0.5, 0.25, True), DraftToken(6, "y\n", 0.4, 0.0, False)
    stats = SpecStats(rounds=1, drafted=2, accepted=1, tokens=2, target_forwards=1, draft_forwards=2)
    return SpecRecord(run_id, "/models/draft", 0, (SpecRound(0, 0, (kept, rejected), 9, "z", 1.0, True, 2),), stats,
                      SpecSummary(stats, 0, 0.5, 2, 0.25))


def probes_record(run_id: int) -> ProbesRecord:
    """Two probes over two answers; the first's close not known (NaN, as for markers without a close)."""
    def probe(step: int, lps: list[float], close: float) -> ThinkProbe:
        return ThinkProbe(step, step, np.array([17, 4]), np.array([-0.25, -1.5], np.float32), close, ("85", "86"),
                          np.array(lps, np.float32))
    return ProbesRecord(run_id, 2, "85, 86", (probe(0, [-2.0, -0.5], math.nan), probe(2, [-0.125, -3.0], -4.0)))


def steer_record(ids: list[int]) -> SteerGridRecord:
    """A 2 × 2 grid: its unsteered baseline done, a broken cell, a stopped one and one not started."""
    a, b, c, d = steer_grid.make_grid(SETTINGS, "/vectors/happy.gguf", [(1,), (2, 3)], [2.5])
    done = (steer_grid.CellResult(a, "a day", 3.5, 0.0, None, None),
            steer_grid.CellResult(b, "x\ny", 9.25, 0.5, 1, 0.75, broken=True))
    cells = (SteeredCell(a, tuple(ids[:2]), done[0]), SteeredCell(b, (ids[2],), done[1]),
             SteeredCell(c, (ids[0],), None, stopped=True), SteeredCell(d, (), None))
    return SteerGridRecord("0, 2.5", "1; 2-3", 2, cells)


def make_views(session: Session, ids: list[int]) -> Views:
    """Every view's record over the session's runs `ids` (the first two: one request's samples)."""
    both = compare([session.get(i).trace for i in ids[:2]], "t")
    axes = (Axis("temperature", (0.5, 1.0)), Axis("top_k", (5, 40)))  # (top_k's values: whole numbers)
    a, b, c, d = make_grid(SETTINGS, axes)
    sweep = SweepRecord(axes, 2, "distinct_2", "t", 2, (SweptCell(a, tuple(ids[:2]), both),
                                                        SweptCell(b, (ids[2],), None, stopped=True),
                                                        SweptCell(c, (), None), SweptCell(d, (), None)))
    return Views(beam_record(), spec_record(ids[2]), sweep, SamplesRecord(tuple(ids[:2]), both),
                 probes=probes_record(ids[1]), steer_grid=steer_record(ids))


def views_session() -> tuple[Session, list[int]]:
    session, ids = Session(), []
    for n in (3, 2, 4):
        ids.append(add_run(session, make_run(steps=n)))
        session.get(ids[-1]).trace.run_id = ids[-1]  # (as the view-model finishes a run: its trace is the run's)
    session.views = make_views(session, ids)
    return session, ids


def test_every_view_s_record_is_saved_and_read_back_equal(tmp_path: Path):
    session, ids = views_session()
    doc = replace(make_doc(session, ids), views=session.views)
    save(doc, tmp_path / "s.jsonl")
    lines = (tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()
    strict_json(lines[0])  # standard JSON: -inf as its string
    assert set(json.loads(lines[0])["views"]) == {"beam", "speculative", "sweep", "samples", "probes", "steer_grid"}
    back = load(tmp_path / "s.jsonl")
    assert back.views == doc.views and back == doc
    assert back.views.sweep.cells[1].cell.values == {"temperature": 0.5, "top_k": 40}  # a whole number stays one
    (steps,) = back.views.beam.finished.runs
    assert [s.token_id for s in steps] == [s.token_id for s in make_run(steps=2).steps]
    reopened, _ = to_session(back)
    assert reopened.views == doc.views  # the ids kept: the records name the same runs
    assert list(encode(back)) == lines
    probes = back.views.probes.probes
    assert [p.leading for p in probes] == ["86", "85"] and math.isnan(probes[0].close_logprob)
    np.testing.assert_array_equal(probes[1].top_ids, [17, 4])
    grid = back.views.steer_grid.cells
    assert grid[1].cell.settings.steering.layers == (1,) and grid[1].cell.settings.steering.strength == 2.5
    assert grid[1].result.broken and grid[1].result.cell == grid[1].cell and grid[2].stopped


def test_a_view_that_showed_nothing_has_no_key():
    session, ids = views_session()
    session.views = replace(session.views, beam=None, sweep=None, probes=None, steer_grid=None)
    head = json.loads(next(encode(replace(make_doc(session, ids), views=session.views))))
    assert set(head["views"]) == {"speculative", "samples"}
    assert "views" not in json.loads(next(encode(make_doc(session, ids))))


def test_the_records_follow_runs_given_fresh_ids_and_forget_runs_not_saved():
    session, ids = views_session()
    doc = replace(make_doc(session, ids), views=session.views)
    fresh = {r.id: MAX_RUN_ID + 1 + i for i, r in enumerate(doc.runs)}
    runs = tuple(replace(r, trace=replace(r.trace, run_id=fresh[r.id], parent=None)) for r in doc.runs)
    views = replace(doc.views, speculative=replace(doc.views.speculative, run_id=fresh[ids[2]]),
                    samples=replace(doc.views.samples, run_ids=(fresh[ids[0]], 12345)))  # (a run not saved)
    back, _ = to_session(replace(doc, runs=runs, shown=None, views=views))
    new = {saved: back_id for saved, back_id in zip(fresh.values(), back.runs, strict=True)}
    assert back.views.speculative.run_id == new[fresh[ids[2]]]
    assert back.views.samples.run_ids == (new[fresh[ids[0]]],)
    assert back.views.probes.run_id == 0  # (its saved id was the old one: the probes stay, naming no run)
    assert [s.run_id for s in back.views.samples.result.samples] == [0, 0]  # (their saved ids were the old ones)
    first = back.views.sweep.cells[0]
    assert first.run_ids == () and first.result.stats == doc.views.sweep.cells[0].result.stats
    assert [c.run_ids for c in back.views.steer_grid.cells] == [(), (), (), ()]  # (their saved ids: the old ones)
    assert back.views.steer_grid.cells[1].result == doc.views.steer_grid.cells[1].result  # the results kept
    moved = doc.views.renumbered({ids[0]: 7, ids[2]: 9}).steer_grid.cells
    assert [c.run_ids for c in moved] == [(7,), (9,), (7,), ()]  # (ids[1]: a run not kept)


@pytest.mark.parametrize(("path", "value", "says"), [
    (("speculative", "rounds", 0, "drafts", 1, "p_draft"), "x",
     r"views.speculative.rounds\[0\].drafts\[1\].p_draft must be a number"),
    (("beam", "steps", 1, "candidates", 0, "fate"), "lost",
     r'views.beam.steps\[1\].candidates\[0\].fate must be one of "kept"'),
    (("beam", "settings", "width"), 99, "beam width must be 1 to 8"),
    (("beam", "texts"), {"x": "a"}, "views.beam.texts must be keyed by whole numbers"),
    (("sweep", "cells", 0, "run_ids"), [1, "2"], r"views.sweep.cells\[0\].run_ids\[1\] must be a whole number"),
    (("samples", "result", "stats", "agreement"), 3, "views.samples.result.stats.agreement must be a list"),
    (("samples",), [], "views.samples must be an object"),
    (("probes", "probes", 1, "top_ids", 0), 1.5, r"views.probes.probes\[1\].top_ids\[0\] must be a whole number"),
    (("probes", "probes", 0, "answer_logprobs"), [1.0], r"views.probes.probes\[0\]: 2 top ids for 2 log-probabilities, "
     "2 answers for 1"),
    (("steer_grid", "cells", 1, "result", "perplexity"), "high", r"views.steer_grid.cells\[1\].result.perplexity must "
     "be a number"),
    (("steer_grid", "cells", 0, "cell", "layers"), 3, r"views.steer_grid.cells\[0\].cell.layers must be a list"),
    (("steer_grid", "samples"), None, "views.steer_grid.samples must be a whole number"),
])
def test_a_record_field_of_the_wrong_type_is_named(tmp_path: Path, path: tuple, value: object, says: str):
    session, ids = views_session()
    lines = list(encode(replace(make_doc(session, ids), views=session.views)))
    head = json.loads(lines[0])
    node = head["views"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(SessionFormatError, match=rf"^s.jsonl:1: damaged session header \(.*{says}"):
        from_lines([json.dumps(head), *lines[1:]], "s.jsonl")


def views_objs() -> list[dict]:
    session, ids = views_session()
    return [json.loads(line) for line in encode(replace(make_doc(session, ids), views=session.views))]


VIEWS_OBJS = views_objs()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_whatever_the_views_hold_they_are_read_whole_or_refused_in_one_line(data):
    head = VIEWS_OBJS[0]
    mutated = mutate(data, [head["views"]])  # (a value of the views object, up to three levels down)
    views = json.loads(mutated[0]) if mutated else None
    lines = [json.dumps({**head, "views": views}), *map(json.dumps, VIEWS_OBJS[1:])]
    try:
        doc = from_lines(lines, "s.jsonl")
    except SessionFormatError as e:
        assert str(e).startswith("s.jsonl:1:") and "\n" not in str(e)
    else:
        to_session(doc)
        encoded = list(encode(doc))
        assert list(encode(from_lines(encoded))) == encoded


@pytest.mark.parametrize("key", ["probes", "steer_grid"])
def test_a_session_saved_before_probes_or_the_steering_grid_were_kept_opens_without_them(key: str):
    head, *rest = VIEWS_OBJS
    older = {**head, "views": {k: v for k, v in head["views"].items() if k != key}}
    doc = from_lines([json.dumps(older), *map(json.dumps, rest)], "s.jsonl")
    assert getattr(doc.views, key) is None and doc.views.beam is not None
