"""The `logitlab` command as a user runs it: a real subprocess, real tiny models, real exit codes."""

from __future__ import annotations

import json
import math
import os
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from app.core.record.trace import RunTrace
from app.core.settings import FIELDS
from backends import installed

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
    (["--temperature", "9"], "argument --temperature: must be a number from 0 to 2"),
    (["--top-p", "-1"], "argument --top-p: must be"),
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
    assert r.returncode == 2 and "--top-n: must be from 1 to 256, got 300" in r.stderr
    if Path("/dev/full").exists() and stat.S_ISCHR(os.stat("/dev/full").st_mode):  # the device, not a file
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
    from app.cli.flags import COMPILE_LEN, spec_from
    from app.cli.generate import parser as generate_parser

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


def test_the_windows_own_session_file_opens_and_a_damaged_one_is_one_line(tmp_path: Path):
    from app.core.session.session_file import SavedRun, SavedSession, save
    from tests.core.record.test_trace import make_run

    session, shot = tmp_path / "mine.jsonl", tmp_path / "shot.png"
    save(SavedSession(prompt="def f():", runs=(SavedRun("first", make_run(steps=3)),), shown=4), session)
    env = {k: v for k, v in ENV.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    r = logitlab("--open", str(session), "--screenshot", str(shot), env=env)
    assert r.returncode == 0 and shot.exists() and "error" not in r.stderr, r.stderr
    session.write_text(session.read_text().replace('"prompt": "def f():"', '"prompt": 7'))
    r = logitlab("--open", str(session), "--screenshot", str(shot), env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == f"logitlab: error: cannot open {session}: {session}:1: damaged session header " \
                               "(prompt must be text, got 7)"


def test_models_lists_the_builtin_model_first_as_the_picker_does(tmp_path: Path):
    env = {**ENV, "XDG_CONFIG_HOME": str(tmp_path / "config")}  # not the user's model folders (preferences)
    r = logitlab("models", "--cache-dir", str(tmp_path / "empty-cache"), env=env)
    assert r.returncode == 0, r.stderr
    header, builtin, *rest = r.stdout.splitlines()
    assert header.split() == ["model", "size", "type", "backends", "quantization"]
    assert builtin.split()[:2] == ["builtin", "11"] and builtin.split()[3:5] == ["llama", "mlx,torch"]
    assert "No models in the Hugging Face cache yet" in rest[-1]
    listed = json.loads(logitlab("models", "--cache-dir", str(tmp_path / "empty-cache"), "--json", env=env).stdout)
    assert [e["source"] for e in listed] == ["builtin", "builtin-draft", "builtin-thinking"]
    assert listed[0]["size_bytes"] > 5_000_000


def test_help_names_every_command_and_explains_every_flag():
    from app.cli.bench.command import parser as bench_parser
    from app.cli.generate import parser as generate_parser
    from app.cli.models import parser as models_parser
    from app.cli.window import parser as window_parser

    usage = logitlab("--help").stdout.split("\n\n")[0]
    for command in ("generate", "bench", "models"):
        assert f"logitlab {command} [options]" in usage
    for p in (window_parser(), generate_parser(), bench_parser(), models_parser()):
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
    known = ("Finding", "Loading", "loaded", "seed", "Compil", "[")
    assert [x for x in lines if x.startswith(known)] == lines, r.stderr
    said = [x for x in lines if x.startswith("Compil")]  # what the wait is, then how long it took (the window's words)
    assert said[0] == "Compiling the decode step (first run only)…"
    assert len(said) == 2 and said[1].startswith("Compiled the decode step in ") and said[1].endswith(" s")


# Issue 20: one range per flag, one line per error, what was not measured, sample order ------------------------
def run_main(capsys, *argv: str) -> tuple[int, str, list[str]]:
    """`logitlab ARGV` in this process: its exit code, standard output and standard error's lines."""
    from app.cli.main import main

    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse: --help, or a flag it refused
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def one_error_line(err: list[str]) -> str:
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize("field", [f.name for f in FIELDS])
def test_a_sampler_flag_has_one_range_in_its_help_its_error_and_the_window(capsys, field: str):
    from app.cli.generate import parser as generate_parser
    from app.core.settings import FIELD_BY_NAME

    f = FIELD_BY_NAME[field]
    flag = "--" + f.name.replace("_", "-")
    helped = next(a.help for a in generate_parser()._actions if flag in a.option_strings)
    assert f"[{f.span}, default {f.default:g}]" in helped
    over = [] if math.isinf(f.hi) else [str(int(f.hi) + 1) if f.integer else str(f.hi + 0.5)]
    bad = [*over, str(int(f.lo) - 1)] + ([] if f.integer else ["nan", "inf"])
    for value in bad:
        code, _, err = run_main(capsys, "generate", "--prompt", "x", flag, value)
        assert code == 2 and f"argument {flag}: must be" in one_error_line(err) and f.span in err[0], (value, err)


@pytest.mark.parametrize(("argv", "says"), [
    (["generate", "--concurrency", "0"], "--concurrency: must be from 1 to 64, got 0"),
    (["generate", "--concurrency", "1000"], "--concurrency: must be from 1 to 64, got 1000"),
    (["generate", "--n", "0"], "--n: must be from 1 to 64, got 0"),
    (["generate", "--n", "-3"], "--n: must be from 1 to 64, got -3"),
    (["generate", "--top-n", "0"], "--top-n: must be from 1 to 256, got 0"),
    (["generate", "--seed", "-1"], "--seed: must be from 0 to 4294967295, got -1"),
    (["generate", "--seed", str(2**64)], f"--seed: must be from 0 to 4294967295, got {2**64}"),
    (["generate", "--seed", "nan"], "--seed: not a whole number: 'nan'"),
    (["generate", "--threads", "0"], "threads must be from 1 to"),
    (["generate", "--max-tokens", "1e9"], "invalid int value: '1e9'"),
    (["--concurrency", "0"], "--concurrency: must be from 1 to 64, got 0"),  # the window's flags, before it opens
    (["bench", "--tokens", "0"], "--tokens: must be from 2 to 100000, got 0"),
    (["bench", "--tokens", "1"], "--tokens: must be from 2 to 100000, got 1"),
    (["bench", "--tokens", str(10**12)], "--tokens: must be from 2 to 100000"),
    (["bench", "--repeat", "-1"], "--repeat: must be 1 or more, got -1"),
    (["bench", "--repeat", "0"], "--repeat: must be 1 or more, got 0"),
    (["bench", "--prompt-tokens", "0"], "--prompt-tokens: must be 1 or more, got 0"),
    (["bench", "--threads", "-2"], "threads must be from 1 to"),
    (["models", "--api-key-env", "KEY"], "--api-key-env is for a server: give its --base-url too"),
    (["models", "--base-url", "http://127.0.0.1:1/v1", "--folder", "."], "--cache-dir and --folder list local"),
])
def test_every_numeric_flag_is_checked_with_one_line_and_exit_2(capsys, argv: list[str], says: str):
    code, out, err = run_main(capsys, *argv, *(["--prompt", "x"] if argv[0] == "generate" else []))
    assert code == 2 and says in one_error_line(err) and out == ""


@pytest.mark.parametrize("url", ["http://[::1/v1", "http://127.0.0.1:99999/v1", "ftp://user:hunter2@host/v1"])
@pytest.mark.parametrize("command", [["generate", "--prompt", "x"], ["models"], ["bench"], []])
def test_a_base_url_no_server_can_have_is_one_line_without_its_password(capsys, command: list[str], url: str):
    code, _, err = run_main(capsys, *command, "--base-url", url)
    line = one_error_line(err)
    assert code == 2 and "base URL" in line and "hunter2" not in line


def test_bench_past_the_models_context_is_one_line(capsys):
    code, _, err = run_main(capsys, "bench", "--prompt-tokens", "1000", "--tokens", "100")  # auto: the installed one
    errors = [x for x in err if not x.startswith(("Finding ", "Loading "))]  # (what it loaded, as it loads)
    assert code == 2 and "do not fit the model's context of 1,024 tokens" in one_error_line(errors)


def test_stop_reads_backslash_escapes_as_the_window_does(capsys):
    from app.cli.flags import settings_from
    from app.cli.generate import parser as generate_parser
    from app.core.settings import write_escapes

    args = generate_parser().parse_args(["--stop", r"\n", "--stop", r"a\tb", "--stop", r"\\n"])
    assert settings_from(args).stop == ("\n", "a\tb", "\\n")
    assert [write_escapes(s) for s in settings_from(args).stop] == [r"\n", r"a\tb", r"\\n"]  # the window's box
    assert r"\n is a newline" in next(a.help for a in generate_parser()._actions if "--stop" in a.option_strings)
    code, out, _ = run_main(capsys, "generate", "--prompt", "import os\nimport sys\n", "--temperature", "0",
                            "--max-tokens", "30", "--stop", r"\n", "--json")
    summary = json.loads(out.splitlines()[-1])
    assert code == 0 and summary["finish_reason"] == "stop" and summary["text"] == "import sys"  # greedy's line


def test_models_help_lists_the_local_and_the_server_flags(capsys):
    code, out, _ = run_main(capsys, "models", "--help")
    assert code == 0 and all(flag in out for flag in ("--base-url", "--api-key-env", "--cache-dir", "--folder"))


def test_compile_says_what_it_costs():
    from app.cli.bench.command import parser as bench_parser
    from app.cli.generate import parser as generate_parser

    for p in (generate_parser(), bench_parser()):
        helped = next(a.help for a in p._actions if "--compile" in a.option_strings)
        assert "a minute or more on a CPU the first time" in helped, p.prog


def test_json_never_holds_nan_or_infinity():
    from app.cli.arguments import to_json

    text = to_json({"a": float("nan"), "b": [1.5, float("-inf"), {"c": float("inf")}], "d": (2, "x")})
    assert json.loads(text) == {"a": None, "b": [1.5, None, {"c": None}], "d": [2, "x"]}


def make_gpt2(path: Path) -> Path:
    """A tiny random GPT-2 (numpy's seeded draws: no framework needed) with the tests' tokenizer: a model the MLX
    loader does not read."""
    import numpy as np
    from safetensors.numpy import save_file
    from transformers import GPT2Config

    from tests.tiny import make_tokenizer

    tok = make_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=128,
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                        architectures=["GPT2LMHeadModel"])
    e, h = config.n_embd, "transformer.h.0."
    shapes = {"transformer.wte.weight": (len(tok), e), "transformer.wpe.weight": (config.n_positions, e),
              h + "attn.c_attn.weight": (e, 3 * e), h + "attn.c_attn.bias": (3 * e,),
              h + "attn.c_proj.weight": (e, e), h + "attn.c_proj.bias": (e,),
              h + "mlp.c_fc.weight": (e, 4 * e), h + "mlp.c_fc.bias": (4 * e,),
              h + "mlp.c_proj.weight": (4 * e, e), h + "mlp.c_proj.bias": (e,)}
    for norm in (h + "ln_1", h + "ln_2", "transformer.ln_f"):
        shapes |= {norm + ".weight": (e,), norm + ".bias": (e,)}
    rng = np.random.default_rng(0)
    weights = {name: (rng.normal(0, 0.02, shape) if len(shape) == 2 else
                      np.ones(shape) if "ln_" in name and name.endswith("weight") else np.zeros(shape))
               .astype(np.float32) for name, shape in shapes.items()}
    path.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_an_unexpected_load_error_is_one_line_and_its_traceback_is_there_on_request(capsys, tmp_path, monkeypatch):
    if not installed("mlx"):
        pytest.skip("mlx is not installed")
    gpt2 = str(make_gpt2(tmp_path / "gpt2"))
    capsys.readouterr()
    monkeypatch.delenv("LOGITLAB_DEBUG", raising=False)
    code, _, err = run_main(capsys, "generate", "--backend", "mlx", "--model", gpt2, "--prompt", "x")
    errors = [x for x in err if x.startswith("logitlab") or "Traceback" in x]
    assert code == 1 and len(errors) == 1 and not any(x.startswith(" ") for x in err), err
    assert errors[0].startswith(f"logitlab generate: error: loading {gpt2} with mlx failed: ")
    assert errors[0].endswith("(LOGITLAB_DEBUG=1 prints the traceback)")
    code, _, err = run_main(capsys, "bench", "--backend", "mlx", "--model", gpt2)
    assert code == 1 and one_error_line([x for x in err if x.startswith("logitlab")]).startswith(
        f"logitlab bench: error: loading {gpt2} failed: ")
    monkeypatch.setenv("LOGITLAB_DEBUG", "1")
    code, _, err = run_main(capsys, "generate", "--backend", "mlx", "--model", gpt2, "--prompt", "x")
    assert code == 1 and "Traceback (most recent call last):" in err


def test_bench_prompts_without_transformers_warning_of_the_context(capfd):
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from app.cli.bench.command import make_prompt
    from app.core.models.sources import BUILTIN_PATH

    tok = AutoTokenizer.from_pretrained(str(BUILTIN_PATH))  # its context: 1,024 tokens; the prompt's text: ~20k
    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()  # as a user's terminal has it (the tests run with errors only)
    try:
        ids = make_prompt(tok, 2000)
    finally:
        hf_logging.set_verbosity(before)
    assert len(ids) == 2000 and "Token indices sequence length" not in capfd.readouterr().err


def test_bench_saves_a_random_model_without_a_progress_bar(capfd, monkeypatch):
    import shutil
    import warnings

    from transformers.utils import logging as hf_logging

    from app.cli.bench import command as bench
    from app.core.models.sources import BUILTIN_PATH

    monkeypatch.setitem(bench.RANDOM_CONFIGS, "tiny", {"hidden_size": 32, "intermediate_size": 64,
                                                       "num_hidden_layers": 1, "num_attention_heads": 2,
                                                       "num_key_value_heads": 1})
    on = hf_logging.is_progress_bar_enabled()
    with warnings.catch_warnings():  # (huggingface_hub's own bars stay off: HF_HUB_DISABLE_PROGRESS_BARS, conftest)
        warnings.simplefilter("ignore")
        hf_logging.enable_progress_bar()  # as a user's process has it (a torch load turns it off for the process)
    try:
        path = bench.random_model("tiny", BUILTIN_PATH, "float32")
    finally:
        if not on:
            hf_logging.disable_progress_bar()
    try:
        assert (path / "config.json").exists() and "Writing model shards" not in capfd.readouterr().err
    finally:
        shutil.rmtree(path)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_benchs_random_model_loads_on_whichever_backend_is_installed(dtype, monkeypatch, tmp_path):
    """Made without a framework (numpy, one tensor at a time): an mlx-only install benches it too."""
    from app.cli.bench import command as bench
    from app.core.models.sources import BUILTIN_PATH
    from backends import get_backend
    from backends.base import LoadOptions
    from tests.tiny import LOCAL_BACKENDS

    shape = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2}
    path = bench.save_random_llama(tmp_path / "m", shape, BUILTIN_PATH, dtype)
    model = get_backend(LOCAL_BACKENDS[0]).load(path, LoadOptions())
    per_layer = 32 * 32 * 2 + 32 * 16 * 2 + 32 * 64 * 3 + 32 * 2
    assert model.info.parameters == 32_000 * 32 * 2 + 32 + 2 * per_layer
    data = (path / "model.safetensors").read_bytes()
    header = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {{"float32": "F32"}.get(dtype, "BF16")}


