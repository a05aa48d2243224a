"""The session file: saved and read back equal (prompt, messages, settings, model, every run's steps bit for bit,
names, parents); a newer or damaged file (a field of the wrong type named, whatever a fuzzer puts in) is refused
with file and line, never half-loaded."""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.events import Finished, Message, Request
from app.core.metrics import Metrics
from app.core.models.sources import ModelSpec
from app.core.record import trace as traces
from app.core.record.trace import RunTrace
from app.core.session.run_group import GroupColumn, RunGroup
from app.core.session.session_file import (
    MAX_RUN_ID,
    EncodedTraces,
    SavedSession,
    SessionFormatError,
    encode,
    from_lines,
    groups_of,
    load,
    runs_of,
    save,
    to_session,
)
from app.core.session.store import Session
from app.core.session.view_records import Views
from app.core.settings import SamplerSettings, StageOrder
from tests.core.record.test_trace import make_run, mutate, strict_json

SETTINGS = SamplerSettings(temperature=0.7, top_p=0.9, stop=("\n\n",), seed=5, order=StageOrder.TEMPERATURE_LAST)


def add_run(session: Session, trace: RunTrace | None, parent: tuple[int, int] | None = None, name: str = "",
            running: bool = False) -> int:
    """A run as the view-model leaves it: started by a request, then finished with `trace` (None: it failed)."""
    run = session.start(Request(prompt_ids=(1, 2), settings=SETTINGS, parent=parent))[0]
    if trace is not None:
        run.steps = list(trace.steps)
    if not running:
        run.finished = Finished(run.request.id, "length" if trace else "error", Metrics(), trace, run.id)
    run.name = name
    return run.id


def make_session() -> tuple[Session, list[int]]:
    """A root, a named branch from its step 2, a branch of that branch; then a failed run and one still running."""
    session = Session()
    a = add_run(session, make_run(steps=4))
    b = add_run(session, make_run(steps=3, settings=SETTINGS), parent=(a, 2), name="the second token ✓")
    c = add_run(session, make_run(steps=2), parent=(b, 1), name="deeper")
    add_run(session, None)
    add_run(session, make_run(steps=1), running=True)
    return session, [a, b, c]


def make_doc(session: Session | None = None, ids: list[int] | None = None,
             prompt: str = "def f(x):\n    return ") -> SavedSession:
    if session is None:
        session, ids = make_session()
    return SavedSession(prompt=prompt, messages=(Message("system", "Be brief."), Message("user", "π?"),
                        Message("assistant", "3.14\r\n")), chat=True, settings=SETTINGS, model="/models/tiny",
                        backend="torch", runs=runs_of(session), shown=ids[1])


def assert_same_runs(a: list, b: list) -> None:
    """Runs equal step for step (every float32 bit of every record, NaN and -inf included) and by name."""
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.name == y.name and len(x.trace.steps) == len(y.trace.steps)
        for s, t in zip(x.trace.steps, y.trace.steps, strict=True):
            assert (s.step, s.text, s.top_texts, s.seconds) == (t.step, t.text, t.top_texts, t.seconds)
            for part in ("top_ids", "kept", "values"):
                p, q = getattr(s.sample, part), getattr(t.sample, part)
                assert p.dtype == q.dtype and p.tobytes() == q.tobytes(), part
        assert (x.trace.settings, x.trace.prompt_ids, x.trace.seed, x.trace.metrics, x.trace.finish_reason) == (
            y.trace.settings, y.trace.prompt_ids, y.trace.seed, y.trace.metrics, y.trace.finish_reason)


def test_a_session_saved_and_reopened_equals_the_original(tmp_path: Path):
    doc = make_doc()
    save(doc, tmp_path / "s.jsonl")
    back = load(tmp_path / "s.jsonl")
    assert back == doc
    assert (back.prompt, back.messages, back.chat, back.settings, back.model, back.backend, back.shown) == (
        doc.prompt, doc.messages, doc.chat, doc.settings, doc.model, doc.backend, doc.shown)
    assert [(r.id, r.parent, r.name) for r in back.runs] == [(r.id, r.parent, r.name) for r in doc.runs]
    assert_same_runs(list(back.runs), list(doc.runs))


