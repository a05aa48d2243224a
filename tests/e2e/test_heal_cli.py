"""`logitlab generate --heal` as a user runs it (in this process, the tiny model on torch): the prompt's last token is
backed off and the printed text begins with it; where it cannot heal, one line and exit 2."""

from __future__ import annotations

import json

import pytest

from backends.base import LoadOptions
from backends.hf.tokenizer import load_tokenizer
from tests.e2e.test_cli import one_error_line, run_main

pytestmark = pytest.mark.needs("torch")
PROMPT = "The quick brown fox jumps over the lazy "


def test_a_healed_run_prints_text_that_begins_with_the_backed_off_token(capsys, tiny_path):
    code, out, err = run_main(capsys, "generate", "--model", str(tiny_path), "--backend", "torch", "--prompt", PROMPT,
                              "--heal", "--max-tokens", "5", "--seed", "2", "--json")
    assert code == 0, err
    *steps, summary = [json.loads(line) for line in out.splitlines()]
    assert summary["text"].startswith(" ") and steps[0]["text"].startswith(" ")
    tokenizer = load_tokenizer(tiny_path, LoadOptions())
    assert summary["prompt_tokens"] == len(tokenizer.encode(PROMPT)) - 1  # the last token, the space, backed off
    assert "healed: the prompt's last token ' ' backed off; the text starts with it" in err


def test_what_cannot_be_healed_is_one_line(capsys, tiny_path):
    code, _, err = run_main(capsys, "generate", "--model", str(tiny_path), "--backend", "torch", "--prompt", "Hi",
                            "--chat", "--heal")
    assert code == 2 and "healing works on a completion prompt" in one_error_line(
        [e for e in err if "error" in e])
    code, _, err = run_main(capsys, "generate", "--prompt", "x", "--heal", "--beams", "2")
    assert code == 2 and one_error_line(err).endswith("--heal works on a plain run: leave out --beams, "
                                                      "--draft-model, --stats and --match")
