"""The multiverse the dock showed, kept in the session file: saved as recorded and read back equal, its origin
following the ids a reopened session gives its runs; an older file without it opens; a wrong field is named."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.core.models.sources import ModelSpec
from app.core.record.multiverse import Multiverse, Node
from app.core.session.session_file import MAX_RUN_ID, SessionFormatError, encode, from_lines, load, save, to_session
from app.core.session.store import Session
from app.core.session.view_records import MultiverseRecord, Views
from tests.core.record.test_trace import make_run
from tests.core.session.test_session_file import SETTINGS, add_run, make_doc
from tests.core.session.test_view_records import views_session


def tree(origin: tuple[int, int] | None) -> Multiverse:
    """A root, two children (one a stage cut: 0 after the chain) and a grandchild."""
    nodes = (Node(0, -1, -1, "", 0, 1.0, 1.0, 1.0, 1.0),
             Node(1, 0, 7, " a", 1, 0.5, 0.5, 0.8, 0.8),
             Node(2, 0, 9, "\n", 1, 0.125, 0.125, 0.0, 0.0, cut_by="top_k"),
             Node(3, 1, 2, "</s>", 2, 0.25, 0.125, 0.5, 0.4, end=True))
    return Multiverse((3, 1, 4), (5,), "π ≈ x", "sampled", 10, 3, 4, SETTINGS.with_(top_k=1), nodes, expanded=3,
                      reason="budget", origin=origin)


def test_it_is_saved_and_read_back_equal_and_names_its_run_as_reopened(tmp_path: Path) -> None:
    session, ids = views_session()
    record = MultiverseRecord(ModelSpec("/models/tiny", "torch"), tree((ids[1], 1)))
    doc = replace(make_doc(session, ids), views=Views(multiverse=record))
    save(doc, tmp_path / "s.jsonl")
    assert set(json.loads((tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()[0])["views"]) == {
        "multiverse"}
    back = load(tmp_path / "s.jsonl")
    assert back.views.multiverse == record
    assert back.views.multiverse.multiverse.columns("sampled") == record.multiverse.columns("sampled")
    reopened, _ = to_session(back)
    assert reopened.views.multiverse.multiverse.origin == (ids[1], 1)


def test_its_origin_follows_fresh_ids_and_forgets_a_run_not_saved() -> None:
    session, ids = views_session()
    doc = make_doc(session, ids)
    fresh = {r.id: MAX_RUN_ID + 1 + i for i, r in enumerate(doc.runs)}
    runs = tuple(replace(r, trace=replace(r.trace, run_id=fresh[r.id], parent=None)) for r in doc.runs)
    for origin, want in (((fresh[ids[2]], 2), True), ((12345, 2), False)):
        views = Views(multiverse=MultiverseRecord(ModelSpec(), tree(origin)))
        back, _ = to_session(replace(doc, runs=runs, shown=None, views=views))
        moved = back.views.multiverse.multiverse.origin
        assert moved == ((list(back.runs)[2], 2) if want else None)


def test_a_session_from_before_the_multiverse_opens_without_one() -> None:
    session, ids = views_session()
    head, *rest = list(encode(make_doc(session, ids)))
    assert "multiverse" not in head
    assert from_lines([head, *rest]).views.multiverse is None


def test_a_field_of_the_wrong_type_is_named(tmp_path: Path) -> None:
    session = Session()
    ids = [add_run(session, make_run(steps=2))]
    doc = replace(make_doc(session, ids + ids), views=Views(multiverse=MultiverseRecord(ModelSpec(), tree(None))))
    save(doc, tmp_path / "s.jsonl")
    lines = (tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()
    head = json.loads(lines[0])
    head["views"]["multiverse"]["tree"]["nodes"][1]["prob"] = "x"
    with pytest.raises(SessionFormatError, match=r"views.multiverse.tree.nodes\[1\].prob must be a number"):
        from_lines([json.dumps(head), *lines[1:]])
