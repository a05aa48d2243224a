"""`logitlab steer make`, `generate --steer` and `steer grid` as a user runs them (in this process, on the session's
tiny Llama through torch's real loader and the model thread): the vector file is written and described, each steered
step's JSON carries what steering did and the summary its totals, the grid's lines start from the unsteered baseline,
and a bad --steer or a vector that does not fit is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.control_vectors import read_vector
from tests.e2e.test_cli import one_error_line, run_main

pytestmark = pytest.mark.needs("torch")


@pytest.fixture(scope="module")
def happy(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("steer") / "happy.gguf"


def test_make_writes_the_vector_and_says_what_a_strength_means(capsys, tiny_path: Path, happy: Path):
    code, out, err = run_main(capsys, "steer", "make", "--model", str(tiny_path), "--backend", "torch",
                              "--positive", "I love this", "--negative", "I hate this",
                              "--positive", "What a happy day", "--negative", "What a sad day", "-o", str(happy))
    assert code == 0, err
    v = read_vector(happy)
    assert v.layers == (1,) and v.pairs == 2 and v.method == "mean" and v.norms
    assert out.startswith(f"wrote {happy}: 1 layer(s), mean of 2 pair(s)") and "× the norm" in out


def test_generate_steered_records_each_step_and_sums_it_up(capsys, tiny_path: Path, happy: Path):
    code, out, err = run_main(capsys, "generate", "--model", str(tiny_path), "--backend", "torch", "--prompt",
                              "The day was", "--steer", f"{happy}:1:4", "--max-tokens", "5", "--seed", "2", "--json")
    assert code == 0, err
    *steps, summary = [json.loads(x) for x in out.splitlines()]
    assert len(steps) == 5 and all(s["steering"]["kl"] > 0 for s in steps)
    assert all(len(s["steering"]["unsteered"]) == len(s["top"]) for s in steps)
    assert summary["steering"]["mean_kl"] == pytest.approx(sum(s["steering"]["kl"] for s in steps) / 5)
    diverged = [s["step"] for s in steps if s["steering"]["twin_token"] != s["token_id"]]
    assert summary["steering"]["first_divergence"] == (diverged[0] if diverged else None)


@pytest.mark.parametrize(("flag", "says"), [("x.gguf:a:1", "layers are numbers"), ("x.gguf:1", "FILE:LAYERS"),
                                            ("x.gguf:1:much", "a number for STRENGTH")])
def test_a_bad_steer_flag_is_one_line(capsys, flag: str, says: str):
    code, _, err = run_main(capsys, "generate", "--prompt", "Hi", "--steer", flag)
    assert code == 2 and says in one_error_line(err)


def test_a_vector_for_another_layer_is_one_line_after_the_load(capsys, tiny_path: Path, happy: Path):
    code, _, err = run_main(capsys, "generate", "--model", str(tiny_path), "--backend", "torch", "--prompt", "Hi",
                            "--steer", f"{happy}:0:1", "--max-tokens", "2")
    assert code == 1 and err[-1] == "logitlab generate: error: steering: happy.gguf has no direction for layer 0 " \
                                    "(it has 1)"


def test_the_grid_runs_each_cell_from_the_unsteered_baseline(capsys, tiny_path: Path, happy: Path):
    code, out, err = run_main(capsys, "steer", "grid", "--model", str(tiny_path), "--backend", "torch", "--prompt",
                              "The day was", "--vector", str(happy), "--strengths", "2,30", "--layers", "1",
                              "--max-tokens", "6", "--seed", "4", "--json")
    assert code == 0, err
    cells = [json.loads(x) for x in out.splitlines()]
    assert [c["strength"] for c in cells] == [0.0, 2.0, 30.0]
    assert cells[0]["mean_kl"] == 0 and cells[0]["relative"] is None and cells[2]["mean_kl"] > cells[1]["mean_kl"]
    assert all(c["perplexity_unsteered"] > 0 for c in cells) and cells[2]["relative"] > cells[1]["relative"]
