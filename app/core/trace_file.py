"""The trace file: a run's trace as JSON Lines (a header, one line per step, a footer), written atomically and
read back equal, bit for bit. A file from a newer format version, or damaged, raises `TraceFormatError` naming the
file and line; nothing is half-loaded. `RunTrace.save` / `RunTrace.load` are the way in.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from app.core.files import check_header, write_lines
from app.core.metrics import Metrics
from app.core.settings import SamplerSettings
from app.core.trace import SCALARS, RunTrace, Sample, StepTrace, _floats

FORMAT = "logitlab-trace"
VERSION = 1


class TraceFormatError(ValueError):
    """A trace file this version cannot read (newer, damaged or not a trace); the message names file and line."""


def save(run: RunTrace, path: str | os.PathLike) -> None:
    """Write the trace as JSON Lines (a header, one line per step, a footer), atomically: a reader sees the
    old file or the whole new one, never half of it."""
    write_lines(path, (json.dumps(obj, ensure_ascii=False, allow_nan=False) for obj in to_lines(run)))

def load(path: str | os.PathLike) -> RunTrace:
    """Read a file `save` wrote; a newer, damaged or truncated file raises `TraceFormatError`."""
    path = Path(path)
    with path.open("rb") as f:
        return from_lines(f, str(path))

def to_lines(run: RunTrace) -> Iterator[dict[str, Any]]:
    yield {"format": FORMAT, "version": VERSION, "run_id": run.run_id,
           "parent": list(run.parent) if run.parent is not None else None, "model": run.model,
           "settings": run.settings.to_dict(), "seed": run.seed, "prompt_ids": list(run.prompt_ids),
           "prompt_text": run.prompt_text, "branch": run.branch}
    for st in run.steps:
        yield _step_line(st)
    yield {"end": True, "steps": len(run.steps), "finish_reason": run.finish_reason,
           "metrics": asdict(run.metrics) if run.metrics is not None else None,
           **({"finish_message": run.finish_message} if run.finish_message else {})}

def from_lines(lines: Iterable[str | bytes], name: str = "<trace>") -> RunTrace:
    """The trace in `lines` (a file's lines, UTF-8 bytes or text); `name` names it in error messages."""
    run: RunTrace | None = None
    footer: dict[str, Any] | None = None
    texts: dict[str, str] = {}  # one string object per distinct text, as a live run holds them
    number = 0
    for number, line in enumerate(lines, 1):
        try:
            if footer is not None:
                raise TraceFormatError("text after the trace's last line")
            obj = json.loads(line.decode("utf-8") if isinstance(line, bytes) else line)
            if not isinstance(obj, dict):
                raise TypeError("not a JSON object")
            if run is None:
                run = _header(obj)
            elif obj.get("end") is True:
                footer = _footer(run, obj)
            else:
                run.steps.append(_step_from(obj, len(run.steps), texts))
        except TraceFormatError as e:
            raise TraceFormatError(f"{name}:{number}: {e}") from None
        except (ValueError, TypeError, KeyError, IndexError) as e:
            raise TraceFormatError(f"{name}:{number}: damaged trace line ({type(e).__name__}: {e})") from None
    if run is None:
        raise TraceFormatError(f"{name}:1: empty file, not a Logit Lab trace")
    if footer is None:
        raise TraceFormatError(f"{name}:{number + 1}: the file ends before the trace's last line (truncated)")
    run.finish_reason, run.metrics = footer["finish_reason"], footer["metrics"]
    run.finish_message = footer["finish_message"]
    return run


def _header(obj: dict[str, Any]) -> RunTrace:
    check_header(obj, FORMAT, VERSION, "trace", TraceFormatError)
    parent = obj["parent"]
    return RunTrace(prompt_ids=[int(i) for i in obj["prompt_ids"]],
                    settings=SamplerSettings.from_dict(obj["settings"]), seed=int(obj["seed"]),
                    run_id=int(obj["run_id"]), parent=(int(parent[0]), int(parent[1])) if parent is not None else None,
                    model=dict(obj["model"]) if obj["model"] is not None else None,
                    prompt_text=str(obj.get("prompt_text", "")), branch=str(obj.get("branch") or ""))


def _footer(run: RunTrace, obj: dict[str, Any]) -> dict[str, Any]:
    """The footer's finish reason and metrics, once its step count is checked."""
    if obj["steps"] != len(run.steps):
        raise TraceFormatError(f"the footer counts {obj['steps']} steps, the file holds {len(run.steps)}")
    m = obj["metrics"]
    known = {f.name for f in fields(Metrics)}
    reason = obj["finish_reason"]
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"finish_reason must be text, got {reason!r}")
    message = obj.get("finish_message", "")  # (absent: files of before it was written, and runs without error)
    if not isinstance(message, str):
        raise TypeError(f"finish_message must be text, got {message!r}")
    return {"finish_reason": reason, "finish_message": message,
            "metrics": Metrics(**{k: v for k, v in m.items() if k in known}) if m is not None else None}


