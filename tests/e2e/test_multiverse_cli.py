"""`logitlab multiverse` as a user runs it: a real subprocess on the tiny model; its JSON parses and holds the tree
within the budget and the depth, each column summing to 1 with its remainder; a bad flag is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.record.multiverse import Multiverse
from tests.e2e.test_cli import logitlab


def test_json_holds_the_tree_with_its_columns(tiny_path: Path) -> None:
    r = logitlab("multiverse", "--model", str(tiny_path), "--backend", "torch", "--prompt", "Hello", "--depth", "2",
                 "--budget", "8", "--width", "4", "--sampled", "--top-k", "3", "--json")
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["type"] == "multiverse" and obj["space"] == "sampled"
    mv = Multiverse.from_dict({k: v for k, v in obj.items() if k not in ("type", "columns")})
    assert mv.ranked == 8 and max(n.depth for n in mv.nodes) <= 2 and mv.settings.top_k == 3
    assert any(n.cut_by == "top_k" for n in mv.nodes)  # (width 4, top-k 3: one child of each node cut)
    for space in ("model", "sampled"):
        cols = obj["columns"][space]
        assert [c["depth"] for c in cols] == [1, 2]
        assert all(c["explored"] + c["remainder"] == pytest.approx(1.0) for c in cols)
    assert "nodes ranked by the sampled probability" in r.stderr


def test_a_bad_flag_is_one_line() -> None:
    r = logitlab("multiverse", "--prompt", "x", "--budget", "0")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "--budget" in r.stderr and "from 1 to" in r.stderr