# a server's run ------------------------------------------------------------------------------------------------
def test_a_server_run_shows_what_it_did_not_measure_as_not_measured(capsys):
    from tests.remote_fake import fake_server, stream_tokens

    with fake_server(stream_tokens(4)) as srv:
        code, out, err = run_main(capsys, "generate", "--base-url", srv.url, "--prompt", "x", "--max-tokens", "4")
        assert code == 0 and out == "w0w1w2w3\n"
        loaded = next(x for x in err if x.startswith("loaded "))
        assert "parameters" not in loaded and loaded.startswith("loaded fake-model: remote on ")
        last = err[-1]
        assert "KV n/a" in last and "prompt n/a tok" in last and "0 KiB" not in last and "0.0 tok/s" not in last
        code, out, _ = run_main(capsys, "generate", "--base-url", srv.url, "--prompt", "x", "--max-tokens", "4",
                                "--json")
        summary = json.loads(out.splitlines()[-1])
        assert code == 0 and summary["kv_cache_bytes"] is None and summary["prompt_tokens"] is None
        assert summary["prefill_tokens_per_s"] is None and summary["generated_tokens"] == 4


def test_server_samples_print_in_sample_order_whichever_ends_first(capsys):
    import time

    from tests.remote_fake import fake_server, stream_tokens

    def first_is_slow(h, body):  # sample 0 (seed 10) ends last
        if body["seed"] == 10:
            time.sleep(0.6)
        stream_tokens(3)(h, body)

    with fake_server(first_is_slow) as srv:
        common = ["generate", "--base-url", srv.url, "--prompt", "x", "--max-tokens", "3", "--seed", "10", "--n", "3"]
        code, out, err = run_main(capsys, *common, "--json")
        order = [json.loads(x)["sequence"] for x in out.splitlines()]
        assert code == 0 and order == sorted(order) and order[0] == 0 and order[-1] == 2
        assert [x.split(":")[0] for x in err if x.startswith("sample ")] == ["sample 1", "sample 2", "sample 3"]
        code, out, _ = run_main(capsys, *common)
        heads = [x for x in out.splitlines() if x.startswith("---")]
        assert code == 0 and heads == [f"--- sample {i} of 3 (seed {9 + i}) ---" for i in (1, 2, 3)]


