"""Comparing samples: the statistics of N samples of one prompt, and the grid of a settings sweep.

One definition of every statistic, read by `logitlab generate --stats`, `logitlab sweep` and the window's
"Sample ×N" view alike: per sample its length, mean log-probability and perplexity; over the set distinct-1/2,
unique completions, the spread of mean log-probabilities, per-position agreement with the most common
continuation, a regular expression's match rate and the valid-JSON rate. It reads recorded runs (`RunTrace`)
and computes from them only; it runs no model and knows nothing of Qt.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from app.core.files import parse_json, typed
from app.core.record.trace import RunTrace, StepTrace
from app.core.settings import FIELD_BY_NAME, SamplerSettings, SettingsError

MAX_AXIS = 6  # values per sweep axis (a 6 × 6 grid at most)
STATISTICS = ("mean_logprob", "perplexity", "distinct_1", "distinct_2", "unique", "mean_length", "match_rate",
              "json_rate")  # what a sweep cell can be coloured by (its `SetStats` field)


@dataclass(frozen=True)
class SampleStats:
    """One sample: its tokens and text, and the model's log-probabilities of the tokens it drew."""

    sequence: int
    run_id: int
    seed: int
    tokens: tuple[int, ...]
    text: str
    length: int  # generated tokens
    mean_logprob: float | None  # mean over its steps of `step_logprob`; None: no step, or none reported
    perplexity: float | None  # exp(-mean_logprob)
    finish_reason: str | None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["tokens"] = list(self.tokens)
        return d


@dataclass(frozen=True)
class SetStats:
    """The set of N samples: how diverse they are, and how likely the model found them."""

    n: int
    distinct_1: float  # distinct tokens ÷ all tokens, over every sample (0 when there are none)
    distinct_2: float  # distinct token bigrams ÷ all bigrams (within each sample), over every sample
    unique: int  # distinct completions (token sequences)
    mean_logprob: float | None  # the mean of the samples' mean log-probabilities
    perplexity: float | None  # exp(-mean_logprob)
    logprob_spread: float | None  # population standard deviation of the samples' mean log-probabilities
    logprob_min: float | None
    logprob_max: float | None
    mean_length: float
    agreement: tuple[int, ...]  # per position k: samples whose first k+1 tokens are the most common such prefix
    pattern: str | None  # the regular expression of `match_rate`, if one was given
    match_rate: float | None  # share of samples whose text it matches (re.search); None without a pattern
    json_rate: float  # share of samples whose text (stripped) is one valid JSON value

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["agreement"] = list(self.agreement)
        return d


@dataclass(frozen=True)
class Comparison:
    samples: tuple[SampleStats, ...]
    stats: SetStats


def step_logprob(st: StepTrace) -> float | None:
    """The model's log-probability of the drawn token (raw, before the sampler); where a server reported only the
    distribution it sampled from, that one's; None where neither was reported."""
    s = st.sample
    if s.raw_logprob is not None:
        return s.raw_logprob
    p = s.prob
    return None if p is None else (math.log(p) if p > 0 else -math.inf)


def sample_stats(trace: RunTrace, sequence: int = 0) -> SampleStats:
    lps = [lp for lp in (step_logprob(st) for st in trace.steps) if lp is not None]
    mean = math.fsum(lps) / len(lps) if lps else None
    return SampleStats(sequence=sequence, run_id=trace.run_id, seed=trace.seed, tokens=tuple(trace.token_ids),
                       text=trace.text, length=len(trace.steps), mean_logprob=mean,
                       perplexity=None if mean is None else _exp(-mean), finish_reason=trace.finish_reason)


def compare(traces: Sequence[RunTrace], pattern: str | None = None) -> Comparison:
    """Each sample's statistics and the set's, for samples in sample order; `pattern` a regular expression."""
    samples = tuple(sample_stats(t, i) for i, t in enumerate(traces))
    return Comparison(samples, set_stats(samples, pattern))


def set_stats(samples: Sequence[SampleStats], pattern: str | None = None) -> SetStats:
    regex = compile_pattern(pattern) if pattern else None
    seqs = [s.tokens for s in samples]
    lps = [s.mean_logprob for s in samples if s.mean_logprob is not None]
    mean = statistics.fmean(lps) if lps else None
    n = len(samples)
    return SetStats(
        n=n, distinct_1=distinct(seqs, 1), distinct_2=distinct(seqs, 2), unique=len(set(seqs)), mean_logprob=mean,
        perplexity=None if mean is None else _exp(-mean), logprob_spread=statistics.pstdev(lps) if lps else None,
        logprob_min=min(lps) if lps else None, logprob_max=max(lps) if lps else None,
        mean_length=statistics.fmean([s.length for s in samples]) if n else 0.0, agreement=agreement(seqs),
        pattern=pattern or None, match_rate=_rate(samples, lambda t: regex.search(t) is not None) if regex else None,
        json_rate=_rate(samples, is_json),
    )


