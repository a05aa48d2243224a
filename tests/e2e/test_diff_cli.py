"""`logitlab diff` as a user runs it: a real subprocess on the built-in model, float32 against bfloat16; its JSON
Lines are the core's record of the same diff, line by line, and bad input is one line on stderr."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from app.core.decoding.quant_diff import DiffRequest, run_diff
from app.core.models.sources import BUILTIN_PATH, ModelSpec
from backends import get_backend
from backends.base import LoadOptions
from tests.e2e.test_cli import logitlab

pytestmark = pytest.mark.needs("torch")  # these runs ask for the torch backend by name

TEXT = "def main(argv):\n    return 0\n"
ROW_KEYS = ["position", "token_id", "text", "kl", "logprob_a", "logprob_b", "top_a", "top_b", "top_a_text",
            "top_b_text", "agree"]
SUMMARY_KEYS = ["summary", "a", "b", "tokens", "mean_kl", "max_kl", "agreement", "perplexity_a", "perplexity_b",
                "b_beside_a"]


def test_float32_against_bfloat16_writes_a_line_per_token_and_a_summary(tmp_path: Path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(TEXT, encoding="utf-8")
    r = logitlab("diff", "--model", "builtin", "--backend", "torch", "--device", "cpu", "--dtype-b", "bfloat16",
                 "--prompt-file", str(prompt))
    assert r.returncode == 0, r.stderr
    *rows, summary = [json.loads(x) for x in r.stdout.splitlines()]
    assert all(list(row) == ROW_KEYS for row in rows) and list(summary) == SUMMARY_KEYS
    assert "".join(row["text"] for row in rows) == TEXT  # row t: the token at position t + 1 (after BOS)
    assert [row["position"] for row in rows] == list(range(1, len(rows) + 1))
    assert summary["a"].endswith("torch float32") and summary["b"].endswith("torch bfloat16")
    assert "Scoring with B" in r.stderr

    a = get_backend("torch", BUILTIN_PATH).load(BUILTIN_PATH, LoadOptions(device="cpu", dtype="float32"))
    request = DiffRequest(model=ModelSpec("builtin", "torch"),  # A as loaded here: the command's default on a CPU
                          model_b=ModelSpec("builtin", "torch", LoadOptions(device="cpu", dtype="bfloat16")),
                          prompt=TEXT)
    d = list(run_diff(a, request, threading.Event(), lambda: None))[-1].diff
    want = d.rows()
    assert [(row["token_id"], row["top_a"], row["top_b"], row["top_a_text"], row["agree"]) for row in rows] == [
        (w.token_id, w.top_a, w.top_b, a.tokenizer.token_text(w.top_a), w.agree) for w in want]
    for row, w in zip(rows, want, strict=True):
        assert row["kl"] == pytest.approx(w.kl, rel=1e-3, abs=1e-7)
        assert (row["logprob_a"], row["logprob_b"]) == pytest.approx((w.logprob_a, w.logprob_b), rel=1e-4)
    s = d.summary()
    assert summary["tokens"] == s.tokens == len(rows)
    assert summary["agreement"] == s.agreement and summary["mean_kl"] == pytest.approx(s.mean_kl, rel=1e-3)
    assert (summary["perplexity_a"], summary["perplexity_b"]) == pytest.approx((s.perplexity_a, s.perplexity_b),
                                                                               rel=1e-4)
    assert summary["mean_kl"] > 0


@pytest.mark.parametrize(("args", "message"), [
    (["--quantize-b", "3", "--prompt", "x"], "argument --quantize-b: invalid choice: 3"),
    (["--prompt-file", "/nonexistent/prompt.txt"], "cannot read the prompt file: No such file or directory"),
    (["--model-b", "/nonexistent/model", "--prompt", "def f():"], "no model folder at '/nonexistent/model'"),
    (["--backend", "torch", "--prompt", ""], "a diff needs at least two tokens"),
])
def test_bad_input_is_one_line(args: list[str], message: str):
    r = logitlab("diff", *args)
    assert r.returncode in (1, 2) and r.stdout == ""
    errors = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], r.stderr
