"""Sampler settings: one frozen record, its allowed ranges, and the stage order.

`FIELDS` is the single table of every numeric setting (range, default, meaning): validation, the command
line and the window's sampler panel all read it, so a range is written down once. Edge values are ours and
documented here: temperature 0 is greedy; top_k 0 (or ≥ vocabulary) is off; top_p 1 is off and top_p 0 keeps
one token; min_p 0 is off; penalties 1 (repetition) and 0 (frequency, presence) are off.

Stop strings are typed with backslash escapes on the command line and in the window alike (`read_escapes`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields, replace
from enum import Enum
from typing import Any

from app.core.files import read_field


class StageOrder(str, Enum):
    """Where temperature sits relative to the filters (top-k, top-p, min-p)."""

    TEMPERATURE_FIRST = "temperature-first"  # transformers, vLLM, OpenAI
    TEMPERATURE_LAST = "temperature-last"  # llama.cpp, mlx-lm


@dataclass(frozen=True)
class Field:
    name: str
    label: str
    lo: float
    hi: float
    default: float
    step: float
    integer: bool
    help: str


FIELDS: tuple[Field, ...] = (
    Field("temperature", "Temperature", 0.0, 2.0, 0.8, 0.01, False,
          "Divides the logits: below 1 sharpens the distribution, above 1 flattens it; 0 always takes the top token."),
    Field("top_k", "Top-k", 0, 200, 0, 1, True,
          "Keeps only the k most likely tokens; 0 turns it off."),
    Field("top_p", "Top-p", 0.0, 1.0, 1.0, 0.01, False,
          "Keeps the smallest set of most likely tokens whose probabilities add up to p; 1 turns it off."),
    Field("min_p", "Min-p", 0.0, 1.0, 0.0, 0.01, False,
          "Drops tokens less likely than min-p times the top token's probability; 0 turns it off."),
    Field("repetition_penalty", "Repetition penalty", 0.5, 2.0, 1.0, 0.01, False,
          "Makes every token already in the text less likely (CTRL): positive logits divided, negative multiplied."),
    Field("frequency_penalty", "Frequency penalty", -2.0, 2.0, 0.0, 0.01, False,
          "Subtracts this much from a token's logit for each time it was already generated (OpenAI)."),
    Field("presence_penalty", "Presence penalty", -2.0, 2.0, 0.0, 0.01, False,
          "Subtracts this much once from the logit of any token already generated (OpenAI)."),
    Field("max_tokens", "Max tokens", 1, 100_000, 256, 1, True,
          "Stops after this many generated tokens."),
)
FIELD_BY_NAME = {f.name: f for f in FIELDS}
MAX_SEED = 2**32 - 1
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}  # a backslash and this letter, in a typed stop string


def read_escapes(text: str) -> str:
    """A stop string as typed: `\\n` a newline, `\\t` a tab, `\\r` a carriage return, `\\\\` a backslash; any other
    backslash stays as it is."""
    return re.sub(r"\\([ntr\\])", lambda m: ESCAPES[m[1]], text)


def write_escapes(text: str) -> str:
    """The typed form of a stop string, which `read_escapes` reads back exactly (its line breaks escaped)."""
    typed = {v: "\\" + k for k, v in ESCAPES.items()}
    return "".join(typed.get(c, c) for c in text)


class SettingsError(ValueError):
    """A setting out of its range; the message names the setting and the range."""


@dataclass(frozen=True)
class SamplerSettings:
    temperature: float = 0.8
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    max_tokens: int = 256
    seed: int | None = None  # None: a fresh seed is drawn per run and reported
    stop: tuple[str, ...] = field(default_factory=tuple)
    order: StageOrder = StageOrder.TEMPERATURE_FIRST

    def __post_init__(self) -> None:
        object.__setattr__(self, "order", StageOrder(self.order))
        object.__setattr__(self, "stop", tuple(self.stop))
        for f in FIELDS:
            _check_range(f, getattr(self, f.name))
        if self.seed is not None and not (isinstance(self.seed, int) and 0 <= self.seed <= MAX_SEED):
            raise SettingsError(f"seed must be an integer from 0 to {MAX_SEED}, got {self.seed!r}")
        if any(not isinstance(s, str) or s == "" for s in self.stop):
            raise SettingsError("stop strings must be non-empty text")

    @property
    def greedy(self) -> bool:
        """Temperature 0: the pipeline's greedy stage (its record names it so)."""
        return self.temperature == 0

    @property
    def draws_top_token(self) -> bool:
        """Always the top token: temperature 0, or top-p 0 (which keeps one token here). Another engine is asked
        for this as greedy (temperature 0)."""
        return self.temperature == 0 or self.top_p == 0

    @property
    def uses_penalties(self) -> bool:
        return self.repetition_penalty != 1 or self.frequency_penalty != 0 or self.presence_penalty != 0

    def with_(self, **changes: Any) -> SamplerSettings:
        return replace(self, **changes)

    def pipeline(self) -> SamplerSettings:
        """Only what shapes each step's distribution: seed, length and stop strings set aside."""
        return replace(self, seed=None, max_tokens=1, stop=())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["order"] = self.order.value
        d["stop"] = list(self.stop)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SamplerSettings:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def _check_range(f: Field, value: Any) -> None:
    ok_type = isinstance(value, int) if f.integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or not (f.lo <= value <= f.hi):
        kind = "an integer" if f.integer else "a number"
        off = {"top_k": " (0 = off)"}.get(f.name, "")
        raise SettingsError(f"{f.name} must be {kind} from {f.lo:g} to {f.hi:g}{off}, got {value!r}")


def read_settings(value: dict[str, Any], key: str = "settings") -> SamplerSettings:
    """Sampler settings as a file holds them (`SamplerSettings.to_dict`): each field's JSON type checked here, its
    range by `SamplerSettings` (whose message names it); `key` names the object in messages."""
    for name in value.keys() & SETTING_FIELDS:
        check, kind = _SETTING_KINDS.get(name, (lambda v: isinstance(v, (int, float)), "a number"))
        read_field(value, name, check, kind, null=name == "seed", where=f"{key}.")
    try:
        return SamplerSettings.from_dict(value)
    except ValueError as e:  # SettingsError names the setting and its range
        raise ValueError(f"{key}: {e}") from None


SETTING_FIELDS = {f.name for f in fields(SamplerSettings)}
_SETTING_KINDS = {"stop": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of text"),
                  "order": (lambda v: v in [o.value for o in StageOrder], " or ".join(o.value for o in StageOrder))}
