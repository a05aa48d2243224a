"""Issue 31: the command line tried as a careless or hostile user would. Input nested too deeply, too large or not
UTF-8, numbers no setting can take, empty names, and outputs that cannot be written (a full disk, a folder) each end
in one line on stderr and a non-zero exit: never a traceback, never a megabyte echoed back, never a silent run."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.settings import FIELDS
from tests.e2e.test_cli import ENV, logitlab, run_main
from tests.remote_fake import fake_server, stream_tokens

FULL = Path("/dev/full")
HAS_FULL = FULL.exists() and stat.S_ISCHR(os.stat(FULL).st_mode)  # the device, not a file of that name
DEEP = "[" * 100_000
HUGE = "9" * 5_000  # more digits than Python reads as an int


def refused(code: int, err: list[str], says: str = "") -> str:
    """The one error line of a refusal (exit 2), short, with no traceback."""
    assert code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert says in err[0] and len(err[0]) < 600, err[0][:700]
    return err[0]


# 1. depth and size --------------------------------------------------------------------------------------------
def test_dry_breakers_nested_too_deeply_is_one_short_line(capsys):
    code, _, err = run_main(capsys, "generate", "--prompt", "x", "--dry-breakers", DEEP)
    refused(code, err, "expected a JSON list of non-empty strings")


@pytest.mark.parametrize(("argv", "says"), [
    (["generate", "--logit-bias", "x" * 100_000], "expected TOKEN=VALUE"),
    (["generate", "--logit-bias", f"{HUGE}=1"], "is past any vocabulary"),
    (["generate", "--order", "y" * 100_000], "unknown stage"),
    (["generate", "--match", "(" * 100_000, "--stats"], "a regular expression too deeply nested"),
    (["generate", "--max-tokens", HUGE], "invalid int value"),
    (["generate", "--backend", "z" * 100_000], "invalid choice"),
    (["generate", "--seed", "w" * 100_000], "not a whole number"),
    (["sweep", "--grid", "temperature=" + ",".join(f"{i / 1000}" for i in range(1000))], "different values"),
    (["sweep", "--grid", "temperature=" + "a," * 50_000], "must be numbers"),
    (["sweep", "--grid", "q" * 100_000], "a grid axis is NAME=V1,V2"),
])
def test_a_refusal_never_echoes_a_thousand_values_back(capsys, argv: list[str], says: str):
    code, out, err = run_main(capsys, *argv, *([] if argv[0] == "sweep" else ["--prompt", "x"]))
    refused(code, err, says)
    assert out == ""


def test_a_prompt_far_past_the_context_is_refused_before_it_is_tokenized(tiny_path: Path, tmp_path: Path):
    big = tmp_path / "big.txt"
    big.write_text("a" * (10 << 20))  # one 10 MB "word": a tokenizer's worst case
    r = logitlab("generate", "--model", str(tiny_path), "--prompt-file", str(big), "--max-tokens", "2")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "the prompt is 10,485,760 characters: far more than this model's context" in r.stderr
    assert "Token indices sequence length" not in r.stderr  # (the tokenizer never saw it)


def test_a_prompt_set_with_a_bom_and_a_10_mb_field_runs_its_prompts_not_its_header(tiny_path: Path, tmp_path: Path):
    bom = tmp_path / "set.csv"
    bom.write_text("prompt,id\nHello,1\n", encoding="utf-8-sig")  # as Excel's "CSV UTF-8" saves it
    r = logitlab("sweep", "--model", str(tiny_path), "--prompt-set", str(bom), "--grid", "temperature=0",
                 "--max-tokens", "2", "--n", "1")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 1  # one prompt, one cell: the header is no prompt
    big = tmp_path / "big.csv"
    big.write_text('prompt\n"' + "a" * (10 << 20) + '"\n')
    r = logitlab("sweep", "--model", str(tiny_path), "--prompt-set", str(big), "--grid", "temperature=0",
                 "--max-tokens", "2")
    assert r.returncode == 1 and "Traceback" not in r.stderr and "field larger than field limit" not in r.stderr
    assert "the prompt is 10,485,760 characters" in r.stderr
    deep = tmp_path / "deep.jsonl"
    deep.write_text(DEEP + "\n")
    r = logitlab("sweep", "--prompt-set", str(deep), "--grid", "temperature=0")
    assert r.returncode == 2 and "deep.jsonl, line 1: not JSON (nested too deeply to be read)" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_a_prompt_file_that_never_ends_is_refused_without_filling_memory(capsys):
    code, _, err = run_main(capsys, "generate", "--prompt-file", "/dev/zero")
    refused(code, err, "/dev/zero holds more than 64 MiB")


def test_a_prompt_files_byte_order_mark_is_no_part_of_the_prompt():
    from app.cli.arguments import utf8

    assert utf8("\ufeffimport os".encode(), "p.txt") == "import os" == utf8(b"import os", "p.txt")


def test_command_line_bytes_that_are_not_utf8_are_refused_in_one_line(tmp_path: Path):
    trace = tmp_path / "t.jsonl"
    for args in (["--prompt", b"ab\xff"], ["--prompt", "x", "--chat", "--system", b"\xfe"]):
        r = subprocess.run([sys.executable, "-m", "app", "generate", *args, "--trace", str(trace)],
                           capture_output=True, timeout=180, env=ENV)
        err = r.stderr.decode()
        assert r.returncode == 2 and "not UTF-8 text" in err and "Traceback" not in err, err


# 2. numbers ---------------------------------------------------------------------------------------------------
NUMERIC = [*("--" + f.name.replace("_", "-") for f in FIELDS), "--length-penalty", "--seed", "--n", "--top-n",
           "--concurrency", "--threads", "--num-draft", "--beams", "--no-repeat-ngram"]


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e308", "-1e308", HUGE])
@pytest.mark.parametrize("flag", NUMERIC)
def test_every_numeric_flag_refuses_what_no_setting_can_be(capsys, flag: str, value: str):
    beams = ["--beams", "2"] if flag in ("--length-penalty", "--no-repeat-ngram") else []  # (where it is read)
    code, out, err = run_main(capsys, "generate", "--prompt", "x", "--max-tokens", "1", *beams, f"{flag}={value}")
    refused(code, err)
    assert out == ""


def test_length_penalty_past_its_range_is_one_line_not_an_overflow(capsys):
    code, _, err = run_main(capsys, "generate", "--prompt", "x", "--beams", "2", "--length-penalty", "1e308")
    refused(code, err, "length penalty must be a number from -5 to 5, got 1e+308")


@pytest.mark.parametrize("how", [[], ["--stats"], ["--draft-model", "builtin-draft"]])
def test_a_logit_bias_id_past_the_vocabulary_is_refused_on_every_path(how: list[str]):
    r = logitlab("generate", "--backend", "torch", "--prompt", "x", "--max-tokens", "2", "--logit-bias",
                 "999999=5", *how)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "logit bias: token id 999999 is past this vocabulary (4096 tokens" in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("argv", [
    ["generate", "--prompt", "x", "--draft-model="], ["generate", "--prompt", "x", "--model="],
    ["generate", "--prompt", "x", "--trace="], ["generate", "--prompt-file="],
    ["generate", "--prompt", "x", "--base-url="],
    ["generate", "--prompt", "x", "--api-key-env="], ["sweep", "--prompt-set=", "--grid", "temperature=1"],
    ["diff", "--prompt", "x", "--model-b="], ["bench", "--model="], ["models", "--folder="],
    ["models", "--cache-dir="], ["--open="],
])
def test_an_empty_model_or_file_name_is_refused_not_read_as_the_default(capsys, argv: list[str]):
    code, out, err = run_main(capsys, *argv)
    refused(code, err, "empty: give a value, or leave the flag out")
    assert out == ""


# 3. outputs ---------------------------------------------------------------------------------------------------
def to_full(*args: str) -> subprocess.CompletedProcess:
    """`logitlab ARGS > /dev/full`."""
    with open(FULL, "w") as full:
        return subprocess.run([sys.executable, "-m", "app", *args], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=300, env=ENV)


def says_it_cannot_write(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 1 and "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    assert r.stderr.splitlines()[-1].endswith("error: cannot write to standard output: No space left on device")


GEN = ["generate", "--backend", "torch", "--prompt", "import os\n", "--max-tokens", "3"]


@pytest.mark.skipif(not HAS_FULL, reason="no /dev/full here")
@pytest.mark.parametrize("argv", [
    [*GEN, "--beams", "2"], [*GEN, "--beams", "2", "--json"], [*GEN, "--draft-model", "builtin-draft"],
    [*GEN, "--draft-model", "builtin-draft", "--json"], [*GEN, "--stats", "--n", "2"], [*GEN, "--json"],
    ["diff", "--backend", "torch", "--prompt", "import os\nimport sys\n"],
    ["sweep", "--backend", "torch", "--prompt", "x", "--max-tokens", "2", "--n", "1", "--grid", "temperature=0,1"],
    ["sweep", "--backend", "torch", "--prompt", "x", "--max-tokens", "2", "--n", "1", "--grid", "temperature=0",
     "--format", "csv"],
    ["models"], ["models", "--json"], ["generate", "--help"],
])
def test_every_command_says_when_standard_output_is_full(argv: list[str]):
    says_it_cannot_write(to_full(*argv))


@pytest.mark.skipif(not HAS_FULL, reason="no /dev/full here")
def test_a_bench_and_a_servers_models_say_when_standard_output_is_full(tiny_path: Path):
    says_it_cannot_write(to_full("bench", "--model", str(tiny_path), "--backend", "torch", "--prompt-tokens", "4",
                                 "--tokens", "2", "--repeat", "1", "--quick"))
    with fake_server(stream_tokens(2)) as srv:
        says_it_cannot_write(to_full("models", "--base-url", srv.url))
        says_it_cannot_write(to_full("bench", "--base-url", srv.url, "--tokens", "2", "--repeat", "1"))


def test_a_trace_to_a_folder_or_a_full_device_is_one_line_on_every_path(tmp_path: Path):
    for how in ([], ["--draft-model", "builtin-draft"], ["--stats"]):
        r = logitlab(*GEN, *how, "--trace", str(tmp_path))
        assert r.returncode == 2 and "--trace names a folder" in r.stderr and "Traceback" not in r.stderr
        if HAS_FULL:
            r = logitlab(*GEN, *how, "--trace", str(FULL))
            assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
            assert "cannot write the trace: No space left on device: /dev/full" in r.stderr


# 4. the compile cache -----------------------------------------------------------------------------------------
@pytest.mark.needs("torch")
def test_a_file_where_the_compile_cache_goes_is_a_warning_not_an_error(tmp_path: Path, monkeypatch, caplog):
    from backends.torch import static as torch_static

    (tmp_path / "logitlab").mkdir()
    file = tmp_path / "logitlab" / "torchinductor"
    file.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(torch_static, "USER_CACHE_DIR", None)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # (restored after the test)
    torch_static.configure_inductor(freeze=True)
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") != str(file)  # torch's own temporary folder instead
    assert "cannot keep compiled steps in" in caplog.text and "File exists" in caplog.text
