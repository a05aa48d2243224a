"""Exports draw a finished run from its record: Markdown and HTML carry every token with the output view's shade
of its probability, the CSVs a row per step or per candidate (a number that is not finite as a cell that reads
back); every file is written atomically, and only a regular file is ever replaced (a link's target is written, a
device or a FIFO in place)."""

from __future__ import annotations

import csv
import errno
import io
import math
import os
import socket
import stat
import threading
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from app.core.files import write_atomic
from app.core.record.export import (
    ALPHA,
    CANDIDATE_COLUMNS,
    SHADES,
    STEP_COLUMNS,
    candidates_csv,
    css_color,
    shade,
    shade_rgba,
    steps_csv,
    to_html,
    to_markdown,
)
from app.core.record.trace import RunTrace, Sample, StepTrace
from tests.core.record.test_trace import make_run

TRICKY = '<b>&"x"</b>\n  '  # markup, quotes and whitespace a page must show as they are


def run_with_tricky_text() -> RunTrace:
    run = make_run(steps=6)
    run.steps[1] = replace(run.steps[1], text=TRICKY)
    run.steps[2] = replace(run.steps[2], text="")  # a token that added no text (end of text, a held stop string)
    run.prompt_text = "say ```hi```\n"
    return run


class Spans(HTMLParser):
    """The spans of an exported page: (text, style, title) each, in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.spans: list[list[str]] = []
        self._open: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "span" and a.get("title"):
            self._open = ["", a.get("style") or "", a["title"]]

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open[0] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self._open is not None:
            self.spans.append(self._open)
            self._open = None


def spans_of(page: str) -> list[list[str]]:
    p = Spans()
    p.feed(page)
    return p.spans


@pytest.mark.parametrize("render", [to_html, to_markdown])
def test_the_output_is_every_token_that_added_text_shaded_by_its_probability(render):
    run = run_with_tricky_text()
    spans = spans_of(render(run))
    shown = [st for st in run.steps if st.text]
    assert "".join(text for text, _, _ in spans) == run.text  # markup and whitespace come back as they were
    assert len(spans) == len(shown) == len(run.steps) - 1
    for (_, style, title), st in zip(spans, shown, strict=True):
        assert title.startswith(f"step {st.step} · token {st.token_id}")
        if st.prob is None:  # a server reported only the raw distribution: no probability, no shade
            assert style == "" and "not recorded" in title
        else:
            assert style == f"background-color: {css_color(shade(st.prob))}"


def test_shades_run_from_red_through_amber_to_green_in_twenty_steps():
    assert [shade(p) for p in (0.0, 0.02, 0.5, 0.97, 1.0)] == [0, 0, 10, 18, 19] and shade(None) is None
    colors = [shade_rgba(i) for i in range(SHADES)]
    assert len(set(colors)) == SHADES and {a for *_, a in colors} == {ALPHA}
    greenness = [g - r for r, g, _, _ in colors]
    assert greenness[0] < 0 < greenness[-1] and greenness == sorted(greenness)


def test_markdown_keeps_the_prompt_in_a_fence_longer_than_its_own_backticks():
    md = to_markdown(run_with_tricky_text())
    assert "````text\nsay ```hi```\n\n````" in md
    assert "- **Settings:** temperature 0.5 · top-k 12 · top-p 0.8 · min-p 0.1" in md
    assert md.count("<pre>") == 1 and md.count("</pre>") == 1  # one HTML block (CommonMark keeps <pre> whole)


def test_the_html_page_is_standalone_and_names_what_made_it():
    page = to_html(run_with_tricky_text())
    assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page
    assert "tiny (torch)" in page and "finished by length" in page and "<link" not in page and "<script" not in page


def rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_the_steps_csv_has_a_row_per_step_with_the_recorded_numbers():
    run = run_with_tricky_text()
    table = rows(steps_csv(run))
    assert tuple(table[0]) == STEP_COLUMNS and len(table) == len(run.steps)
    for row, st in zip(table, run.steps, strict=True):
        assert int(row["token_id"]) == st.token_id and row["text"] == st.text
        assert (row["prob"] == "") == (st.prob is None) and (row["rank"] == "") == (st.sample.rank is None)
        if st.prob is not None:
            assert float(row["prob"]) == st.prob
        if st.sample.rank is not None:
            assert int(row["rank"]) == st.sample.rank


def test_the_candidates_csv_has_a_row_per_recorded_candidate_and_marks_the_drawn_one():
    run = run_with_tricky_text()
    table = rows(candidates_csv(run))
    assert tuple(table[0]) == CANDIDATE_COLUMNS and len(table) == sum(st.top_n for st in run.steps)
    for st in run.steps:
        mine = [r for r in table if int(r["step"]) == st.step]
        drawn = [r for r in mine if r["drawn"] == "1"]
        assert [int(r["token_id"]) for r in drawn] == [st.token_id] * (st.token_id in st.sample.top_ids[: st.top_n])
        for i, r in enumerate(mine):
            assert int(r["candidate"]) == i and (r["cut_by"] or None) == st.cut_by(i)


def test_write_atomic_replaces_the_file_whole_and_leaves_nothing_behind(tmp_path: Path, monkeypatch):
    path = tmp_path / "out.md"
    path.write_text("old")
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    write_atomic(path, "naïve ✓")
    assert path.read_text(encoding="utf-8") == "naïve ✓" and synced
    assert [p.name for p in tmp_path.iterdir()] == ["out.md"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch):
    path = tmp_path / "out.csv"
    path.write_text("old")

    def refuse(src: str, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError):
        write_atomic(path, "new")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_write_atomic_writes_a_links_target_and_leaves_the_link(tmp_path: Path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "out.md"
    target.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    write_atomic(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(target) and target.read_text() == "new"
    dangling = tmp_path / "dangling.md"
    dangling.symlink_to(tmp_path / "real" / "later.md")
    write_atomic(dangling, "made")  # the link's target is made, the link stays
    assert dangling.is_symlink() and (tmp_path / "real" / "later.md").read_text() == "made"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["later.md", "out.md"]


def test_write_atomic_writes_a_fifo_in_place(tmp_path: Path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_atomic(fifo, "through the pipe")
    reader.join(timeout=10)
    assert got == [b"through the pipe"] and stat.S_ISFIFO(fifo.stat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]


def test_write_atomic_writes_a_device_in_place_and_never_replaces_it():
    write_atomic("/dev/null", "gone")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    if not (Path("/dev/full").exists() and stat.S_ISCHR(os.stat("/dev/full").st_mode)):
        pytest.skip("no /dev/full device here")
    with pytest.raises(OSError) as e:
        write_atomic("/dev/full", "x" * 10_000)
    assert e.value.errno == errno.ENOSPC and stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_write_atomic_refuses_a_folder_or_a_socket_with_an_os_error(tmp_path: Path):
    (tmp_path / "folder").mkdir()
    with pytest.raises(IsADirectoryError):
        write_atomic(tmp_path / "folder", "x")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "sock"))
        with pytest.raises(OSError):
            write_atomic(tmp_path / "sock", "x")
        assert stat.S_ISSOCK((tmp_path / "sock").stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "sock"]


def test_numbers_that_are_not_finite_export_as_csv_cells_that_read_back():
    run = make_run(steps=1)
    run.steps[0] = replace(run.steps[0], seconds=math.nan)
    never = Sample.partial(5, -math.inf, [5, 6], [-math.inf, 0.0])  # drawn with probability 0
    with np.errstate(over="ignore"):
        nonsense = Sample.partial(7, 1000.0, [7, 8], [1000.0, -math.inf], reported="raw")  # a server's overflow
    run.steps += [StepTrace(2, never, "a", ("a", "b"), 0.1), StepTrace(3, nonsense, "c", ("c", "d"), 0.2)]

    def number(cell: str) -> float | None:
        return float(cell) if cell else None

    steps = list(csv.DictReader(io.StringIO(steps_csv(run))))
    assert number(steps[0]["seconds"]) is None  # NaN: not measured, an empty cell
    assert number(steps[2]["prob"]) == 0 and number(steps[2]["logprob"]) == -math.inf
    assert number(steps[3]["raw_logprob"]) == 1000 and number(steps[3]["raw_prob"]) == math.inf
    candidates = [r for r in csv.DictReader(io.StringIO(candidates_csv(run))) if r["step"] == "3"]
    assert [number(r["raw_prob"]) for r in candidates] == [math.inf, 0.0]
    assert to_markdown(run) and to_html(run)