def test_a_password_in_the_base_url_is_never_printed(capsys, tmp_path):
    from tests.remote_fake import fake_server, stream_tokens

    with fake_server(stream_tokens(2)) as srv:
        url = srv.url.replace("http://", "http://someone:hunter2@")
        outputs = [run_main(capsys, "generate", "--base-url", url, "--prompt", "x", "--max-tokens", "2"),
                   run_main(capsys, "models", "--base-url", url),
                   run_main(capsys, "bench", "--backend", "remote", "--base-url", url, "--tokens", "2",
                            "--prompt-tokens", "4", "--repeat", "1", "--json")]
    assert [code for code, _, _ in outputs] == [0, 0, 0]
    assert json.loads(outputs[2][1])["server"] == srv.url
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        down = f"http://someone:hunter2@127.0.0.1:{free.getsockname()[1]}/v1"  # nothing listens there
    outputs += [run_main(capsys, "generate", "--base-url", down, "--prompt", "x"), run_main(capsys, "models",
                "--base-url", down), run_main(capsys, "bench", "--base-url", down)]
    assert [code for code, _, _ in outputs[3:]] == [1, 1, 1]
    printed = "".join(out + "\n".join(err) for _, out, err in outputs)
    assert "hunter2" not in printed and "127.0.0.1" in printed


def test_a_server_reporting_infinite_logprobs_still_gives_valid_json(capsys):
    from tests.remote_fake import chunk, fake_server

    def behave(h, body):  # vLLM writes a log-probability of -inf as -Infinity (Python's json reads it)
        h.start_stream()
        entry = {"token": "a", "logprob": "@", "bytes": [97],
                 "top_logprobs": [{"token": "a", "logprob": "@", "bytes": [97]},
                                  {"token": "b", "logprob": "@", "bytes": [98]}]}
        h.event(json.dumps(chunk("a", [entry])).replace('"@"', "-Infinity"))
        h.event(chunk("", None, "length"))
        h.end_stream()

    with fake_server(behave) as srv:
        code, out, err = run_main(capsys, "generate", "--base-url", srv.url, "--prompt", "x", "--max-tokens", "1",
                                  "--json")
    assert code == 0, err
    for line in out.splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in --json output: not JSON"))
