"""`--logit-bias TOKEN=VALUE` by a token's text or id, as a user runs it on the built-in model: the text becomes the
tokenizer's id, recorded in the trace, and the recorded stage moves that token's logit by exactly VALUE; a text that
is not one token, or an id past the vocabulary, is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.core.models.sources import BUILTIN_PATH
from app.core.record.trace import RunTrace
from backends.base import LoadOptions
from backends.hf.tokenizer import load_tokenizer
from tests.e2e.test_cli import logitlab, one_error_line, run_main

pytestmark = pytest.mark.needs("torch")  # these runs ask for the torch backend by name

RUN = ("generate", "--backend", "torch", "--prompt", "def add(a, b):", "--seed", "5", "--top-n", "20")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(BUILTIN_PATH, LoadOptions())


def test_a_text_biases_its_token_by_exactly_its_value(tokenizer, tmp_path: Path):
    plain = logitlab(*RUN, "--max-tokens", "1", "--json")
    assert plain.returncode == 0, plain.stderr
    drawn = json.loads(plain.stdout.splitlines()[0])["token_id"]
    text = tokenizer.token_text(drawn)
    assert tokenizer.encode(text, add_special_tokens=False) == [drawn]  # one token: its text names it
    trace = tmp_path / "run.jsonl"
    r = logitlab(*RUN, "--max-tokens", "2", "--json", "--trace", str(trace), "--logit-bias", f"{text!r}=-2.5",
                 "--logit-bias", "7=1")
    assert r.returncode == 0, r.stderr
    saved = RunTrace.load(trace)
    assert saved.settings.logit_bias == ((7, 1.0), (drawn, -2.5))
    sample = saved.steps[0].sample
    assert sample.stage_names[0] == "logit_bias"
    col = list(sample.top_ids[:sample.top_n]).index(drawn)  # the unbiased draw is among the raw top 20
    others = [i for i, t in enumerate(sample.top_ids[:sample.top_n]) if t not in (drawn, 7)]
    moved = np.log(sample.probs[1].astype(np.float64)) - np.log(sample.probs[0].astype(np.float64))
    assert moved[col] - moved[others[0]] == pytest.approx(-2.5, abs=1e-4)  # softmax's shift cancels out
    assert np.ptp(moved[others]) == pytest.approx(0, abs=1e-4)  # every other token: the same shift


def test_a_text_of_several_tokens_is_one_line_and_exit_2(capsys, tokenizer):
    ids = tokenizer.encode(" hello", add_special_tokens=False)
    pieces = ", ".join(repr(tokenizer.token_text(i)) for i in ids)
    code, out, err = run_main(capsys, *RUN, "--logit-bias", '" hello"=-5')
    assert code == 2 and out == "" and len(ids) > 1
    assert one_error_line(err) == (f"logitlab generate: error: logit bias: ' hello' is {len(ids)} tokens here "
                                   f"({pieces}); give one token or its id")


def test_an_id_past_the_vocabulary_is_one_line_and_exit_2(capsys, tokenizer):
    vocab = len(tokenizer.hf)
    code, out, err = run_main(capsys, *RUN, "--logit-bias", f"{vocab}=2")
    assert code == 2 and out == ""
    assert f"logit bias: token id {vocab} is past this vocabulary ({vocab} tokens" in one_error_line(err)


def test_a_text_where_it_cannot_be_found_yet_asks_for_the_id(capsys):
    code, out, err = run_main(capsys, *RUN, "--beams", "2", "--logit-bias", "x=1")
    assert code == 2 and out == "" and "--logit-bias by text ('x')" in one_error_line(err)
