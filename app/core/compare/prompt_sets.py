"""Prompt sets: a table of prompts read from CSV (a `prompt` column, else the first), JSON Lines (per line an
object with a `prompt` field, or a JSON string) or pasted text, for a run over each of them under one or more
settings, each named by a label (`settings_label`); the results of such a run (per prompt, settings and sample,
`compare`'s statistics) written as CSV, JSON Lines or Markdown, atomically; and `PromptSet`, the set and its last
results as a session keeps them (`prompt_set_json` / `read_prompt_set_json`, the session file's field).
Bad input raises a `SettingsError` whose one line names the file, the line and what is wrong. Runs nothing.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.files import is_a, json_number, parse_json, read_field, read_number, whole, write_atomic, write_lines
from app.core.settings import FIELDS, SamplerSettings, SettingsError

if TYPE_CHECKING:
    from app.core.compare.statistics import SampleStats

MAX_PROMPTS = 1000
MAX_SET_BYTES = 64 << 20  # a prompt set's file: more is refused before it is read (a device, a runaway file)


def read_prompt_set(path: str | Path) -> tuple[str, ...]:
    """The prompts of a `.csv` file, or of a JSON Lines file (any other name), in file order."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            data = f.read(MAX_SET_BYTES + 1)
        text = data.decode("utf-8-sig")  # a byte-order mark (Excel's "CSV UTF-8" writes one) is not the header's
    except OSError as e:
        raise SettingsError(f"cannot read the prompt set: {e.strerror}: {p}") from None
    except UnicodeDecodeError as e:
        raise SettingsError(f"{p} is not UTF-8 text (byte {e.start}): save it as UTF-8") from None
    if len(data) > MAX_SET_BYTES:
        raise SettingsError(f"{p.name}: more than {MAX_SET_BYTES >> 20} MiB; a set holds at most {MAX_PROMPTS} prompts")
    prompts = _from_csv(text, p.name) if p.suffix.lower() == ".csv" else _from_jsonl(text, p.name)
    if not prompts:
        raise SettingsError(f"{p.name}: no prompt in it")
    if len(prompts) > MAX_PROMPTS:
        raise SettingsError(f"{p.name}: {len(prompts)} prompts; a set holds at most {MAX_PROMPTS}")
    return tuple(prompts)


def _from_csv(text: str, name: str) -> list[str]:
    try:
        rows = _csv_rows(text)
    except csv.Error as e:
        raise SettingsError(f"{name}: not CSV ({e})") from None
    if not rows:
        return []
    header = [h.strip().lower() for h in rows[0]]
    col = header.index("prompt") if "prompt" in header else 0
    body = rows[1:] if "prompt" in header else rows
    start = 2 if "prompt" in header else 1
    out = []
    for i, row in enumerate(body, start):
        if not any(cell.strip() for cell in row):
            continue
        if col >= len(row) or not row[col]:
            raise SettingsError(f"{name}, row {i}: no prompt in column {col + 1}")
        out.append(row[col])
    return out


def _csv_rows(text: str) -> list[list[str]]:
    """The rows of `text`, a field as long as the text itself allowed (csv's own limit is 128 KiB: a long prompt
    would fail; whether it fits a model's context is the run's to say)."""
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, len(text) + 1))
    try:
        return list(csv.reader(io.StringIO(text)))
    finally:
        csv.field_size_limit(limit)


def _from_jsonl(text: str, name: str) -> list[str]:
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = parse_json(line)  # (nested too deeply: a ValueError too)
        except ValueError as e:
            raise SettingsError(f"{name}, line {i}: not JSON ({getattr(e, 'msg', e)})") from None
        prompt = value.get("prompt") if isinstance(value, dict) else value
        if not isinstance(prompt, str) or not prompt:
            raise SettingsError(f"{name}, line {i}: expected a text or an object with a \"prompt\" text")
        out.append(prompt)
    return out


