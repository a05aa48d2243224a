"""Prompt sets: pasted text, the set's own file, the settings' labels, the results' writers (CSV, JSON Lines,
Markdown) read back with their label column, and the set with its results in the session file (an older file
without one still opens; whatever a damaged one holds is read whole or refused in one line)."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.compare.prompt_sets import (
    RESULT_COLUMNS,
    PromptResult,
    PromptSet,
    export_results,
    label_names,
    parse_pasted,
    read_prompt_set,
    result_record,
    results_csv,
    results_jsonl,
    results_markdown,
    settings_label,
    write_prompt_set,
)
from app.core.compare.statistics import SampleStats
from app.core.session.session_file import SavedSession, SessionFormatError, encode, from_lines, load, save, to_session
from app.core.settings import SamplerSettings, SettingsError
from tests.core.record.test_trace import mutate, strict_json

AWKWARD = 'a | pipe, a \\| escaped one, a "quote", a, comma\nand a line\r\nbreak & <br> too'


def result(index: int, prompt: str, text: str, lp: float | None, seq: int = 0, label: str = "T=0.8") -> PromptResult:
    ppl = None if lp is None else math.exp(-lp) if -lp < 700 else math.inf
    stats = SampleStats(sequence=seq, run_id=10 + index, seed=3 + seq, tokens=(1, 2, 3), text=text, length=3,
                        mean_logprob=lp, perplexity=ppl, finish_reason="length")
    return PromptResult(index, prompt, label, stats)


RESULTS = (result(0, "Hello", " world", -1.25), result(1, AWKWARD, AWKWARD, -0.5, 1, label="B: T=1.2 | x"),
           result(2, "x", "", None))


def unmarkdown(cell: str) -> str:
    """An independent reader of one escaped Markdown cell."""
    out, i = [], 0
    table = {"<br>": "\n", "&#13;": "\r", "&#32;": " ", "&amp;": "&", "&lt;": "<", "\\\\": "\\", "\\|": "|"}
    while i < len(cell):
        for k, v in table.items():
            if cell.startswith(k, i):
                out.append(v)
                i += len(k)
                break
        else:
            out.append(cell[i])
            i += 1
    return "".join(out)


def markdown_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        cells = re.split(r"(?<!\\)((?:\\\\)*)\|", line.strip())  # a pipe after an even number of backslashes
        joined = [cells[0]]
        for k in range(1, len(cells), 2):  # re.split keeps the backslashes' group: glue it back to its cell
            joined[-1] += cells[k]
            joined.append(cells[k + 1])
        rows.append([unmarkdown(c.strip()) for c in joined[1:-1]])
    return rows


def text_of(v) -> str:
    return "" if v is None else str(v)


def test_csv_round_trip():
    rows = list(csv.reader(io.StringIO(results_csv(RESULTS), newline="")))
    assert tuple(rows[0]) == RESULT_COLUMNS and len(rows) == 4
    for row, r in zip(rows[1:], RESULTS, strict=True):
        assert row == [text_of(v) for v in result_record(r).values()]
    assert rows[2][1] == AWKWARD and rows[0][2] == "settings" and [r[2] for r in rows[1:]] == [
        "T=0.8", "B: T=1.2 | x", "T=0.8"]


def test_jsonl_round_trip_and_no_infinity():
    lines = results_jsonl(RESULTS).splitlines()
    assert [json.loads(line) for line in lines] == [result_record(r) for r in RESULTS]
    inf = result(0, "p", "t", -800.0)  # perplexity overflows to infinity: null in JSON
    assert json.loads(results_jsonl([inf]))["perplexity"] is None


def test_markdown_escapes_pipes_and_newlines_and_reads_back():
    text = results_markdown(RESULTS)
    lines = text.splitlines()
    assert len(lines) == 2 + len(RESULTS)  # a line break in a cell stays in its row
    assert lines[1].count("|") == len(RESULT_COLUMNS) + 1
    assert "a \\| pipe" in lines[3] and "comma<br>and" in lines[3] and "\\\\\\|" in lines[3]
    rows = markdown_rows(text)
    assert tuple(rows[0]) == RESULT_COLUMNS
    for row, r in zip(rows[2:], RESULTS, strict=True):
        assert len(row) == len(RESULT_COLUMNS)
        assert row == [text_of(v) for v in result_record(r).values()]


@pytest.mark.parametrize("suffix,writer", [(".csv", results_csv), (".jsonl", results_jsonl),
                                           (".md", results_markdown)])
def test_export_writes_the_writers_text(tmp_path: Path, suffix, writer):
    path = tmp_path / f"results{suffix}"
    export_results(path, RESULTS)
    assert path.read_bytes().decode("utf-8") == writer(RESULTS)


def test_pasted_lines_or_blocks():
    assert parse_pasted("one\ntwo\r\n\nthree\n") == ("one\ntwo", "three")  # a blank line: blocks
    assert parse_pasted("  one\ntwo  \n") == ("one", "two")
    with pytest.raises(SettingsError, match="nothing to add"):
        parse_pasted(" \n\n ")


def test_the_set_file_reads_back(tmp_path: Path):
    path = tmp_path / "set.jsonl"
    write_prompt_set(path, ["a", AWKWARD])
    assert read_prompt_set(path) == ("a", AWKWARD)


def test_bad_sets_are_one_line(tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": \n')
    with pytest.raises(SettingsError, match=r"bad.jsonl, line 2: not JSON"):
        read_prompt_set(bad)
    empty = tmp_path / "empty.csv"
    empty.write_text("prompt\n\n")
    with pytest.raises(SettingsError, match="no prompt"):
        read_prompt_set(empty)


def test_labels_name_what_tells_the_settings_apart():
    a, b = SamplerSettings(temperature=0.7, seed=3), SamplerSettings(temperature=1.2, top_p=0.9, seed=3)
    names = label_names([a, b])
    assert names == ("temperature", "top_p")
    assert [settings_label(s, names) for s in (a, b)] == ["T=0.7, top-p=1", "T=1.2, top-p=0.9"]
    assert label_names([a, a.with_(seed=4)]) == ("seed",)
    alone = SamplerSettings(temperature=0.8, top_k=12, top_p=0.8, max_tokens=4)  # max tokens never named
    assert settings_label(alone, label_names([alone])) == "T=0.8, top-k=12, top-p=0.8"
    assert settings_label(a, ("repetition_penalty",)) == "repetition-penalty=1"


INF = result(3, "p", "t", -800.0)  # its perplexity overflows to infinity
SET = PromptSet(("Hello", AWKWARD, "x", ""), (*RESULTS, INF))


def test_a_set_and_its_results_are_saved_in_the_session_and_read_back_equal(tmp_path: Path):
    doc = SavedSession(prompt="p", prompt_set=SET)
    save(doc, tmp_path / "s.jsonl")
    head = (tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()[0]
    strict_json(head)  # no Infinity in the file: a string stands for it
    back = load(tmp_path / "s.jsonl")
    assert back == doc and back.prompt_set.results[-1].sample.perplexity == math.inf
    session, _ = to_session(back)
    assert session.prompt_set == SET


def test_an_older_session_file_without_a_set_still_opens(tmp_path: Path):
    lines = list(encode(SavedSession(prompt="old")))
    head = json.loads(lines[0])
    assert "prompt_set" not in head  # nothing written where there is no set: the file is what it was
    back = from_lines(lines, "old.jsonl")
    assert back.prompt_set is None and to_session(back)[0].prompt_set is None


@pytest.mark.parametrize(("change", "says"), [
    ("the set", "prompt_set must be an object (its prompts and results)"),
    ({"prompts": ["a", 3], "results": []}, "prompt_set.prompts must be a list of texts, got [\"a\", 3]"),
    ({"prompts": [], "results": [{"index": 0}]}, "prompt_set.results[0].sample must be an object, got null"),
])
def test_a_damaged_set_is_refused_in_one_line_naming_its_field(change, says):
    head = json.loads(next(encode(SavedSession(prompt_set=SET))))
    head["prompt_set"] = change
    if isinstance(change, dict) and change["results"]:
        change["results"][0]["sample"] = None
    with pytest.raises(SessionFormatError) as e:
        from_lines([json.dumps(head)], "s.jsonl")
    assert str(e.value) == f"s.jsonl:1: damaged session header ({says})"


SET_OBJS = [json.loads(line) for line in encode(SavedSession(prompt_set=SET))]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_whatever_a_saved_set_holds_it_is_read_whole_or_refused_in_one_line(data):
    lines = mutate(data, SET_OBJS)
    try:
        doc = from_lines(lines, "s.jsonl")
    except SessionFormatError as e:
        assert str(e).startswith("s.jsonl:") and "\n" not in str(e)
    else:
        encoded = list(encode(doc))
        assert list(encode(from_lines(encoded))) == encoded
