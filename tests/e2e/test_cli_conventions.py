"""One convention across the commands, as a user meets it: an error line begins with its command and names the
flag as typed; a seed drawn for a run is reported; a model is named the same way everywhere; stderr says what is
loading while stdout keeps only the output; top-k takes any k, as the engines do."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from app.core.models.sources import BUILTIN_DRAFT_PATH
from app.core.settings import FIELD_BY_NAME
from tests.e2e.test_cli import logitlab, one_error_line, run_main

LOADING = "Loading Built-in model (Python, 5M) with torch…"


@pytest.mark.parametrize(("argv", "says"), [
    (["generate", "--prompt", "x", "--top-k", "-1"],
     "logitlab generate: error: argument --top-k: must be an integer 0 or more (0 = off), got -1"),
    (["generate", "--prompt", "x", "--top-p", "2"],
     "logitlab generate: error: argument --top-p: must be a number from 0 to 1, got 2.0"),
    (["sweep", "--prompt", "x", "--grid", "temperature=0,1", "--min-p", "-0.5"],
     "logitlab sweep: error: argument --min-p: must be a number from 0 to 1, got -0.5"),
    (["--repetition-penalty", "9"],
     "logitlab: error: argument --repetition-penalty: must be a number from 0.5 to 2, got 9.0"),
    (["generate", "--prompt", "x", "--stop", ""], "logitlab generate: error: argument --stop: a stop string cannot be "
                                                  "empty"),
])
def test_a_setting_out_of_range_names_the_flag_typed(capsys, argv: list[str], says: str):
    code, out, err = run_main(capsys, *argv)
    cmd = argv[0] if argv[0] in ("generate", "sweep") else ""
    assert code == 2 and out == "" and one_error_line(err) == f"{says} (see logitlab {cmd}{' ' if cmd else ''}--help)"


@pytest.mark.parametrize(("argv", "prog"), [
    (["generate", "--prompt", "x", "--trace", "/no/folder/t.jsonl"], "logitlab generate"),
    (["generate", "--prompt", "x", "--stats", "--json"], "logitlab generate"),
    (["generate", "--prompt", "x", "--draft-model", "builtin-draft", "--n", "2"], "logitlab generate"),
    (["sweep", "--prompt", "x", "--grid", "temperature=0,9"], "logitlab sweep"),
    (["diff", "--prompt-file", "/no/such/file"], "logitlab diff"),
    (["models", "--api-key-env", "KEY"], "logitlab models"),
])
def test_every_error_line_begins_with_its_command(capsys, argv: list[str], prog: str):
    code, _, err = run_main(capsys, *argv)
    assert code == 2 and one_error_line(err).startswith(f"{prog}: error: ")


def test_an_error_at_run_time_begins_with_its_command_too(tiny_path: Path):
    r = logitlab("generate", "--model", str(tiny_path), "--prompt", "x", "--max-tokens", "2", "--logit-bias",
                 "nosuchtoken-here=1")
    assert r.returncode == 2 and r.stderr.splitlines()[-1].startswith("logitlab generate: error: logit bias: ")


def test_an_engine_misspelt_in_the_order_names_the_engines_and_the_way_to_use_them(capsys):
    code, _, err = run_main(capsys, "generate", "--prompt", "x", "--order", "llamacpp")
    line = one_error_line(err)
    assert code == 2 and line.startswith("logitlab generate: error: argument --order: unknown stage 'llamacpp' in the "
                                         "order (did you mean llama.cpp?): give an engine's order (llama.cpp, "
                                         "mlx-lm, transformers, vllm, openai), temperature-first or temperature-last,")


@pytest.mark.needs("torch")
def test_speculative_decoding_reports_the_seed_it_drew_and_that_seed_replays_it():
    common = ["generate", "--backend", "torch", "--prompt", "import os\n", "--draft-model", "builtin-draft",
              "--max-tokens", "8", "--temperature", "1.2", "--json"]
    r = logitlab(*common)
    assert r.returncode == 0, r.stderr
    seeds = [int(m[1]) for m in re.finditer(r"^seed (\d+)$", r.stderr, re.M)]
    summary = json.loads(r.stdout.splitlines()[-1])
    assert len(seeds) == 1 and summary["seed"] == seeds[0]
    again = logitlab(*common, "--seed", str(seeds[0]))
    assert json.loads(again.stdout.splitlines()[-1])["text"] == summary["text"]


def test_a_sweep_draws_one_seed_for_every_cell_reports_it_and_counts_prompts_from_0(tiny_path: Path,
                                                                                  tmp_path: Path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('"Hello"\n"Goodbye"\n', encoding="utf-8")
    r = logitlab("sweep", "--model", str(tiny_path), "--prompt-set", str(prompts), "--n", "2", "--max-tokens", "3",
                 "--grid", "temperature=0.5,1")
    assert r.returncode == 0, r.stderr
    cells = [json.loads(x) for x in r.stdout.splitlines()]
    [(first, last)] = re.findall(r"^seeds (\d+)\.\.(\d+), in every cell$", r.stderr, re.M)
    assert {c["seed"] for c in cells} == {int(first)} and int(last) == int(first) + 1
    said = re.findall(r"^cell \d+/4: prompt (\d+), temperature=(\S+)$", r.stderr, re.M)
    assert said == [(str(c["prompt"]), f"{c['settings']['temperature']:g}") for c in cells]
    assert [c["prompt"] for c in cells] == [0, 0, 1, 1]


@pytest.mark.needs("torch")
def test_diff_takes_the_built_in_draft_by_the_name_generate_takes():
    r = logitlab("diff", "--model", "builtin", "--model-b", "builtin-draft", "--backend", "torch", "--device", "cpu",
                 "--prompt", "def f(x):\n    return x\n")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.splitlines()[-1])
    assert summary["a"].startswith("Built-in model") and summary["b"].startswith("builtin-draft · torch")


def test_diff_refuses_a_model_b_it_cannot_find_before_loading_anything():
    start = time.perf_counter()
    r = logitlab("diff", "--model-b", "nobody-here", "--prompt", "def f():\n    return 1\n")
    assert r.returncode == 2 and r.stdout == "" and time.perf_counter() - start < 30
    assert r.stderr.splitlines() == ["logitlab diff: error: --model-b: no model folder at 'nobody-here', and it is "
                                     "not a hub id like 'owner/name'"]  # nothing loaded: no "Loading" line


def test_models_lists_the_built_in_draft_by_the_name_the_commands_take(tmp_path: Path):
    from tests.e2e.test_cli import ENV

    env = {**ENV, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    r = logitlab("models", "--cache-dir", str(tmp_path / "empty-cache"), "--json", env=env)
    listed = {e["source"]: e for e in json.loads(r.stdout)}
    assert listed["builtin-draft"]["path"] == str(BUILTIN_DRAFT_PATH) and listed["builtin-draft"]["size_bytes"] > 0
    text = logitlab("models", "--cache-dir", str(tmp_path / "empty-cache"), env=env).stdout.splitlines()
    assert text[2].split()[:1] == ["builtin-draft"]


@pytest.mark.needs("torch")
@pytest.mark.parametrize("extra", [["--beams", "2"], ["--draft-model", "builtin-draft"]])
def test_beams_and_speculative_runs_say_what_is_loading_on_stderr_alone(extra: list[str]):
    r = logitlab("generate", "--backend", "torch", "--prompt", "import ", "--max-tokens", "4", "--json", *extra)
    assert r.returncode == 0, r.stderr
    assert all(json.loads(line) for line in r.stdout.splitlines())  # stdout: JSON Lines only
    lines = r.stderr.splitlines()
    assert lines[:2] == ["Finding Built-in model (Python, 5M)…", LOADING] and lines[2].startswith("loaded ")


def test_top_k_takes_any_k_and_one_past_the_vocabulary_is_off(tiny_path: Path):
    f = FIELD_BY_NAME["top_k"]
    assert f.span == "0 or more" and f.slider_hi == 200
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    assert "| top-k | 0 or more, 0 = off |" in readme  # one range: the help's, the error's, the README's
    common = ["generate", "--model", str(tiny_path), "--prompt", "Hello", "--max-tokens", "6", "--seed", "4",
              "--temperature", "1.5"]
    off, huge = logitlab(*common, "--top-k", "0"), logitlab(*common, "--top-k", "100000")
    assert off.returncode == huge.returncode == 0, off.stderr + huge.stderr
    assert huge.stdout == off.stdout  # k ≥ the vocabulary keeps every token: off
