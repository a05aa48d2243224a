"""The comparison statistics, the sweep grid and prompt sets, on hand-made inputs worked out by hand."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.compare.prompt_sets import read_prompt_set
from app.core.compare.statistics import (
    agreement,
    compare,
    distinct,
    is_json,
    make_grid,
    parse_axis,
    sample_stats,
)
from app.core.record.record import Sample, StepTrace
from app.core.record.trace import RunTrace
from app.core.settings import SamplerSettings, SettingsError


def run(tokens: list[int], logprobs: list[float], text: str | None = None, seed: int = 0) -> RunTrace:
    """A trace whose steps report the model's (raw) log-probability of each drawn token."""
    pieces = list(text) if text is not None and len(text) == len(tokens) else [f"<{t}>" for t in tokens]
    if text is not None and len(text) != len(tokens):
        pieces = [text] + [""] * (len(tokens) - 1)
    steps = [StepTrace(i, Sample.partial(t, lp, [t], [lp], reported="raw"), piece, ("x",), 0.0)
             for i, (t, lp, piece) in enumerate(zip(tokens, logprobs, pieces, strict=True))]
    return RunTrace(prompt_ids=[1], settings=SamplerSettings(), seed=seed, steps=steps, finish_reason="length")


def test_a_sample_s_mean_logprob_and_perplexity():
    s = sample_stats(run([5, 6, 7], [-1.0, -2.0, -3.0]))
    assert s.length == 3 and s.tokens == (5, 6, 7)
    assert s.mean_logprob == pytest.approx(-2.0) and s.perplexity == pytest.approx(math.e**2)


def test_a_sample_with_no_steps_has_no_logprob():
    s = sample_stats(run([], []))
    assert s.length == 0 and s.mean_logprob is None and s.perplexity is None


def test_distinct_counts_ngrams_within_each_sample_pooled():
    # unigrams: 1 2 1 | 1 2 -> 5 in all, 2 distinct; bigrams: (1,2) (2,1) | (1,2) -> 3 in all, 2 distinct
    assert distinct([[1, 2, 1], [1, 2]], 1) == pytest.approx(2 / 5)
    assert distinct([[1, 2, 1], [1, 2]], 2) == pytest.approx(2 / 3)
    assert distinct([[1], [2]], 2) == 0.0  # no bigram at all


def test_agreement_with_the_most_common_prefix():
    seqs = [[1, 2, 3], [1, 2, 4], [1, 5], [9]]
    # position 0: three start with 1; position 1: two share (1, 2); position 2: (1,2,3) and (1,2,4) once each
    assert agreement(seqs) == (3, 2, 1)
    assert agreement([]) == ()


@given(st.lists(st.lists(st.integers(0, 3), max_size=6), min_size=1, max_size=6))
def test_agreement_never_grows_and_never_exceeds_n(seqs):
    a = agreement(seqs)
    assert all(x >= y for x, y in itertools.pairwise(a))
    assert all(1 <= x <= len(seqs) for x in a)


def test_the_set_statistics():
    traces = [run([1, 2], [-1.0, -1.0], "{}"), run([1, 2], [-1.0, -1.0], "{}"), run([3, 4], [-3.0, -1.0], "ab")]
    c = compare(traces, pattern=r"^a")
    s = c.stats
    assert s.n == 3 and s.unique == 2
    assert s.distinct_1 == pytest.approx(4 / 6) and s.distinct_2 == pytest.approx(2 / 3)
    assert s.mean_logprob == pytest.approx((-1 - 1 - 2) / 3)
    assert s.logprob_spread == pytest.approx(math.sqrt(((1 / 3) ** 2 * 2 + (2 / 3) ** 2) / 3))
    assert (s.logprob_min, s.logprob_max) == (-2.0, -1.0)
    assert s.agreement == (2, 2) and s.mean_length == 2
    assert s.match_rate == pytest.approx(1 / 3) and s.json_rate == pytest.approx(2 / 3)
    assert [x.sequence for x in c.samples] == [0, 1, 2]