def test_the_runs_saved_are_those_that_left_a_trace_each_with_its_own_id_and_parent():
    session, (a, b, c) = make_session()
    runs = runs_of(session)
    assert [(r.id, r.parent, r.name) for r in runs] == [(a, None, ""), (b, (a, 2), "the second token ✓"),
                                                        (c, (b, 1), "deeper")]
    assert [len(r.trace.steps) for r in runs] == [5, 4, 3]  # make_run adds one step a server reported
    assert session.runs[b].trace.run_id == 4  # the session's own traces are left as they were


def test_the_file_is_a_header_then_per_run_a_name_line_and_its_trace_lines(tmp_path: Path):
    doc = make_doc()
    save(doc, tmp_path / "s.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()]
    head = lines[0]
    assert head["format"] == "logitlab-session" and head["version"] == 1 and head["runs"] == 3
    assert head["model"] == {"source": "/models/tiny", "backend": "torch"} and head["settings"]["top_p"] == 0.9
    assert head["messages"][2] == {"role": "assistant", "content": "3.14\r\n"}
    i = 1
    for run in doc.runs:
        assert lines[i] == {"run": run.id, "name": run.name, "steps": len(run.trace.steps)}
        assert lines[i + 1]["format"] == "logitlab-trace" and lines[i + 1]["run_id"] == run.id
        assert lines[i + 1]["parent"] == (list(run.parent) if run.parent else None)
        i += len(run.trace.steps) + 3
        assert lines[i - 1]["end"] is True
    assert i == len(lines)


def test_a_reopened_session_keeps_its_run_ids_and_later_runs_take_new_ones():
    """The issue: run 6 with parent [5, 70] came back as run 5 with parent [4, 70], and its export was titled by
    the new id. Ids are the runs' names: kept on open; a run started after it gets an id above them."""
    doc = make_doc()
    session, shown = to_session(doc)
    runs = list(session.runs.values())
    assert [r.name for r in runs] == [r.name for r in doc.runs]
    old = [r.id for r in doc.runs]
    assert [r.id for r in runs] == old and [r.parent for r in runs] == [r.parent for r in doc.runs]
    assert [r.trace.run_id for r in runs] == old and [r.trace.parent for r in runs] == [r.parent for r in runs]
    assert shown == old[1] and all(not r.running and r.steps == list(r.trace.steps) for r in runs)
    assert session.children(runs[0].id) == [runs[1]]
    assert Request().id > max(old)  # a later run never takes a saved id
    again, _ = to_session(doc)  # and opening it twice gives the same ids
    assert list(again.runs) == old


def test_ids_a_file_could_not_have_written_are_given_fresh_and_parents_follow():
    doc = make_doc()
    big = [replace(r, trace=replace(r.trace, run_id=MAX_RUN_ID + 1 + i,
                                    parent=None if r.parent is None else (MAX_RUN_ID + i, r.parent[1])))
           for i, r in enumerate(doc.runs)]
    session, _ = to_session(replace(doc, runs=tuple(big), shown=None))
    runs = list(session.runs.values())
    assert all(r.id <= MAX_RUN_ID for r in runs)
    assert [r.parent for r in runs] == [None, (runs[0].id, 2), (runs[1].id, 1)]


def test_a_parent_left_out_of_the_file_makes_its_child_a_root():
    doc = make_doc()
    session, _ = to_session(replace(doc, runs=doc.runs[1:], shown=None))
    first, second = session.runs.values()
    assert first.parent is None and second.parent == (first.id, 1)


def test_saving_replaces_the_file_atomically_and_a_failed_save_keeps_the_old_file(tmp_path: Path, monkeypatch):
    path = tmp_path / "s.jsonl"
    path.write_text("the old session\n")
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    doc = make_doc()
    save(doc, path)
    assert synced and load(path) == doc
    before = path.read_bytes()
    broken = make_doc()
    broken.runs[-1].trace.metrics = object()  # not serializable: fails after the other runs were written
    with pytest.raises(TypeError):
        save(broken, path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["s.jsonl"]


def test_later_saves_reuse_each_run_s_encoded_lines_and_write_the_same_file(tmp_path: Path, monkeypatch):
    encoded = []
    real = traces.to_lines
    monkeypatch.setattr(traces, "to_lines", lambda trace: (encoded.append(trace.run_id), real(trace))[1])
    session, ids = make_session()
    doc, cache = make_doc(session, ids), EncodedTraces()
    save(doc, tmp_path / "first.jsonl", cache)
    assert encoded == ids
    session.runs[ids[1]].name = "renamed"
    doc = make_doc(session, ids, prompt="edited")
    save(doc, tmp_path / "cached.jsonl", cache)
    assert encoded == ids  # nothing encoded again
    save(doc, tmp_path / "fresh.jsonl")
    assert (tmp_path / "cached.jsonl").read_bytes() == (tmp_path / "fresh.jsonl").read_bytes()
    assert load(tmp_path / "cached.jsonl") == doc
    encoded.clear()
    del session.runs[ids[0]]
    steps = session.runs[ids[2]].trace.steps
    steps.append(steps[0])
    save(make_doc(session, ids), tmp_path / "again.jsonl", cache)
    assert encoded == [ids[2]]  # a trace whose steps changed is encoded again; the first run is gone


def test_a_run_trace_file_opens_as_a_session_of_that_run(tmp_path: Path):
    trace = make_run(steps=3)
    trace.save(tmp_path / "run.jsonl")
    doc = load(tmp_path / "run.jsonl")
    assert doc.prompt == trace.prompt_text and doc.settings == trace.settings
    assert (doc.model, doc.backend, doc.shown) == ("/models/tiny", "torch", trace.run_id)
    assert [r.trace for r in doc.runs] == [trace]


def saved(tmp_path: Path) -> tuple[Path, list[str]]:
    path = tmp_path / "s.jsonl"
    save(make_doc(), path)
    return path, path.read_text(encoding="utf-8").splitlines()


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path


def test_a_file_from_a_newer_version_is_refused_with_file_and_line(tmp_path: Path):
    path, lines = saved(tmp_path)
    head = json.loads(lines[0])
    head["version"] = 2
    write(path, [json.dumps(head), *lines[1:]])
    with pytest.raises(SessionFormatError, match=rf"^{path}:1: written by a newer Logit Lab \(session format 2"):
        load(path)


def edit_header(lines: list[str], **changes: object) -> list[str]:
    head = json.loads(lines[0])
    head.update(changes)
    return [json.dumps(head), *lines[1:]]


# Line 1 is the header; the first run takes lines 2 (its name), 3 (its trace's header), 4-8 (5 steps) and 9 (the
# trace's footer), the second 10-16, the third 17-22.
@pytest.mark.parametrize(("damage", "line", "message"), [
    (lambda ls: ls[:-1], 22, "ends before the trace's last line"),
    (lambda ls: ls[:9], 10, "ends before the session's last run"),
    (lambda ls: [*ls[:4], ls[4][:50], *ls[5:]], 5, "damaged trace line"),
    (lambda ls: [*ls[:9], ls[9].replace('"steps"', '"stops"'), *ls[10:]], 10, "damaged run line"),
    (lambda ls: [*ls[:2], ls[2].replace('"run_id": ', '"run_id": 1'), *ls[3:]], 3, "says it is run"),
    (lambda ls: [*ls, ls[1]], None, "text after the session's last run"),
    (lambda ls: edit_header(ls, runs=2), 17, "text after the session's last run"),
    (lambda ls: edit_header(ls, messages=[{"role": "god", "content": "x"}]), 1, "role must be one of"),
    (lambda ls: edit_header(ls, settings={"top_p": 7}), 1, "damaged session header"),
    (lambda ls: edit_header(ls, prompt=3), 1, "damaged session header"),
    (lambda ls: ["[1, 2]", *ls[1:]], 1, "not a JSON object"),
    (lambda ls: ["{}", *ls[1:]], 1, "not a Logit Lab session"),
    (lambda ls: [], 1, "empty file"),
])
def test_a_damaged_file_is_refused_with_file_and_line_never_half_loaded(tmp_path: Path, damage, line, message):
    path, lines = saved(tmp_path)
    write(path, damage(lines))
    where = rf"{path}:{line if line is not None else len(lines) + 1}"
    with pytest.raises(SessionFormatError, match=rf"^{where}: .*{message}"):
        load(path)


def test_bytes_that_are_not_utf8_are_a_format_error(tmp_path: Path):
    path, lines = saved(tmp_path)
    path.write_bytes((lines[0] + "\n").encode() + b"\xff\xfe\n")
    with pytest.raises(SessionFormatError, match=rf"^{path}:2: damaged"):
        load(path)


def test_a_run_that_ended_in_error_keeps_its_tokens_and_its_reason_when_saved_and_reopened(tmp_path: Path):
    session = Session()
    trace = make_run(steps=3)
    trace.finish_reason, trace.finish_message = "error", "the server closed the connection mid-stream"
    rid = add_run(session, trace)
    session.get(rid).finished = Finished(1, "error", Metrics(), trace, rid, message=trace.finish_message)
    save(make_doc(session, [rid, rid]), tmp_path / "s.jsonl")
    reopened = to_session(load(tmp_path / "s.jsonl"))[0]
    (run,) = reopened.runs.values()
    assert run.finished.reason == "error" and run.finished.message == "the server closed the connection mid-stream"
    assert len(run.steps) == len(trace.steps)


DEEP = 100_000


@pytest.mark.parametrize(("damage", "line", "says"), [
    (lambda ls: ["[" * DEEP + "]" * DEEP, *ls[1:]], 1, "damaged line (nested too deeply to be read)"),
    (lambda ls: [ls[0].replace('"prompt": ', '"prompt": ' + "[" * DEEP + "]" * DEEP + ', "p": '), *ls[1:]], 1,
     "damaged line (nested too deeply to be read)"),
    (lambda ls: [*ls[:1], '{"run": ' + "[" * DEEP + "]" * DEEP + "}", *ls[2:]], 2, "nested too deeply"),
    (lambda ls: [*ls[:4], '{"step": 1, "kept": ' + "[" * DEEP + "]" * DEEP + "}", *ls[5:]], 5, "nested too deeply"),
])
def test_json_nested_too_deeply_is_refused_in_one_line(tmp_path: Path, damage, line, says):
    path, lines = saved(tmp_path)
    write(path, damage(lines))
    with pytest.raises(SessionFormatError) as e:
        load(path)
    assert str(e.value).startswith(f"{path}:{line}: ") and says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("change", "says"), [
    ({"messages": {"role": "user"}}, 'messages must be a list, got {"role": "user"}'),
    ({"messages": ["hi"]}, 'messages[0] must be an object (a role and its content), got "hi"'),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content must be text, got 5"),
    ({"model": "tiny"}, 'model must be an object, got "tiny"'),
    ({"model": {"source": "tiny", "backend": None}}, "model.backend must be text, got null"),
    ({"chat": "yes"}, 'chat must be true or false, got "yes"'),
    ({"shown": "2"}, 'shown must be a whole number or null, got "2"'),
    ({"runs": -1}, "runs must be a count, got -1"),
    ({"settings": {"temperature": "hot"}}, 'settings.temperature must be a number, got "hot"'),
    ({"origin": ["a"]}, 'origin must be text, got ["a"]'),
])
def test_a_header_field_of_the_wrong_type_is_refused_with_its_name(tmp_path: Path, change: dict, says: str):
    path, lines = saved(tmp_path)
    write(path, edit_header(lines, **change))
    with pytest.raises(SessionFormatError) as e:
        load(path)
    assert str(e.value) == f"{path}:1: damaged session header ({says})"


def test_a_run_line_of_the_wrong_type_is_refused_with_its_name(tmp_path: Path):
    path, lines = saved(tmp_path)
    write(path, [lines[0], lines[1].replace('"name": ""', '"name": 3'), *lines[2:]])
    with pytest.raises(SessionFormatError) as e:
        load(path)
    assert str(e.value) == f"{path}:2: damaged run line (name must be text, got 3)"


def two_runs() -> tuple[Session, list[int]]:
    session = Session()
    a = add_run(session, make_run(steps=1))
    return session, [a, add_run(session, make_run(steps=1), parent=(a, 0), name="b")]


SESSION_OBJS = [json.loads(line) for line in encode(make_doc(*two_runs()))]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_whatever_a_session_file_holds_it_is_read_whole_or_refused_in_one_line(data):
    lines = mutate(data, SESSION_OBJS)
    try:
        doc = from_lines(lines, "s.jsonl")
    except SessionFormatError as e:
        assert str(e).startswith("s.jsonl:") and "\n" not in str(e)
    else:
        to_session(doc)
        encoded = list(encode(doc))
        assert list(encode(from_lines(encoded))) == encoded


def test_numbers_that_are_not_finite_are_saved_as_standard_json_and_read_back(tmp_path: Path):
    session = Session()
    trace = make_run(steps=2)
    trace.steps[0] = replace(trace.steps[0], seconds=math.inf)
    trace.metrics = replace(trace.metrics, itl_p95_s=math.nan, ttft_s=-math.inf)
    rid = add_run(session, trace)
    save(make_doc(session, [rid, rid]), tmp_path / "s.jsonl")
    lines = (tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()
    for line in lines:
        strict_json(line)
    back = load(tmp_path / "s.jsonl")
    assert list(encode(back)) == lines and back.runs[0].trace.steps[0].seconds == math.inf
    assert math.isnan(back.runs[0].trace.metrics.itl_p95_s) and back.runs[0].trace.metrics.ttft_s == -math.inf


# Side-by-side groups: which runs were the columns, their labels and models, kept in the header.
def grouped_doc() -> tuple[SavedSession, RunGroup]:
    session, (a, b, c) = make_session()
    draft = ModelSpec("/models/draft", "torch")
    group = RunGroup((GroupColumn(c, "A: T 0"), GroupColumn(a, "B: T 1.2", draft)))
    session.groups.append(group)
    session.groups.append(RunGroup((GroupColumn(999, "a run never saved"),)))  # (all of its runs failed)
    return replace(make_doc(session, [a, b, c]), groups=groups_of(session)), group


def test_a_side_by_side_group_is_saved_and_reopened_with_its_columns_in_order(tmp_path: Path):
    doc, group = grouped_doc()
    assert doc.groups == (group,)  # a group none of whose runs left a trace is not saved
    save(doc, tmp_path / "s.jsonl")
    back = load(tmp_path / "s.jsonl")
    assert back.groups == (group,)
    session, _ = to_session(back)
    assert session.groups == [group]
    first, second = (session.get(i) for i in group.run_ids)
    assert first.request.model == ModelSpec("/models/tiny", "torch")  # the session's model
    assert second.request.model == ModelSpec("/models/draft", "torch")  # the column's own: forks run on it


def test_a_file_without_groups_still_opens_and_a_group_naming_a_run_not_there_is_refused(tmp_path: Path):
    path, lines = saved(tmp_path)
    head = json.loads(lines[0])
    del head["groups"]  # as files written before groups were kept
    write(path, [json.dumps(head), *lines[1:]])
    assert load(path).groups == () and to_session(load(path))[0].groups == []
    write(path, edit_header(lines, groups=[{"kind": "side_by_side", "columns": [{"run": 12345}]}]))
    with pytest.raises(SessionFormatError, match=rf"^{path}:1: a group names a run the file does not hold"):
        load(path)
    write(path, edit_header(lines, groups=[{"kind": "side_by_side", "columns": [{"run": "x"}]}]))
    with pytest.raises(SessionFormatError, match=r"groups\[0\]\.columns\[0\]\.run must be a whole number"):
        load(path)


def test_groups_follow_runs_given_fresh_ids():
    doc, group = grouped_doc()
    big = tuple(replace(r, trace=replace(r.trace, run_id=MAX_RUN_ID + 1 + i, parent=None))
                for i, r in enumerate(doc.runs))
    renumber = {r.id: MAX_RUN_ID + 1 + i for i, r in enumerate(doc.runs)}
    moved = RunGroup(tuple(replace(c, run_id=renumber[c.run_id]) for c in group.columns))
    session, _ = to_session(replace(doc, runs=big, shown=None, groups=(moved,)))
    (back,) = session.groups
    assert [c.label for c in back.columns] == ["A: T 0", "B: T 1.2"]
    assert [session.get(i).trace.token_ids for i in back.run_ids] == [
        doc.runs[2].trace.token_ids, doc.runs[0].trace.token_ids]


# Files written before a key was kept hold none of it: a missing key is nothing of that kind.
def test_a_file_written_before_the_views_and_requests_were_kept_still_opens_with_none_of_them(tmp_path: Path):
    session, ids = make_session()
    runs = runs_of(session)
    old = {"format": "logitlab-session", "version": 1, "prompt": "π", "messages": [], "chat": False,
           "settings": SETTINGS.to_dict(), "model": {"source": "/models/tiny", "backend": "torch"}, "shown": ids[2],
           "origin": "", "runs": len(runs)}  # (no groups, prompt_set or views; no request on a run's line)
    lines = [json.dumps(old)]
    for run in runs:
        lines.append(json.dumps({"run": run.id, "name": run.name, "steps": len(run.trace.steps)}))
        lines.extend(json.dumps(obj) for obj in traces.to_lines(run.trace))
    doc = load(write(tmp_path / "old.jsonl", lines))
    assert doc.views == Views() and doc.groups == () and doc.prompt_set is None
    assert [r.request for r in doc.runs] == [None, None, None]
    reopened, shown = to_session(doc)
    assert reopened.views == Views() and shown == ids[2]
    assert [len(reopened.of_request(r.request.id)) for r in reopened.runs.values()] == [1, 1, 1]


def test_the_samples_of_one_request_reopen_as_that_request_s_samples(tmp_path: Path):
    session = Session()
    request = Request(prompt_ids=(1, 2), settings=SETTINGS, n=3)
    for run, trace in zip(session.start(request), (make_run(steps=2), None, make_run(steps=3)), strict=True):
        run.steps = list(trace.steps) if trace is not None else []
        run.finished = Finished(request.id, "length" if trace else "error", Metrics(), trace, run.id)
    alone = add_run(session, make_run(steps=1))
    runs = runs_of(session)  # the second sample failed: not saved
    assert [r.request for r in runs] == [request.id, request.id, None]
    save(make_doc(session, [alone, alone]), tmp_path / "s.jsonl")
    reopened, _ = to_session(load(tmp_path / "s.jsonl"))
    first, third, lone = reopened.runs.values()
    assert first.request is third.request and first.request.id == request.id
    assert [r.id for r in reopened.of_request(request.id)] == [request.run_ids[0], request.run_ids[2]]
    assert [r.sequence for r in (first, third)] == [0, 1] and lone.request.n == 1
    assert [len(t.steps) for t in reopened.finished_traces(request.id)] == [3, 4]
