"""The trace file: a run's trace as JSON Lines (a header, one line per step, a footer), written atomically and
read back equal, bit for bit. JSON has no NaN or infinity: every number that is not finite (a log-probability of
-inf, a NaN "not observed", a time) is written as the string "NaN", "Infinity" or "-Infinity". Every field is
checked as it is read: a file from a newer format version, or a damaged one (bad JSON, a field missing or of the
wrong type, arrays whose shapes disagree), raises `TraceFormatError` naming the file, the line and the field;
nothing is half-loaded. Works on a run's parts (its HEADER and FOOTER fields, its steps): `RunTrace.save` /
`RunTrace.load` (trace.py) are the way in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, fields, replace
from typing import Any

import numpy as np

from app.core.files import brief, check_header, is_a, json_number, parse_json, read_field, read_number, whole
from app.core.metrics import Metrics
from app.core.record.live_lens import read_live_lens
from app.core.record.record import SCALARS, GrammarStep, Sample, StepTrace, json_floats
from app.core.record.spans import KINDS as SPAN_KINDS
from app.core.record.steer_record import read_steer
from app.core.settings import read_settings
from app.core.stage_inputs import CONSTRAINT_PLACES
from app.core.stage_table import RECORD_NAMES

FORMAT = "logitlab-trace"
VERSION = 1
STAGES = RECORD_NAMES  # the names a record's stages have (dynamic temperature's included)
MAX_ID = 2**31 - 1  # token ids are int32
HEADER = ("run_id", "parent", "model", "settings", "seed", "prompt_ids", "prompt_text", "branch")  # a run's fields
FOOTER = ("finish_reason", "finish_message", "metrics")


class TraceFormatError(ValueError):
    """A trace file this version cannot read (newer, damaged or not a trace); the message names file and line."""


def encode(header: dict[str, Any], steps: Sequence[StepTrace], footer: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The file's lines as JSON objects, of a run with these HEADER and FOOTER fields and steps."""
    parent, metrics, message = header["parent"], footer["metrics"], footer["finish_message"]
    yield {"format": FORMAT, "version": VERSION, "run_id": header["run_id"],
           "parent": list(parent) if parent is not None else None, "model": header["model"],
           "settings": header["settings"].to_dict(), "seed": header["seed"], "prompt_ids": list(header["prompt_ids"]),
           "prompt_text": header["prompt_text"], "branch": header["branch"]}
    for st in steps:
        yield step_json(st)
    yield {"end": True, "steps": len(steps), "finish_reason": footer["finish_reason"],
           "metrics": {k: json_number(v) for k, v in asdict(metrics).items()} if metrics is not None else None,
           **({"finish_message": message} if message else {})}


def decode(lines: Iterable[str | bytes], name: str = "<trace>") -> tuple[dict[str, Any], list[StepTrace],
                                                                        dict[str, Any]]:
    """The HEADER fields, steps and FOOTER fields of the trace in `lines` (a file's lines, UTF-8 bytes or text);
    `name` names it in error messages."""
    header: dict[str, Any] | None = None
    steps: list[StepTrace] = []
    footer: dict[str, Any] | None = None
    texts: dict[str, str] = {}  # one string object per distinct text, as a live run holds them
    number = 0
    for number, line in enumerate(lines, 1):
        try:
            if footer is not None:
                raise TraceFormatError("text after the trace's last line")
            obj = parse_json(line)
            if not isinstance(obj, dict):
                raise ValueError(f"not a JSON object: {brief(obj)}")
            if header is None:
                header = _header(obj)
            elif obj.get("end") is True:
                footer = _footer(len(steps), obj)
            else:
                steps.append(read_step(obj, len(steps), texts))
        except TraceFormatError as e:
            raise TraceFormatError(f"{name}:{number}: {e}") from None
        except (ValueError, TypeError) as e:  # a field's check (or the record's own) says which and why
            raise TraceFormatError(f"{name}:{number}: damaged trace line ({e})") from None
    if header is None:
        raise TraceFormatError(f"{name}:1: empty file, not a Logit Lab trace")
    if footer is None:
        raise TraceFormatError(f"{name}:{number + 1}: the file ends before the trace's last line (truncated)")
    return header, steps, footer