def distinct(seqs: Sequence[Sequence[int]], n: int) -> float:
    """Distinct-n: distinct n-grams ÷ all n-grams, counted within each sequence and pooled over all of them."""
    grams = [tuple(s[i:i + n]) for s in seqs for i in range(len(s) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def agreement(seqs: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """Per position k (up to the longest sequence): how many sequences share the most common prefix of length k+1.
    Never grows with k; a sequence shorter than k+1 agrees with no prefix of that length."""
    out = []
    for k in range(max((len(s) for s in seqs), default=0)):
        counts = Counter(tuple(s[: k + 1]) for s in seqs if len(s) > k)
        out.append(max(counts.values()))
    return tuple(out)


def is_json(text: str) -> bool:
    """Whether `text`, without surrounding whitespace, is exactly one JSON value."""
    try:
        parse_json(text.strip())  # (a sample nested too deeply for Python to read: not JSON to us either)
    except ValueError:
        return False
    return True


def compile_pattern(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise SettingsError(f"not a regular expression: {typed(pattern)} ({e})") from None
    except (RecursionError, OverflowError):  # groups nested past Python's stack, a pattern past re's size
        raise SettingsError(f"a regular expression too deeply nested or too large: {typed(pattern)}") from None


def _rate(samples: Sequence[SampleStats], test: Any) -> float:
    return sum(bool(test(s.text)) for s in samples) / len(samples) if samples else 0.0


def _exp(x: float) -> float:
    return math.exp(x) if x < 700 else math.inf


# the sweep grid ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Axis:
    """One swept setting (a `FIELDS` name) and its values, in the order given."""

    name: str
    values: tuple[float, ...]


@dataclass(frozen=True)
class Cell:
    """One cell of a sweep: its place in the grid (row on the first axis, column on the second) and settings."""

    row: int
    col: int
    values: dict[str, float]
    settings: SamplerSettings


def parse_axis(text: str) -> Axis:
    """`name=v1,v2,...` (as `--grid` takes it) as an Axis; a SettingsError with one line where it is not one."""
    name, sep, rest = text.partition("=")
    name = name.strip().replace("-", "_")
    field = FIELD_BY_NAME.get(name)
    if not sep or field is None:
        known = ", ".join(FIELD_BY_NAME)
        raise SettingsError(f"a grid axis is NAME=V1,V2,... with NAME one of {known}; got {typed(text)}")
    try:
        values = tuple((int if field.integer else float)(v) for v in rest.split(","))
    except ValueError:
        kind = "whole numbers" if field.integer else "numbers"
        raise SettingsError(f"{name}: the grid's values must be {kind}, comma-separated; got {typed(rest)}") from None
    if not 1 <= len(values) <= MAX_AXIS or len(set(values)) != len(values):
        raise SettingsError(f"{name}: give 1 to {MAX_AXIS} different values, got {len(values)}: {typed(rest)}")
    return Axis(name, values)


def make_grid(base: SamplerSettings, axes: Sequence[Axis]) -> list[Cell]:
    """The sweep's cells, row by row: `base` with each combination of the axes' values (one or two axes)."""
    if not 1 <= len(axes) <= 2 or len({a.name for a in axes}) != len(axes):
        raise SettingsError("a sweep takes one or two grid axes, each a different setting")
    rows, cols = axes[0], axes[1] if len(axes) == 2 else Axis("", (0.0,))
    cells = []
    for r, a in enumerate(rows.values):
        for c, b in enumerate(cols.values):
            values = {rows.name: a, **({cols.name: b} if cols.name else {})}
            cells.append(Cell(r, c, values, base.with_(**values)))  # SettingsError names a value out of range
    return cells


def sweep_header(axes: Sequence[str]) -> list[str]:
    """The columns of a sweep's table (CSV): the prompt's index, the swept settings, then the statistics."""
    return ["prompt", *axes, *STATISTICS, "logprob_spread"]


def sweep_row(prompt: int, cell: Cell, stats: SetStats, axes: Sequence[str]) -> list[Any]:
    """One cell's row under `sweep_header` (a statistic that was not measured: empty)."""
    d = stats.to_json()
    return [prompt, *(cell.values[a] for a in axes), *("" if d[k] is None else d[k] for k in sweep_header(())[1:])]
