"""`--order`, `--logit-bias` and the new sampler flags as a user runs them: each stage recorded in `--json` in the
order asked for; a bad value is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_cli import logitlab, one_error_line, run_main


@pytest.mark.needs("torch")
def test_the_json_records_each_stage_in_the_order_asked_for(tiny_path: Path):
    r = logitlab("generate", "--model", str(tiny_path), "--backend", "torch", "--prompt", "Hello", "--max-tokens", "3",
                 "--seed", "3", "--json", "--order", "mlx-lm", "--top-k", "20", "--top-p", "0.9", "--typical-p",
                 "0.95", "--xtc-probability", "1", "--xtc-threshold", "0.01", "--mirostat-tau", "6",
                 "--logit-bias", "5=-100")
    assert r.returncode == 0, r.stderr
    *steps, _ = [json.loads(x) for x in r.stdout.splitlines()]
    for s in steps:
        assert s["stages"] == ["logit_bias", "top_p", "xtc", "top_k", "temperature", "typical_p", "mirostat"]
        assert len(s["kept_counts"]) == len(s["thresholds"]) == 7 and s["token_id"] != 5
        assert s["thresholds"][-1] is not None  # mirostat's line 2^-μ


@pytest.mark.parametrize(("argv", "says"), [
    (["--order", "top_q,temperature"], "argument --order: unknown stage 'top_q' in the order"),
    (["--order", "top_k,top_k"], "argument --order: a stage is named twice in the order"),
    (["--logit-bias", "5"], "argument --logit-bias: expected TOKEN=VALUE"),
    (["--logit-bias", "5=200"], "argument --logit-bias: expected TOKEN=VALUE (a token's text or id, a value from -100 "
                                "to 100)"),
    (["--typical-p", "2"], "argument --typical-p: must be a number from 0 to 1"),
    (["--mirostat-tau", "-1"], "argument --mirostat-tau: must be a number from 0 to 10"),
])
def test_a_bad_order_or_bias_is_one_line_and_exit_2(capsys, argv: list[str], says: str):
    code, out, err = run_main(capsys, "generate", "--prompt", "x", *argv)
    assert code == 2 and says in one_error_line(err) and out == ""
