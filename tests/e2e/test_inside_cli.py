"""`logitlab lens` and `logitlab attention` as a user runs them on the tiny model: the run drawn up to the step, then
the step's layers — a row per layer (or the grid as JSON), each layer's most attended tokens (or one layer's heads);
a server's model and a step before the first refused in one line; `generate --lens K` puts the live lens in each
step's JSON line."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.test_cli import one_error_line, run_main


def test_lens_prints_a_row_per_layer_and_json_the_grid(capsys, tiny_path: Path) -> None:
    common = ["--model", str(tiny_path), "--backend", "torch", "--prompt", "Hello", "--step", "2", "--seed", "3"]
    code, out, _ = run_main(capsys, "lens", *common)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("step 2 (position ")
    assert [ln.split()[0] for ln in lines[3:6]] == ["embeddings", "1", "2"]  # the tiny model: 2 layers
    assert "first leads" in lines[-1] or "never leads" in lines[-1]
    code, out, _ = run_main(capsys, "lens", *common, "--candidates", "4", "--json")
    grid = json.loads(out)
    assert code == 0 and grid["step"] == 2 and [r["layer"] for r in grid["layers"]] == ["embeddings", "1", "2"]
    assert all(len(r["top"]) == 4 for r in grid["layers"]) and "approximation" in grid
    last = grid["layers"][-1]
    assert last["token_rank"] >= 0 and 0 < last["token_prob"] <= 1


def test_attention_prints_each_layer_and_one_layers_heads(capsys, tiny_path: Path) -> None:
    common = ["--model", str(tiny_path), "--backend", "torch", "--prompt", "Hello", "--step", "1", "--seed", "3"]
    code, out, _ = run_main(capsys, "attention", *common)
    assert code == 0 and "2 layers × 4 heads; heads share KV heads in groups of 2" in out
    assert [ln.split()[:2] for ln in out.splitlines()[1:]] == [["layer", "1"], ["layer", "2"]]
    code, out, _ = run_main(capsys, "attention", *common, "--layer", "2", "--json")
    a = json.loads(out)
    assert code == 0 and [x["layer"] for x in a["layers"]] == [2] and len(a["layers"][0]["heads"]) == 4
    assert all(abs(sum(h) - 1) < 1e-5 for h in a["layers"][0]["heads"]) and len(a["context"]) == a["position"] + 1
    code, _, err = run_main(capsys, "attention", *common, "--layer", "3")
    assert code == 2 and err[-1] == "logitlab attention: error: --layer 3: this model has 2 layers"


def test_a_server_and_a_negative_step_are_refused_in_one_line(capsys, tiny_path: Path) -> None:
    code, _, err = run_main(capsys, "lens", "--backend", "remote", "--base-url", "http://127.0.0.1:9", "--prompt", "x")
    assert code == 2 and "a server's model exposes no layers" in one_error_line(err)
    code, _, err = run_main(capsys, "lens", "--model", str(tiny_path), "--prompt", "Hello", "--step", "-1")
    assert code == 2 and "argument --step" in one_error_line(err)


def test_generate_with_the_live_lens_records_it_in_every_step(capsys, tiny_path: Path) -> None:
    code, out, _ = run_main(capsys, "generate", "--model", str(tiny_path), "--backend", "torch", "--prompt", "Hello",
                            "--max-tokens", "3", "--seed", "3", "--lens", "5", "--json")
    *steps, _summary = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and len(steps) == 3
    assert all(len(s["lens"]["ids"]) == 5 and len(s["lens"]["logits"]) == 3 for s in steps)
    assert all(s["lens"]["ids"] == [t["token_id"] for t in s["top"][:5]] for s in steps)