def _header(obj: dict[str, Any]) -> dict[str, Any]:
    check_header(obj, FORMAT, VERSION, "trace", TraceFormatError)
    parent = read_field(obj, "parent", lambda v: _list_of(v, whole) and len(v) == 2, "[run id, step]", null=True)
    model = read_field(obj, "model", _model_entry, "an object of text", null=True)
    return {"prompt_ids": read_field(obj, "prompt_ids", lambda v: _list_of(v, _id), "a list of token ids"),
            "settings": read_settings(read_field(obj, "settings", is_a(dict), "an object")),
            "seed": read_field(obj, "seed", whole, "a whole number"),
            "run_id": read_field(obj, "run_id", whole, "a whole number"),
            "parent": tuple(parent) if parent is not None else None, "model": model,
            "prompt_text": read_field(obj, "prompt_text", is_a(str), "text", default=""),
            "branch": read_field(obj, "branch", is_a(str), "text", null=True, default="") or ""}


def _footer(held: int, obj: dict[str, Any]) -> dict[str, Any]:
    """The footer's finish reason and metrics, once its step count is checked against the `held` steps."""
    steps = read_field(obj, "steps", whole, "a whole number")
    if steps != held:
        raise TraceFormatError(f"the footer counts {steps} steps, the file holds {held}")
    m = read_field(obj, "metrics", is_a(dict), "an object", null=True)
    return {"finish_reason": read_field(obj, "finish_reason", is_a(str), "text", null=True),
            # absent: files of before it was written, and runs without error
            "finish_message": read_field(obj, "finish_message", is_a(str), "text", default=""),
            "metrics": None if m is None else Metrics(**{f.name: _metric(m, f.name, f.type) for f in fields(Metrics)
                                                         if f.name in m})}


def _metric(m: dict[str, Any], key: str, kind: str) -> float | None:
    """A metric of the type its field is annotated with ("int", "float | None", ...)."""
    null = "None" in str(kind)
    if str(kind).startswith("int"):
        return read_field(m, key, whole, "a whole number", null=null, where="metrics.")
    return _number(m, key, null=null, where="metrics.")


def step_json(st: StepTrace) -> dict[str, Any]:
    """A step's line (a beam hypothesis' steps are kept in a session file as these too)."""
    s = st.sample
    line = {"step": st.step, "token": s.token, "text": st.text, "top_texts": list(st.top_texts),
            "seconds": json_number(st.seconds), "rank": s.rank, "u": json_number(s.u), "stages": list(s.stage_names),
            "reported": s.reported, **dict(zip(SCALARS, json_floats(s.values[: len(SCALARS)]), strict=True)),
            "top_ids": s.top_ids.tolist(), "probs": [json_floats(row) for row in s.probs],
            "kept": s.kept.astype(int).tolist()}
    if not s.is_partial:
        line.update(top_logits=json_floats(s.top_logits), thresholds=json_floats(s.thresholds),
                    kept_counts=s.kept_counts.tolist(),
                    top_p_cumulative=None if s.top_p_cumulative is None else json_floats(s.top_p_cumulative))
    if s.grammar is not None:  # (absent: no constraint ran, and every file of before constraints)
        line["grammar"] = {k: json_number(v) if isinstance(v, float) else v for k, v in s.grammar.to_dict().items()}
    if s.steer is not None:  # (absent: not steered, and every file of before steering)
        line["steer"] = s.steer.to_json()
    if s.lens is not None:  # (absent: the live lens was off, and every file of before it)
        line["lens"] = s.lens.to_json()
    if st.span:  # (absent: a model without reasoning markers, and files of before spans)
        line["span"] = st.span
    if st.forced:
        line["forced"] = st.forced
    return line