def parse_pasted(text: str) -> tuple[str, ...]:
    """Pasted prompts: blocks separated by blank lines where there is a blank line between two texts, else one
    prompt per line; surrounding blank space is dropped. Raises SettingsError when there is no prompt."""
    text = text.replace("\r\n", "\n").strip()
    if re.search(r"\S\n[ \t]*\n", text):
        prompts = [b.strip() for b in re.split(r"\n[ \t]*\n", text)]
    else:
        prompts = [line.strip() for line in text.split("\n")]
    prompts = [p for p in prompts if p]
    if not prompts:
        raise SettingsError("nothing to add: paste prompts one per line, or blocks separated by a blank line")
    return tuple(prompts)


def write_prompt_set(path: str | os.PathLike, prompts: Sequence[str]) -> None:
    """The set as JSON Lines (`{"prompt": ...}` a line), written atomically; `read_prompt_set` reads it back."""
    write_lines(path, (json.dumps({"prompt": p}, ensure_ascii=False) for p in prompts))


# results ------------------------------------------------------------------------------------------------------

# labels ---------------------------------------------------------------------------------------------------------

SHORT_NAMES = {"temperature": "T", "top_k": "top-k", "top_p": "top-p", "min_p": "min-p"}
UNLABELLED = ("max_tokens",)  # how long a run may be is not what tells two settings apart


def settings_label(s: SamplerSettings, names: Sequence[str]) -> str:
    """`names`' values in `s`, short: `T=0.7, top-p=0.9` (other names with dashes: `repetition-penalty=1.1`)."""
    return ", ".join(f"{SHORT_NAMES.get(n, n.replace('_', '-'))}={_g(getattr(s, n))}" for n in names)


def label_names(settings: Sequence[SamplerSettings]) -> tuple[str, ...]:
    """The settings a label shows: those whose values differ among `settings` (the seed included); where none
    differ, the temperature and every setting away from its default (the filters that are on)."""
    names = [f.name for f in FIELDS if f.name not in UNLABELLED] + ["seed"]
    differ = tuple(n for n in names if len({getattr(s, n) for s in settings}) > 1)
    if differ or not settings:
        return differ
    return ("temperature", *(f.name for f in FIELDS if f.name not in (*UNLABELLED, "temperature")
                             and getattr(settings[0], f.name) != f.default))


# results ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PromptResult:
    """One sample of one prompt of the set under one settings: the prompt's place in the set, its text, the
    settings' label, and the sample's statistics (`compare`'s)."""

    index: int  # the prompt's row in the set, from 0
    prompt: str
    label: str  # the settings it ran under, named (`settings_label`; "A: T=0.7" for a side-by-side column)
    sample: SampleStats


RESULT_COLUMNS = ("prompt_index", "prompt", "settings", "sample", "seed", "text", "tokens", "mean_logprob",
                  "perplexity", "finish_reason")


def result_record(r: PromptResult) -> dict[str, Any]:
    """A result as the flat record every writer writes (`RESULT_COLUMNS`; a statistic not measured: None)."""
    s = r.sample
    return {"prompt_index": r.index, "prompt": r.prompt, "settings": r.label, "sample": s.sequence, "seed": s.seed,
            "text": s.text, "tokens": s.length, "mean_logprob": s.mean_logprob, "perplexity": s.perplexity,
            "finish_reason": s.finish_reason}


