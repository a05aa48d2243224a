"""`logitlab generate --draft-model` as a user runs it: a real subprocess on the built-in model and its draft."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.record.trace import RunTrace
from tests.e2e.test_cli import logitlab

pytestmark = pytest.mark.needs("torch")  # these runs ask for the torch backend by name


def test_the_built_in_pair_prints_rounds_and_a_summary_and_saves_the_trace(tmp_path: Path):
    trace = tmp_path / "run.jsonl"
    r = logitlab("generate", "--backend", "torch", "--prompt", "import os\n", "--draft-model", "builtin-draft",
                 "--num-draft", "3", "--max-tokens", "12", "--temperature", "0", "--json", "--trace", str(trace))
    assert r.returncode == 0, r.stderr
    *rounds, summary = [json.loads(x) for x in r.stdout.splitlines()]
    assert rounds and all(set(x["round"]) >= {"drafts", "drawn", "residual", "kept"} for x in rounds)
    assert summary["summary"] and summary["tokens"] == 12 == sum(x["round"]["kept"] for x in rounds)
    assert summary["accepted"] == sum(x["accepted"] for x in rounds)
    assert summary["plain_rounds"] == sum(not x["round"]["drafts"] for x in rounds) and summary["note"] == ""
    assert RunTrace.load(trace).text == summary["text"]


def test_a_draft_with_another_tokenizer_fails_with_one_line(tiny_path: Path):
    r = logitlab("generate", "--backend", "torch", "--prompt", "x", "--draft-model", str(tiny_path),
                 "--max-tokens", "4")
    assert r.returncode == 1 and r.stdout == ""
    *loading, error = r.stderr.splitlines()  # what it loaded, as it loaded, then one line
    assert all(x.startswith(("Finding ", "Loading ", "loaded ")) for x in loading)
    assert error.startswith("logitlab generate: error: ") and "must share its target's tokenizer" in error
