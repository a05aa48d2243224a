"""The `logitlab` command as a user runs it: a real subprocess, real tiny models, real exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from app.core.trace import RunTrace

ENV = {**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error",
       "XDG_CONFIG_HOME": tempfile.mkdtemp(prefix="logitlab-config-")}  # never the user's own settings
STEP_KEYS = {"step", "token_id", "text", "prob", "logprob", "rank", "entropy", "top"}
SUMMARY_KEYS = {"summary", "finish_reason", "prompt_tokens", "generated_tokens", "ttft_s", "decode_tokens_per_s",
                "text"}


def logitlab(*args: str, stdin: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], input=stdin, capture_output=True, text=True,
                          timeout=180, env=env or ENV)


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_generate_json_lines_and_trace_file(tiny_path: Path, tmp_path: Path, backend: str):
    trace = tmp_path / "run.jsonl"
    r = logitlab("generate", "--model", str(tiny_path), "--backend", backend, "--prompt", "Hello",
                 "--max-tokens", "8", "--seed", "3", "--top-k", "20", "--json", "--trace", str(trace))
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    *steps, summary = lines
    saved = RunTrace.load(trace)  # the run's own file format, readable back
    assert saved.token_ids == [s["token_id"] for s in steps] and saved.text == summary["text"]
    assert saved.finish_reason == summary["finish_reason"] and saved.seed == 3
    assert summary["summary"] is True and summary.keys() >= SUMMARY_KEYS
    assert summary["generated_tokens"] == len(steps) and summary["text"] == "".join(s["text"] for s in steps)
    for s in steps:
        assert s.keys() >= STEP_KEYS and len(s["top"]) == 20
        raw = [c["raw_prob"] for c in s["top"]]
        assert raw == sorted(raw, reverse=True)
        assert sum(c["prob"] for c in s["top"]) == pytest.approx(1.0, abs=1e-3)  # top-k 20


def test_same_seed_same_text_from_text_mode_and_stdin(tiny_path: Path):
    a = logitlab("generate", "--model", str(tiny_path), "--prompt", "Hello", "--max-tokens", "10", "--seed", "5")
    b = logitlab("generate", "--model", str(tiny_path), "--max-tokens", "10", "--seed", "5", stdin="Hello")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout and a.stdout.strip()
    assert "tok/s" in a.stderr and "TTFT" in a.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "/no/such/folder"], "no model folder at '/no/such/folder'"),
    (["--temperature", "9"], "temperature must be a number from 0 to 2"),
    (["--top-p", "-1"], "top_p must be"),
    (["--backend", "tpu"], "invalid choice"),
    (["--model", "nobody-here/not-a-model"], "nobody-here/not-a-model"),
])
def test_bad_input_exits_nonzero_with_one_clear_line(tiny_path: Path, args: list[str], message: str):
    full = ["generate", "--prompt", "x", "--max-tokens", "2", *args]
    if "--model" not in args:
        full += ["--model", str(tiny_path)]
    r = logitlab(*full)
    assert r.returncode != 0
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_n_samples_stream_as_json_lines_and_print_one_after_another(tiny_path: Path, tmp_path: Path):
    common = ["generate", "--model", str(tiny_path), "--prompt", "Hello", "--max-tokens", "6", "--temperature", "1.5"]
    r = logitlab(*common, "--seed", "4", "--n", "3", "--json", "--trace", str(tmp_path / "run.jsonl"))
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    summaries = [x for x in lines if x.get("summary")]
    assert sorted(x["sequence"] for x in summaries) == [0, 1, 2]
    alone = logitlab(*common, "--seed", "6", "--json")  # sample 2 is the run of seed 4 + 2 alone (the core's
    want = [json.loads(x)["token_id"] for x in alone.stdout.splitlines()[:-1]]  # tests hold every sample to it)
    assert [x["token_id"] for x in lines if x.get("sequence") == 2 and "token_id" in x] == want
    for i in range(3):
        got = [x["token_id"] for x in lines if x.get("sequence") == i and "token_id" in x]
        assert RunTrace.load(tmp_path / f"run.{i}.jsonl").token_ids == got
    text = logitlab(*common, "--seed", "4", "--n", "2")
    assert text.returncode == 0 and "--- sample 1 of 2 (seed 4) ---" in text.stdout
    assert "--- sample 2 of 2 (seed 5) ---" in text.stdout


def test_bad_bytes_and_full_outputs_get_one_line(tiny_path: Path, tmp_path: Path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("café".encode("latin-1"))
    base = ["generate", "--model", str(tiny_path), "--max-tokens", "3"]
    for args in ([*base, "--prompt-file", str(bad)], base):  # a file, then standard input
        r = subprocess.run([sys.executable, "-m", "app", *args], input=bad.read_bytes(), capture_output=True,
                           timeout=180, env=ENV)
        err = r.stderr.decode()
        assert r.returncode == 2 and "is not UTF-8 text" in err and "Traceback" not in err
    prompt = tmp_path / "p.txt"
    prompt.write_text("Hello")
    r = logitlab(*base, "--prompt-file", str(prompt), "--trace", str(prompt))
    assert r.returncode == 2 and "names the prompt file" in r.stderr and prompt.read_text() == "Hello"
    r = logitlab(*base, "--prompt", "x", "--top-n", "300")
    assert r.returncode == 2 and "top-n must be from 1 to 256" in r.stderr
    if Path("/dev/full").exists():
        with open("/dev/full", "w") as full:
            r = subprocess.run([sys.executable, "-m", "app", *base, "--prompt", "Hello", "--json"], stdout=full,
                               stderr=subprocess.PIPE, text=True, timeout=180, env=ENV)
        assert r.returncode == 1 and "cannot write to standard output" in r.stderr and "Traceback" not in r.stderr


def test_a_hub_id_offline_names_the_model_and_what_to_do(tmp_path: Path):
    env = {**ENV, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    r = logitlab("generate", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--prompt", "x", env=env)
    assert r.returncode == 1
    assert "Qwen/Qwen2.5-0.5B-Instruct is not in the local Hugging Face cache" in r.stderr
    env["HF_HUB_OFFLINE"] = "0"  # these machines have no network: the real download fails, clearly
    r = logitlab("generate", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--prompt", "x", env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "cannot download Qwen/Qwen2.5-0.5B-Instruct" in r.stderr


def test_screenshot_mode_runs_once_and_saves_the_window(tiny_path: Path, tmp_path: Path):
    out = tmp_path / "shot.png"
    env = {k: v for k, v in ENV.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    r = logitlab("--model", str(tiny_path), "--backend", "torch", "--screenshot", str(out), "--max-tokens", "12",
                 "--prompt", "Hello", "--seed", "2", env=env)
    assert r.returncode == 0, r.stderr
    from PySide6.QtGui import QImage

    img = QImage(str(out))
    assert img.width() >= 1000 and img.height() >= 600
    colors = {img.pixel(x, y) for x in range(0, img.width(), 37) for y in range(0, img.height(), 37)}
    assert len(colors) > 20  # a real picture, not a blank window


def test_the_window_without_a_display_says_so(tmp_path: Path):
    env = {k: v for k, v in ENV.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    r = logitlab("--model", "/nowhere", env=env)
    assert r.returncode == 1 and "no display" in r.stderr


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_bench_reports_ratios_against_the_baseline_of_the_same_run(tiny_path: Path, backend: str):
    r = logitlab("bench", "--model", str(tiny_path), "--backend", backend, "--prompt-tokens", "8", "--tokens", "6",
                 "--repeat", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["baseline"] == {"torch": "transformers model.generate", "mlx": "mlx_lm.stream_generate"}[backend]
    for med in out["settings"].values():
        base = med["baseline"]
        assert base["tokens"] == 6 and base["decode_tokens_per_s"] > 0
        for mode in ("trace", "no-trace"):
            assert med[mode]["tokens"] == 6
            assert med[mode]["ratio_decode_vs_baseline"] == pytest.approx(
                med[mode]["decode_tokens_per_s"] / base["decode_tokens_per_s"])
    assert out["trace_bytes_per_token"] > 0 and out["bytes_read_per_token"] > 0 and out["floor_s_per_token"] > 0



def test_compile_asks_the_loader_for_a_static_cache():
    """`--compile` reaches the loader; the compiled path itself is tested on a real model in tests/backends
    (a compile through the CLI's 1,024-position cache costs ~50 s here)."""
    from app.cli import COMPILE_LEN, generate_parser, spec_from

    on = spec_from(generate_parser().parse_args(["--compile"]))
    off = spec_from(generate_parser().parse_args([]))
    assert on.options.compile_len == COMPILE_LEN and off.options.compile_len is None


def test_a_saved_run_opens_in_the_window_with_no_model(tiny_path: Path, tmp_path: Path):
    trace, shot = tmp_path / "run.jsonl", tmp_path / "shot.png"
    r = logitlab("generate", "--model", str(tiny_path), "--prompt", "Hello", "--max-tokens", "8", "--seed", "3",
                 "--trace", str(trace))
    assert r.returncode == 0, r.stderr
    env = {k: v for k, v in ENV.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    r = logitlab("--open", str(trace), "--model", "/no/model/here", "--screenshot", str(shot), env=env)
    assert r.returncode == 0, r.stderr  # the model named is never loaded: a saved run needs none
    assert shot.exists() and "error" not in r.stderr
    trace.write_text('{"format": "logitlab-trace", "version": 999}\n')
    r = logitlab("--open", str(trace), "--screenshot", str(shot), env=env)
    assert r.returncode == 2 and "cannot open" in r.stderr and "Traceback" not in r.stderr


def test_models_lists_the_builtin_model_first_as_the_picker_does(tmp_path: Path):
    env = {**ENV, "XDG_CONFIG_HOME": str(tmp_path / "config")}  # not the user's model folders (preferences)
    r = logitlab("models", "--cache-dir", str(tmp_path / "empty-cache"), env=env)
    assert r.returncode == 0, r.stderr
    header, builtin, *rest = r.stdout.splitlines()
    assert header.split() == ["model", "size", "type", "backends", "quantization"]
    assert builtin.split()[:2] == ["builtin", "11"] and builtin.split()[3:5] == ["llama", "mlx,torch"]
    assert "No models in the Hugging Face cache yet" in rest[-1]
    listed = json.loads(logitlab("models", "--cache-dir", str(tmp_path / "empty-cache"), "--json", env=env).stdout)
    assert [e["source"] for e in listed] == ["builtin"] and listed[0]["size_bytes"] > 5_000_000


def test_help_names_every_command_and_explains_every_flag():
    from app.bench import parser as bench_parser
    from app.cli import generate_parser, window_parser

    usage = logitlab("--help").stdout.split("\n\n")[0]
    for command in ("generate", "bench", "models"):
        assert f"logitlab {command} [options]" in usage
    for p in (window_parser(), generate_parser(), bench_parser()):
        assert [a.option_strings for a in p._actions if not a.help] == [], p.prog


def test_generate_ends_its_output_with_a_newline(tiny_path: Path):
    one = logitlab("generate", "--model", str(tiny_path), "--prompt", "Hello", "--max-tokens", "5", "--seed", "2")
    two = logitlab("generate", "--model", str(tiny_path), "--prompt", "Hello", "--max-tokens", "5", "--seed", "2",
                   "--n", "2")
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr
    assert one.stdout.endswith("\n") and two.stdout.endswith("\n")


@pytest.mark.slow  # a torch.compile of the decode step: ~50 s
def test_compile_keeps_standard_error_for_the_user(tiny_path: Path, tmp_path: Path):
    cold = {**ENV, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}  # a cold cache: autotuning runs
    r = logitlab("generate", "--model", str(tiny_path), "--backend", "torch", "--compile", "--prompt", "Hello",
                 "--max-tokens", "4", "--seed", "1", env=cold)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[-1].startswith("[length]") or lines[-1].startswith("[eos]")
    assert [x for x in lines if x.startswith(("Finding", "Loading", "loaded", "seed", "["))] == lines, r.stderr
