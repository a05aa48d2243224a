"""Prompt sets: pasted text, the set's own file, and the results' writers (CSV, JSON Lines, Markdown) read back."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import pytest

from app.core.compare import SampleStats
from app.core.prompt_sets import (
    RESULT_COLUMNS,
    PromptResult,
    export_results,
    parse_pasted,
    read_prompt_set,
    result_record,
    results_csv,
    results_jsonl,
    results_markdown,
    write_prompt_set,
)
from app.core.settings import SettingsError

AWKWARD = 'a | pipe, a \\| escaped one, a "quote", a, comma\nand a line\r\nbreak & <br> too'


def result(index: int, prompt: str, text: str, lp: float | None, seq: int = 0) -> PromptResult:
    ppl = None if lp is None else math.exp(-lp) if -lp < 700 else math.inf
    stats = SampleStats(sequence=seq, run_id=10 + index, seed=3 + seq, tokens=(1, 2, 3), text=text, length=3,
                        mean_logprob=lp, perplexity=ppl, finish_reason="length")
    return PromptResult(index, prompt, stats)


RESULTS = (result(0, "Hello", " world", -1.25), result(1, AWKWARD, AWKWARD, -0.5, 1), result(2, "x", "", None))


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
    assert rows[2][1] == AWKWARD


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