def _step_line(st: StepTrace) -> dict[str, Any]:
    s = st.sample
    line = {"step": st.step, "token": s.token, "text": st.text, "top_texts": list(st.top_texts),
            "seconds": st.seconds, "rank": s.rank, "u": s.u, "stages": list(s.stage_names), "reported": s.reported,
            **dict(zip(SCALARS, _floats(s.values[: len(SCALARS)]), strict=True)), "top_ids": s.top_ids.tolist(),
            "probs": [_floats(row) for row in s.probs], "kept": s.kept.astype(int).tolist()}
    if not s.is_partial:
        line.update(top_logits=_floats(s.top_logits), thresholds=_floats(s.thresholds),
                    kept_counts=s.kept_counts.tolist(),
                    top_p_cumulative=None if s.top_p_cumulative is None else _floats(s.top_p_cumulative))
    return line


def _step_from(obj: dict[str, Any], index: int, texts: dict[str, str]) -> StepTrace:
    if obj["step"] != index:
        raise TraceFormatError(f"step {obj['step']} where step {index} was expected")
    scalars = dict(zip(SCALARS, _array([obj[k] for k in SCALARS], np.float32).tolist(), strict=True))
    kept = np.array(obj["kept"], dtype=bool)
    reported = obj["reported"]
    if reported is not None:
        sample = Sample._reported(obj["token"], obj["rank"], _array(obj["top_ids"], np.int32),
                                  _array(obj["probs"], np.float32), scalars["prob"], scalars["raw_logprob"], reported)
    else:
        cumulative = obj["top_p_cumulative"]
        sample = Sample.record(
            token=obj["token"], rank=obj["rank"], u=obj["u"], stage_names=tuple(obj["stages"]),
            top_ids=_array(obj["top_ids"], np.int32), top_logits=_array(obj["top_logits"], np.float32),
            probs=_array(obj["probs"], np.float32), kept=kept, thresholds=_array(obj["thresholds"], np.float32),
            kept_counts=_array(obj["kept_counts"], np.float32),
            top_p_cumulative=None if cumulative is None else _array(cumulative, np.float32), **scalars)
    top_texts = tuple(texts.setdefault(t, t) for t in obj["top_texts"])
    if len(top_texts) != sample.top_n:
        raise ValueError(f"{len(top_texts)} candidate texts for {sample.top_n} candidates")
    return StepTrace(index, sample, str(obj["text"]), top_texts, float(obj["seconds"]))


# JSON has no NaN or infinity: those float32 values are written as these strings (every other float32 value
# round-trips exactly through a JSON number: Python writes the shortest repr of the same float64).
_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _array(values: Any, dtype: type) -> np.ndarray:
    a = np.array(values)
    if a.dtype.kind not in "iuf":  # strings stand for NaN and the infinities; anything else is damage
        a = np.array(_nonfinite(values), dtype=np.float64)
    return a.astype(dtype)


def _nonfinite(v: Any) -> Any:
    if isinstance(v, list):
        return [_nonfinite(x) for x in v]
    if isinstance(v, str):
        return _NONFINITE[v]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"expected numbers, got {v!r}")
    return v
