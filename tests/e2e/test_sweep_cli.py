"""`logitlab generate --stats` and `logitlab sweep` as a user runs them: a real subprocess on a real tiny model."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from app.core.compare.statistics import compare
from app.core.record.trace import RunTrace
from tests.e2e.test_cli import logitlab

pytestmark = pytest.mark.needs("torch")  # these runs ask for the torch backend by name


def test_stats_are_the_core_s_on_the_samples_it_drew(tiny_path: Path, tmp_path: Path):
    trace = tmp_path / "s.jsonl"
    r = logitlab("generate", "--model", str(tiny_path), "--backend", "torch", "--prompt", "Hello", "--n", "4",
                 "--max-tokens", "8", "--temperature", "1.3", "--seed", "11", "--stats", "--match", "l+",
                 "--trace", str(trace))
    assert r.returncode == 0, r.stderr
    *samples, stats = [json.loads(x) for x in r.stdout.splitlines()]
    assert [s["sequence"] for s in samples] == [0, 1, 2, 3] and [s["seed"] for s in samples] == [11, 12, 13, 14]
    saved = [RunTrace.load(tmp_path / f"s.{i}.jsonl") for i in range(4)]
    want = compare(saved, "l+")
    assert [s["tokens"] for s in samples] == [t.token_ids for t in saved]
    assert {k: v for k, v in samples[2].items() if k not in ("sample", "run_id")} == {
        k: v for k, v in want.samples[2].to_json().items() if k != "run_id"}
    assert stats == {"stats": True, **want.stats.to_json()}
    assert stats["n"] == 4 and len(stats["agreement"]) == max(s["length"] for s in samples)


def test_a_3x3_sweep_gives_a_line_per_cell_and_greedy_cells_agree(tiny_path: Path):
    r = logitlab("sweep", "--model", str(tiny_path), "--backend", "torch", "--prompt", "Hello", "--n", "3",
                 "--max-tokens", "6", "--seed", "2", "--grid", "temperature=0,0.8,1.6", "--grid", "top_k=0,5,50")
    assert r.returncode == 0, r.stderr
    cells = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(c["row"], c["col"]) for c in cells] == [(i, j) for i in range(3) for j in range(3)]
    assert cells[4]["settings"] == {"temperature": 0.8, "top_k": 5}
    for greedy in cells[:3]:  # temperature 0: the same tokens in every sample, whatever top-k
        assert greedy["unique"] == 1 and set(greedy["agreement"]) == {3}
    assert cells[8]["unique"] > 1  # hot and wide: these seeds draw different samples
    assert "cell 9/9" in r.stderr


def test_a_sweep_as_csv_holds_every_cell(tiny_path: Path):
    r = logitlab("sweep", "--model", str(tiny_path), "--backend", "torch", "--prompt", "Hello", "--n", "2",
                 "--max-tokens", "4", "--seed", "2", "--grid", "top_p=0.5,1", "--format", "csv", "--match", "x")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [row["top_p"] for row in rows] == ["0.5", "1.0"]
    assert all(0 <= float(row["distinct_2"]) <= 1 and row["match_rate"] != "" for row in rows)


@pytest.mark.parametrize(("args", "message"), [
    (["sweep", "--prompt", "x", "--grid", "warmth=1,2"], "NAME one of temperature"),
    (["sweep", "--prompt", "x", "--grid", "temperature=1,9"], "temperature must be a number from 0 to 2"),
    (["sweep", "--prompt", "x"], "--grid"),
    (["generate", "--prompt", "x", "--stats", "--match", "("], "not a regular expression"),
    (["generate", "--prompt", "x", "--stats", "--json"], "leave out --json"),
])
def test_bad_input_is_one_line(args: list[str], message: str):
    r = logitlab(*args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_sweep_over_a_prompt_set_gives_a_line_per_prompt_and_cell(tiny_path: Path, tmp_path: Path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Hello"}\n"Goodbye"\n', encoding="utf-8")
    r = logitlab("sweep", "--model", str(tiny_path), "--backend", "torch", "--prompt-set", str(prompts), "--n", "2",
                 "--max-tokens", "3", "--seed", "1", "--grid", "temperature=0,1")
    assert r.returncode == 0, r.stderr
    cells = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(c["prompt"], c["settings"]["temperature"]) for c in cells] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert cells[0]["texts"] != cells[2]["texts"]  # another prompt, another continuation
