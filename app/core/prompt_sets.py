"""Prompt sets: a table of prompts read from CSV (a `prompt` column, else the first) or JSON Lines (per line an
object with a `prompt` field, or a JSON string), for a sweep run over each of them. Bad input raises a
`SettingsError` whose one line names the file, the line and what is wrong. Reads only; runs nothing.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from app.core.settings import SettingsError

MAX_PROMPTS = 1000


def read_prompt_set(path: str | Path) -> tuple[str, ...]:
    """The prompts of a `.csv` file, or of a JSON Lines file (any other name), in file order."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as e:
        raise SettingsError(f"cannot read the prompt set: {e.strerror}: {p}") from None
    except UnicodeDecodeError as e:
        raise SettingsError(f"{p} is not UTF-8 text (byte {e.start}): save it as UTF-8") from None
    prompts = _from_csv(text, p.name) if p.suffix.lower() == ".csv" else _from_jsonl(text, p.name)
    if not prompts:
        raise SettingsError(f"{p.name}: no prompt in it")
    if len(prompts) > MAX_PROMPTS:
        raise SettingsError(f"{p.name}: {len(prompts)} prompts; a set holds at most {MAX_PROMPTS}")
    return tuple(prompts)


def _from_csv(text: str, name: str) -> list[str]:
    rows = list(csv.reader(io.StringIO(text)))
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


def _from_jsonl(text: str, name: str) -> list[str]:
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as e:
            raise SettingsError(f"{name}, line {i}: not JSON ({e.msg})") from None
        prompt = value.get("prompt") if isinstance(value, dict) else value
        if not isinstance(prompt, str) or not prompt:
            raise SettingsError(f"{name}, line {i}: expected a text or an object with a \"prompt\" text")
        out.append(prompt)
    return out
