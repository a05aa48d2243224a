"""Issue 31, the core's half: what a careless or hostile user (or server) hands the pure functions. Text nested too
deeply or too large is refused in one short line, a byte-order mark is no part of a header, a refusal quotes at most
a few dozen characters of what was typed, and whatever a run holds is written so that it reads back."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from app.core.compare.prompt_sets import read_prompt_set
from app.core.compare.statistics import compile_pattern, is_json, parse_axis
from app.core.decoding.beam import BeamSettings
from app.core.decoding.generation import MAX_CHARS_PER_TOKEN, PromptError, check_length
from app.core.events import Message, Request
from app.core.files import json_number, typed
from app.core.record.trace import RunTrace, Sample, StepTrace
from app.core.record.trace_file import TraceFormatError
from app.core.sampler.logit_bias import check_ids, parse_entry, typed_token
from app.core.session import session_file
from app.core.settings import SamplerSettings, SettingsError

DEEP = "[" * 100_000


def short(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert len(text) < 600, text[:700]  # (what a message says of its own, never what was typed)
    return text


# depth and size -----------------------------------------------------------------------------------------------
def test_a_prompt_set_in_json_lines_nested_too_deeply_is_one_line(tmp_path: Path):
    (tmp_path / "deep.jsonl").write_text('{"prompt": "a"}\n' + DEEP + "\n")
    with pytest.raises(SettingsError) as e:
        read_prompt_set(tmp_path / "deep.jsonl")
    assert short(e) == "deep.jsonl, line 2: not JSON (nested too deeply to be read)"


def test_a_byte_order_mark_is_no_part_of_the_header_or_a_prompt(tmp_path: Path):
    (tmp_path / "set.csv").write_text("prompt,id\nHello,1\nWorld,2\n", encoding="utf-8-sig")
    assert read_prompt_set(tmp_path / "set.csv") == ("Hello", "World")
    (tmp_path / "set.jsonl").write_text('"Hello"\n{"prompt": "World"}\n', encoding="utf-8-sig")
    assert read_prompt_set(tmp_path / "set.jsonl") == ("Hello", "World")


def test_a_csv_field_of_10_mb_is_read_whole_and_the_field_limit_is_left_as_it_was(tmp_path: Path):
    import csv

    limit = csv.field_size_limit()
    (tmp_path / "big.csv").write_text('prompt\n"' + "a" * (10 << 20) + '"\nshort\n')
    assert [len(p) for p in read_prompt_set(tmp_path / "big.csv")] == [10 << 20, 5]
    assert csv.field_size_limit() == limit


def test_a_prompt_that_cannot_fit_the_context_is_refused_before_it_is_tokenized():
    fits = Request(prompt="a" * (1024 * MAX_CHARS_PER_TOKEN), settings=SamplerSettings())
    check_length(fits, 1024)  # as long as it may be
    with pytest.raises(PromptError, match=r"the prompt is 65,537 characters: far more than this model's context of "
                                          r"1,024 tokens holds"):
        check_length(Request(prompt=fits.prompt + "a", settings=SamplerSettings()), 1024)
    chat = Request(prompt="", messages=(Message("system", "s" * 40_000), Message("user", "u" * 40_000)),
                   settings=SamplerSettings())
    with pytest.raises(PromptError, match="80,000 characters"):  # a chat's messages counted together
        check_length(chat, 1024)
    check_length(Request(prompt="a" * 10**6, settings=SamplerSettings()), 0)  # a context not known: the run says


def test_text_nested_too_deeply_is_not_json_and_no_regular_expression():
    assert not is_json(DEEP) and is_json("[[1]]")
    with pytest.raises(SettingsError) as e:
        compile_pattern("(" * 100_000)
    assert short(e).startswith("a regular expression too deeply nested or too large: '(((")


@pytest.mark.parametrize(("call", "says"), [
    (lambda: parse_entry("x" * 100_000), "expected TOKEN=VALUE"),
    (lambda: parse_entry("9" * 5_000 + "=1"), "is past any vocabulary"),
    (lambda: parse_entry('"' + "a" * 5_000 + '""=1'), "cannot read the quoted token"),
    (lambda: typed_token(" " + "7" * 5_000), "is past any vocabulary"),
    (lambda: parse_axis("temperature=" + ",".join(f"{i / 1000}" for i in range(1000))), "give 1 to"),
    (lambda: parse_axis("temperature=" + "a," * 50_000), "must be numbers"),
    (lambda: parse_axis("q" * 100_000), "a grid axis is NAME=V1,V2"),
])
def test_a_refusal_quotes_what_was_typed_cut_short(call, says: str):
    with pytest.raises(SettingsError) as e:
        call()
    assert says in short(e) and "characters)" in str(e.value)


def test_typed_text_is_quoted_whole_when_short_and_cut_with_its_length_when_not():
    assert typed("abc") == "'abc'" and typed("it's") == '"it\'s"'
    assert typed("x" * 61) == "'" + "x" * 60 + "…' (61 characters)"
    assert typed("it's" * 30, 8) == "\"it'sit's…\" (120 characters)"


def test_a_token_typed_in_another_scripts_digits_is_text_not_an_id():
    assert parse_entry("²=1").token == "²" and parse_entry("42=1").token == 42 and typed_token(" 7 ") == 7


# numbers ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("penalty", [1e308, -1e308, math.inf, math.nan, 5.01, -5.01])
def test_a_length_penalty_past_what_a_float32_score_holds_is_refused(penalty: float):
    with pytest.raises(SettingsError, match="length penalty must be a number from -5 to 5"):
        BeamSettings(length_penalty=penalty)
    BeamSettings(length_penalty=5.0, max_tokens=100_000)  # the edge: 100,000 ** 5 is a float32


def test_a_logit_bias_id_past_the_vocabulary_is_refused_as_a_plain_run_refuses_it():
    check_ids(((0, 1.0), (4095, -2.0)), 4096)
    check_ids(((10**9, 1.0),), 0)  # a server's vocabulary: not known here
    with pytest.raises(SettingsError, match=r"^logit bias: token id 4096 is past this vocabulary \(4096 tokens"):
        check_ids(((1, 1.0), (4096, 1.0)), 4096)


# files Logit Lab wrote open again -----------------------------------------------------------------------------
def server_run() -> RunTrace:
    """A run whose steps hold what a server may send: +1000 and NaN log-probabilities, of either distribution."""
    steps = [Sample.partial(5, lp, [5, 6], [lp, -1.0], reported=how)
             for how in ("final", "raw") for lp in (1000.0, math.nan, 1e300, -math.inf)]
    run = RunTrace(prompt_ids=[1, 2], settings=SamplerSettings(seed=3), seed=3, finish_reason="length",
                   model={"name": "served", "backend": "remote", "source": "served"})
    run.steps = [StepTrace(i, s, "a", ("a", "b"), 0.01) for i, s in enumerate(steps)]
    return run


def test_a_trace_holding_nan_and_plus_1000_log_probabilities_reopens_bit_for_bit(tmp_path: Path):
    run = server_run()
    run.save(tmp_path / "run.jsonl")
    back = RunTrace.load(tmp_path / "run.jsonl")
    for a, b in zip(run.steps, back.steps, strict=True):
        assert a.sample.values.tobytes() == b.sample.values.tobytes() and a.sample.reported == b.sample.reported
    assert back.steps[0].sample.prob == math.inf and back.steps[4].sample.raw_logprob == 1000.0
    doc = session_file.load(tmp_path / "run.jsonl")  # as `logitlab --open FILE` reads it
    assert len(doc.runs) == 1 and len(doc.runs[0].trace.steps) == len(run.steps)
    damaged = (tmp_path / "run.jsonl").read_text().replace('"probs": [[', '"probs": [["many", ', 1)
    (tmp_path / "damaged.jsonl").write_text(damaged)
    with pytest.raises(TraceFormatError, match=r"damaged.jsonl:2: damaged trace line \(probs must be"):
        RunTrace.load(tmp_path / "damaged.jsonl")


def test_text_utf8_cannot_hold_is_written_as_its_escape_and_read_back_the_same(tmp_path: Path):
    run = server_run()
    run.prompt_text, run.finish_message = "ab\udcff", "cut \ud800"  # an undecodable argv byte, a broken escape
    run.steps[0] = StepTrace(0, run.steps[0].sample, "\udcfe", ("\udcfe", "b"), 0.01)
    run.save(tmp_path / "run.jsonl")
    (tmp_path / "run.jsonl").read_bytes().decode("utf-8")  # still UTF-8 throughout
    back = RunTrace.load(tmp_path / "run.jsonl")
    assert (back.prompt_text, back.finish_message, back.steps[0].text) == ("ab\udcff", "cut \ud800", "\udcfe")


def test_a_numpy_float_is_written_as_json_holds_it():
    assert json.dumps([json_number(np.float32("nan")), json_number(np.float32(0.5)), json_number(np.int64(3))]) \
        == '["NaN", 0.5, 3]'