def read_step(obj: dict[str, Any], index: int, texts: dict[str, str]) -> StepTrace:
    """Step `index` from its line (`step_json`); `texts` keeps one string object per distinct candidate text."""
    with np.errstate(over="ignore"):  # a number past float32 is read as infinity
        return _step_from(obj, index, texts)


def _step_from(obj: dict[str, Any], index: int, texts: dict[str, str]) -> StepTrace:
    step = read_field(obj, "step", whole, "a whole number")
    if step != index:
        raise TraceFormatError(f"step {step} where step {index} was expected")
    token = read_field(obj, "token", lambda v: type(v) is int and abs(v) <= MAX_ID,
                       "a token id")  # negative: a token a server named only by its text
    reported = read_field(obj, "reported", lambda v: v in ("raw", "final"), '"raw" or "final"', null=True)
    scalars = {k: _number(obj, k) for k in SCALARS}
    top_ids, probs = _array(obj, "top_ids", 1, whole=True, low=-MAX_ID), _array(obj, "probs", 2)  # (see token)
    if reported is not None:
        rank = read_field(obj, "rank", whole, "a whole number", null=True)
        sample = Sample._reported(token, rank, top_ids.astype(np.int32), probs.astype(np.float32),
                                  scalars["prob"], scalars["raw_logprob"], reported)
    else:
        stages = read_field(obj, "stages", lambda v: _list_of(v, lambda x: isinstance(x, str) and x in STAGES),
                            f"a list of stage names ({', '.join(STAGES[:4])}, ...)")
        kept = (np.zeros((0, probs.shape[-1])) if not stages and obj.get("kept") == []  # a search's step: no stage
                else _array(obj, "kept", 2, whole=True))
        top_logits = _array(obj, "top_logits", 1)
        cumulative = read_field(obj, "top_p_cumulative", is_a(list), "a list", null=True)
        cumulative = None if cumulative is None else _array(obj, "top_p_cumulative", 1)
        n = kept.shape[1]
        if kept.shape[0] != len(stages) or not np.isin(kept, (0, 1)).all():
            raise ValueError(f"kept must be a row of 0 and 1 per stage ({len(stages)}), got {brief(obj['kept'])}")
        if len(top_logits) != len(top_ids) or n > len(top_ids):
            raise ValueError(f"top_ids ({len(top_ids)}) and top_logits ({len(top_logits)}) must be as long, and at "
                             f"least as long as a row of kept ({n})")
        if cumulative is not None and len(cumulative) != n:
            raise ValueError(f"top_p_cumulative holds {len(cumulative)} numbers for {n} candidates")
        sample = Sample.record(
            token=token, rank=read_field(obj, "rank", whole, "a whole number"), u=_number(obj, "u", null=True),
            stage_names=tuple(stages), top_ids=top_ids, top_logits=top_logits, probs=probs, kept=kept,
            thresholds=_array(obj, "thresholds", 1), kept_counts=_array(obj, "kept_counts", 1, whole=True),
            top_p_cumulative=cumulative, **scalars)
    if obj.get("grammar") is not None:
        sample = replace(sample, grammar=read_grammar(read_field(obj, "grammar", is_a(dict), "an object"),
                                                      len(sample.top_ids)))
    if obj.get("steer") is not None:
        sample = replace(sample, steer=read_steer(obj["steer"], sample.top_n))
    if obj.get("lens") is not None:
        sample = replace(sample, lens=read_live_lens(obj["lens"]))
    top_texts = read_field(obj, "top_texts", lambda v: _list_of(v, is_a(str)), "a list of text")
    if len(top_texts) != sample.top_n:
        raise ValueError(f"{len(top_texts)} candidate texts (top_texts) for {sample.top_n} candidates")
    return StepTrace(index, sample, read_field(obj, "text", is_a(str), "text"),
                     tuple(texts.setdefault(t, t) for t in top_texts), _number(obj, "seconds"),
                     read_field(obj, "span", lambda v: v in SPAN_KINDS, " or ".join(SPAN_KINDS), default=""),
                     read_field(obj, "forced", is_a(str), "text", default=""))