def results_csv(results: Sequence[PromptResult]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(RESULT_COLUMNS)
    for r in results:
        w.writerow(["" if v is None else v for v in result_record(r).values()])
    return out.getvalue()


def results_jsonl(results: Sequence[PromptResult]) -> str:
    """One JSON object a line; an infinite perplexity is written as null (JSON has no infinity)."""
    return "".join(json.dumps({k: _finite(v) for k, v in result_record(r).items()}, ensure_ascii=False) + "\n"
                   for r in results)


def results_markdown(results: Sequence[PromptResult]) -> str:
    """A Markdown table; a cell's pipes, backslashes, `&`, `<` and line breaks escaped (`markdown_cell`)."""
    lines = ["| " + " | ".join(RESULT_COLUMNS) + " |", "|" + "---|" * len(RESULT_COLUMNS)]
    for r in results:
        lines.append("| " + " | ".join(markdown_cell(v) for v in result_record(r).values()) + " |")
    return "\n".join(lines) + "\n"


def markdown_cell(value: Any) -> str:
    """A value as one table cell: None empty, numbers as Python writes them, text escaped so that it stays one cell
    of one row and reads back as written (a line break is `<br>`, a carriage return `&#13;`, a space at either end
    `&#32;`, which a table would trim)."""
    if value is None:
        return ""
    text = str(value)
    for a, b in (("\\", "\\\\"), ("|", "\\|"), ("&", "&amp;"), ("<", "&lt;"), ("\r", "&#13;"), ("\n", "<br>")):
        text = text.replace(a, b)
    return re.sub(r"^ | $", "&#32;", text)


WRITERS = {"csv": results_csv, "jsonl": results_jsonl, "md": results_markdown}


def export_results(path: str | os.PathLike, results: Sequence[PromptResult], kind: str | None = None) -> None:
    """Write the results atomically as `kind` ("csv", "jsonl" or "md"; None: from the file's suffix, else CSV)."""
    kind = kind or Path(path).suffix.lower().lstrip(".")
    write_atomic(path, WRITERS.get(kind, results_csv)(results))


def _finite(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _g(v: Any) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) else str(v)


# the set as a session keeps it --------------------------------------------------------------------------------

@dataclass(frozen=True)
class PromptSet:
    """A session's prompt set: its prompts, and the results of its last run (prompt by prompt, settings by
    settings, sample by sample; a run stopped part way keeps what finished)."""

    prompts: tuple[str, ...] = ()
    results: tuple[PromptResult, ...] = ()


SAMPLE_FIELDS = ("sequence", "run_id", "seed", "tokens", "text", "length", "mean_logprob", "perplexity",
                 "finish_reason")


def prompt_set_json(ps: PromptSet) -> dict[str, Any]:
    """The set as the session file's `prompt_set` object (standard JSON: no NaN or infinity)."""
    return {"prompts": list(ps.prompts),
            "results": [{"index": r.index, "prompt": r.prompt, "label": r.label,
                         "sample": {k: json_number(getattr(r.sample, k)) for k in SAMPLE_FIELDS} | {
                             "tokens": list(r.sample.tokens)}} for r in ps.results]}


def read_prompt_set_json(obj: Any) -> PromptSet:
    """The set `prompt_set_json` wrote; anything else raises ValueError naming the field and what it must be."""
    if not isinstance(obj, dict):
        raise ValueError("prompt_set must be an object (its prompts and results)")
    prompts = read_field(obj, "prompts", lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v),
                         "a list of texts", where="prompt_set.")
    results = read_field(obj, "results", is_a(list), "a list", where="prompt_set.")
    return PromptSet(tuple(prompts), tuple(_result(r, f"prompt_set.results[{i}].") for i, r in enumerate(results)))


def _result(obj: Any, where: str) -> PromptResult:
    if not isinstance(obj, dict):
        raise ValueError(f"{where[:-1]} must be an object")
    sample = read_field(obj, "sample", is_a(dict), "an object", where=where)
    return PromptResult(read_field(obj, "index", lambda v: whole(v) and v >= 0, "a count", where=where),
                        read_field(obj, "prompt", is_a(str), "text", where=where),
                        read_field(obj, "label", is_a(str), "text", where=where), _sample(sample, where + "sample."))


def _sample(obj: dict[str, Any], where: str) -> SampleStats:
    from app.core.compare.statistics import (
        SampleStats,  # (numpy's, through the traces: not before the window's first paint)
    )

    def count(key: str) -> int:
        return read_field(obj, key, lambda v: whole(v) and v >= 0, "a count", where=where)

    tokens = read_field(obj, "tokens", lambda v: isinstance(v, list) and all(whole(t) for t in v),
                        "a list of whole numbers", where=where)
    return SampleStats(sequence=count("sequence"), run_id=count("run_id"), seed=count("seed"), tokens=tuple(tokens),
                       text=read_field(obj, "text", is_a(str), "text", where=where), length=count("length"),
                       mean_logprob=_number(obj, "mean_logprob", where), perplexity=_number(obj, "perplexity", where),
                       finish_reason=read_field(obj, "finish_reason", is_a(str), "text", null=True, where=where))


def _number(obj: dict[str, Any], key: str, where: str) -> float | None:
    """A number, null, or the string of a non-finite one (as `json_number` writes it)."""
    v = read_field(obj, key, lambda v: read_number(v) is not None, "a number", null=True, where=where)
    return None if v is None else read_number(v)