def test_no_pattern_no_match_rate_and_a_bad_one_is_one_line():
    assert compare([run([1], [-1.0])]).stats.match_rate is None
    with pytest.raises(SettingsError, match="not a regular expression"):
        compare([run([1], [-1.0])], pattern="(")


@pytest.mark.parametrize(("text", "ok"), [(' {"a": [1, 2]}\n', True), ("42", True), ("{'a': 1}", False),
                                          ("", False), ('{"a": 1} trailing', False)])
def test_is_json(text, ok):
    assert is_json(text) is ok


def test_a_grid_of_two_axes_row_by_row():
    axes = [parse_axis("temperature=0.2,0.7,1.2"), parse_axis("top_p=0.8,0.95,1")]
    cells = make_grid(SamplerSettings(seed=3, top_k=5), axes)
    assert len(cells) == 9 and (cells[5].row, cells[5].col) == (1, 2)
    assert cells[5].values == {"temperature": 0.7, "top_p": 1.0}
    assert cells[5].settings == SamplerSettings(seed=3, top_k=5, temperature=0.7, top_p=1.0)


def test_an_integer_axis_and_a_single_axis():
    cells = make_grid(SamplerSettings(), [parse_axis("top-k=1,5")])
    assert [c.settings.top_k for c in cells] == [1, 5] and [c.col for c in cells] == [0, 0]


@pytest.mark.parametrize(("text", "message"), [
    ("temp=1", "NAME one of"), ("temperature", "NAME one of"), ("top_k=1.5", "whole numbers"),
    ("temperature=a", "numbers"), ("temperature=1,1", "different values"),
    ("temperature=" + ",".join(str(i / 10) for i in range(7)), "1 to 6"),
])
def test_bad_axes_say_what_is_wrong(text, message):
    with pytest.raises(SettingsError, match=message):
        parse_axis(text)


def test_a_grid_value_out_of_range_or_a_repeated_axis_is_refused():
    with pytest.raises(SettingsError, match="temperature must be"):
        make_grid(SamplerSettings(), [parse_axis("temperature=1,3")])
    with pytest.raises(SettingsError, match="one or two"):
        make_grid(SamplerSettings(), [parse_axis("top_p=0.5,1")] * 2)


def test_prompt_sets_from_csv_and_json_lines(tmp_path):
    csv_file = tmp_path / "p.csv"
    csv_file.write_text('id,prompt\n1,"def f(x):\n"\n\n2,import \n', encoding="utf-8")
    assert read_prompt_set(csv_file) == ("def f(x):\n", "import ")
    bare = tmp_path / "bare.csv"
    bare.write_text("Hello\nWorld\n", encoding="utf-8")
    assert read_prompt_set(bare) == ("Hello", "World")
    lines = tmp_path / "p.jsonl"
    lines.write_text('{"prompt": "a", "note": 1}\n\n"b"\n', encoding="utf-8")
    assert read_prompt_set(lines) == ("a", "b")


@pytest.mark.parametrize(("name", "data", "message"), [
    ("p.jsonl", b'{"prompt": "a"}\n{"text": "b"}\n', "p.jsonl, line 2: expected a text"),
    ("p.jsonl", b'{"prompt": \n', "line 1: not JSON"),
    ("p.jsonl", b"\n\n", "no prompt in it"),
    ("p.csv", b"prompt,x\n,1\n", "row 2: no prompt"),
    ("p.csv", b"\xff\xfe", "not UTF-8"),
])
def test_a_bad_prompt_set_is_one_line_naming_where(tmp_path, name, data, message):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(SettingsError, match=message):
        read_prompt_set(path)
    with pytest.raises(SettingsError, match="cannot read"):
        read_prompt_set(tmp_path / "missing.csv")