def read_grammar(obj: dict[str, Any], k: int) -> GrammarStep:
    """A step's grammar (`GrammarStep.to_dict`) over its `k` recorded candidates."""
    place = read_field(obj, "place", lambda v: v in CONSTRAINT_PLACES, " or ".join(CONSTRAINT_PLACES),
                       where="grammar.")
    token = lambda v: type(v) is int and 0 <= v <= MAX_ID
    ints = {key: read_field(obj, key, token, "a token id", where="grammar.") for key in ("favourite", "best")}
    bits = read_field(obj, "legal_top", lambda v: isinstance(v, str) and len(v) == 2 * ((k + 7) // 8)
                      and all(c in "0123456789abcdef" for c in v), f"hex of {k} bits", where="grammar.")
    return GrammarStep(place=place, legal=read_field(obj, "legal", whole, "a whole number", where="grammar."),
                       removed=_number(obj, "removed", null=True, where="grammar."),
                       margin=_number(obj, "margin", where="grammar."), **ints,
                       legal_top=np.unpackbits(np.frombuffer(bytes.fromhex(bits), np.uint8))[:k].astype(bool),
                       rejected=read_field(obj, "rejected", token, "a token id", null=True, default=None,
                                           where="grammar."))


def _id(v: Any) -> bool:
    return type(v) is int and 0 <= v <= MAX_ID


def _model_entry(v: Any) -> bool:
    """The model a run ran on: names as text; for a server, `sent` the request's sampling fields (an object)."""
    return isinstance(v, dict) and all(isinstance(x, dict) if k == "sent" else isinstance(x, str) for k, x in v.items())


def _list_of(v: Any, check: Callable[[Any], bool]) -> bool:
    return isinstance(v, list) and all(check(x) for x in v)


def _number(obj: dict[str, Any], key: str, null: bool = False, where: str = "") -> float | None:
    v = read_field(obj, key, lambda v: read_number(v) is not None, "a number", null=null, where=where)
    return None if v is None else read_number(v)


def _array(obj: dict[str, Any], key: str, ndim: int, whole: bool = False, low: int = 0) -> np.ndarray:
    """obj[key] as an array: a list (ndim 1) or a list of equally long lists (ndim 2) of numbers (`whole`: of
    whole numbers from `low` to MAX_ID, as int64; else float64, the strings of non-finite ones read as their values)."""
    v = read_field(obj, key, is_a(list), "a list")
    a = _numbers(v, ndim)
    if a is not None and whole:
        if a.size == 0:  # ([] reads as floats: a stage-less step's kept_counts)
            a = a.astype(np.int64)
        a = a if a.dtype.kind in "iu" and (a.size == 0 or (a.min() >= low and a.max() <= MAX_ID)) else None
    if a is None:
        shape = "a list" if ndim == 1 else "a list of equally long lists"
        raise ValueError(f"{key} must be {shape} of {'whole numbers' if whole else 'numbers'}, got {brief(v)}")
    return a


def _numbers(v: list, ndim: int) -> np.ndarray | None:
    try:
        a = np.array(v)
    except (ValueError, OverflowError):  # lists of different lengths, or nested past numpy's dimensions
        return None
    if a.ndim != ndim:
        return None
    if a.dtype.kind not in "iuf":  # strings stand for NaN and the infinities; anything else is damage
        flat = [read_number(x) for x in (v if ndim == 1 else (x for row in v for x in row))]
        if any(x is None for x in flat):
            return None
        a = np.array(flat, dtype=np.float64).reshape(a.shape)
    return a
