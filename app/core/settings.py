"""Sampler settings: one frozen record, its allowed ranges, and the stage order.

`FIELDS` is the single table of every numeric setting (range, default, meaning): validation, the command
line and the window's sampler panel all read it, so a range is written down once. Edge values are ours and
documented here: temperature 0 is greedy; top_k 0 (or ≥ vocabulary) is off; top_p 1 is off and top_p 0 keeps
one token; min_p 0 is off; penalties 1 (repetition) and 0 (frequency, presence) are off; typical_p 1, top_n_sigma
0, xtc_probability 0, dynatemp_range 0, epsilon_cutoff 0, eta_cutoff 0, dry_multiplier 0, mirostat_tau 0 and
think_budget 0 are off.

The stage order is `order` (temperature before or after the filters, as older files say it) or, when set, `chain`:
every stage's name in the order they run (`parse_order` reads `top_k,temperature,...` or an engine's name). The
stages themselves (names, when each is on, the engines' orders) are rows of `app.core.stage_table`; only the
settings they read are here. Penalties always run first, on the raw logits. Stop strings are typed with backslash
escapes on the command line and in the window alike (`read_escapes`).
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import asdict, dataclass, field, fields, replace
from enum import Enum
from typing import Any

from app.core.files import read_field, typed
from app.core.stage_inputs import Constraint, Steering, read_constraint, read_steering
from app.core.stage_table import ENGINE_CHAINS, ORDER_CHAINS, STAGE, STAGES, record_name


class StageOrder(str, Enum):
    """Where temperature sits relative to the filters (top-k, top-p, min-p)."""

    TEMPERATURE_FIRST = "temperature-first"  # transformers, vLLM, OpenAI
    TEMPERATURE_LAST = "temperature-last"  # llama.cpp, mlx-lm


_OFF_NOTES = {"top_k": " (0 = off)"}  # what a field's error adds to its range


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
    more: bool = False  # one of the "More samplers" (folded in the window)
    slider_hi: float | None = None  # where the window's slider ends, for a range wider than a slider shows

    @property
    def decimals(self) -> int:
        """Decimals a box shows for this field: enough for its step, at least two."""
        return max(2, len(f"{self.step:.10f}".rstrip("0").split(".")[1])) if not self.integer else 0

    @property
    def span(self) -> str:
        """The allowed range in words, as the help, the errors and the README give it."""
        return f"{self.lo:g} or more" if math.isinf(self.hi) else f"from {self.lo:g} to {self.hi:g}"

    def refusal(self, value: Any) -> str:
        """Why `value` is not allowed ("must be an integer from 0 to 20..., got 30"); "" when it is."""
        ok_type = isinstance(value, int) if self.integer else isinstance(value, (int, float))
        if not isinstance(value, bool) and ok_type and self.lo <= value <= self.hi:
            return ""
        kind = "an integer" if self.integer else "a number"
        return f"must be {kind} {self.span}{_OFF_NOTES.get(self.name, '')}, got {value!r}"


FIELDS: tuple[Field, ...] = (
    Field("temperature", "Temperature", 0.0, 2.0, 0.8, 0.01, False,
          "Divides the logits: below 1 sharpens the distribution, above 1 flattens it; 0 always takes the top token."),
    Field("top_k", "Top-k", 0, math.inf, 0, 1, True,
          "Keeps only the k most likely tokens; 0, or the vocabulary's size or more, turns it off.", slider_hi=200),
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
    Field("typical_p", "Typical-p", 0.0, 1.0, 1.0, 0.01, False,
          "Keeps the tokens whose surprise is closest to the entropy until their probabilities add up to p (locally "
          "typical sampling); 1 turns it off.", True),
    Field("top_n_sigma", "Top-n-sigma", 0.0, 10.0, 0.0, 0.05, False,
          "Keeps tokens whose logit is within n standard deviations of the top logit; 0 turns it off.", True),
    Field("xtc_threshold", "XTC threshold", 0.0, 0.5, 0.1, 0.01, False,
          "Exclude top choices: the tokens more likely than this are the ones XTC may remove (all but the least "
          "likely of them).", True),
    Field("xtc_probability", "XTC probability", 0.0, 1.0, 0.0, 0.01, False,
          "The chance, per step, that XTC removes the top choices above its threshold; 0 turns it off.", True),
    Field("dynatemp_range", "Dynatemp range", 0.0, 2.0, 0.0, 0.01, False,
          "Dynamic temperature: from temperature - range on a certain step to temperature + range on the most "
          "uncertain, by the entropy; 0 turns it off.", True),
    Field("dynatemp_exponent", "Dynatemp exponent", 0.1, 10.0, 1.0, 0.05, False,
          "Dynamic temperature's curve: the normalized entropy is raised to this power (1: linear).", True),
    Field("epsilon_cutoff", "Epsilon cutoff", 0.0, 0.05, 0.0, 0.0001, False,
          "Drops tokens less likely than this (truncation sampling; the top token always stays); 0 turns it off.",
          True),
    Field("eta_cutoff", "Eta cutoff", 0.0, 0.05, 0.0, 0.0001, False,
          "Drops tokens less likely than min(ε, √ε·e^-entropy), ε this value (the top token always stays); 0 turns "
          "it off.", True),
    Field("dry_multiplier", "DRY multiplier", 0.0, 5.0, 0.0, 0.05, False,
          "DRY (don't repeat yourself): how hard a token that would extend a repeat of the text is penalized; 0 "
          "turns it off.", True),
    Field("dry_base", "DRY base", 1.0, 4.0, 1.75, 0.05, False,
          "DRY's growth: the penalty is multiplier × base^(repeat length - allowed length).", True),
    Field("dry_allowed_length", "DRY allowed length", 1, 20, 2, 1, True,
          "DRY leaves repeats up to this many tokens alone.", True),
    Field("mirostat_tau", "Mirostat τ", 0.0, 10.0, 0.0, 0.1, False,
          "Mirostat v2's target surprise (bits): it cuts the tokens more surprising than its running μ (which starts "
          "at 2τ and follows each drawn token's surprise); 0 turns it off.", True),
    Field("mirostat_eta", "Mirostat η", 0.0, 1.0, 0.1, 0.01, False,
          "Mirostat v2's learning rate: how far μ moves per step toward the target surprise.", True),
    Field("think_budget", "Think budget", 0, 100_000, 0, 1, True,
          "A thinking model's reasoning budget: after this many tokens of thinking its closing marker is forced "
          "(soft: its logit raised as the budget nears); 0 turns it off.", True, slider_hi=1024),
    Field("max_tokens", "Max tokens", 1, 100_000, 256, 1, True,
          "Stops after this many generated tokens."),
)
FIELD_BY_NAME = {f.name: f for f in FIELDS}

_ORDER_CHOICES = (f"give an engine's order ({', '.join(ENGINE_CHAINS)}), {' or '.join(ORDER_CHAINS)}, or stage "
                  f"names with commas ({','.join(STAGES)})")  # what an order's error offers
MAX_BIAS = 100.0  # a logit bias's range either side of 0 (OpenAI's)
DRY_BREAKERS = ("\n", ":", '"', "*")  # llama.cpp's default sequence breakers
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
    chain: tuple[str, ...] = ()  # every stage in the order it runs; () = `order`'s (stored so when they agree)
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, value added to its logit), by id
    typical_p: float = 1.0
    top_n_sigma: float = 0.0
    xtc_threshold: float = 0.1
    xtc_probability: float = 0.0
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    epsilon_cutoff: float = 0.0
    eta_cutoff: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_breakers: tuple[str, ...] = DRY_BREAKERS  # strings: a token holding one ends a repeat
    mirostat_tau: float = 0.0
    mirostat_eta: float = 0.1
    constraint: Constraint | None = None  # what the text must match (`stage_inputs`); None: free text
    steering: Steering | None = None  # a steering vector added to the forward (`stage_inputs`); None: none
    think_budget: int = 0  # think tokens before the closing marker is forced (0: no budget)
    think_soft: bool = False  # the budget raises the closing marker's logit as it nears, rather than forcing it
    think_markers: tuple[str, ...] = ()  # (open, close): a custom pair of reasoning markers; (): the tokenizer's
    # False: no thinking: the chat template is rendered with enable_thinking=False, and a think span opened anyway is
    # closed at once (a hard budget of 0); True: the template's own default
    think: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "order", StageOrder(self.order))
        object.__setattr__(self, "stop", tuple(self.stop))
        order, chain = _normal_chain(self.chain, self.order)
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "chain", chain)
        object.__setattr__(self, "logit_bias", _check_bias(self.logit_bias))
        object.__setattr__(self, "dry_breakers", tuple(self.dry_breakers))
        object.__setattr__(self, "think_markers", tuple(self.think_markers))
        if self.think_markers and (len(self.think_markers) != 2 or not all(
                isinstance(m, str) and m for m in self.think_markers)):
            raise SettingsError("think_markers must be two non-empty texts, the opening and the closing marker")
        for name in ("think_soft", "think"):
            if not isinstance(getattr(self, name), bool):
                raise SettingsError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if any(not isinstance(b, str) or b == "" for b in self.dry_breakers):
            raise SettingsError("dry_breakers must be non-empty text")
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
    def stage_order(self) -> tuple[str, ...]:
        """Every stage's name, in the order the pipeline runs those that are on."""
        return self.chain or ORDER_CHAINS[self.order.value]

    def enabled_stages(self, vocab: int = 2**62) -> tuple[str, ...]:
        """The stages these settings turn on, in their order, for a vocabulary of `vocab` tokens ("temperature"
        stands for greedy and dynamic temperature too)."""
        return tuple(n for n in self.stage_order if STAGE[n].on(self, vocab))

    def needs_whole_vocabulary(self) -> bool:
        """Whether a stage whose cut depends on the whole vocabulary's distribution (a `whole` row: top-p, typical-p,
        top-n-sigma, epsilon, eta, XTC, mirostat, dynamic temperature) runs before the first that keeps a fixed few
        (top-k, greedy), or a logit bias raises a token: a step's recorded top logits alone then cannot decide its
        draw (a re-sample needs the model)."""
        if self.constraint is not None:  # its grammar cuts by the whole vocabulary; a step records only its top-K
            return True
        if (any(value > 0 for _, value in self.logit_bias) or self.dry_multiplier > 0 or self.think_budget > 0
                or not self.think):
            return True  # (DRY: its breakers are the tokenizer's, which a re-sample does not have; a think budget, or
            # no thinking (a budget of 0): its markers are the tokenizer's too, and it raises or forces a token that may
            # be outside the record)
        for name in self.enabled_stages():
            row = STAGE[record_name(self, name)]
            if row.few or row.whole:
                return row.whole
        return False

    @property
    def needs_history(self) -> bool:
        """A run keeps a `History` for these settings: penalties' counts, mirostat's running μ, DRY's tokens, a
        constraint's matcher."""
        return (self.uses_penalties or self.mirostat_tau > 0 or self.dry_multiplier > 0 or self.think_budget > 0
                or self.constraint is not None)

    @property
    def soft_budget(self) -> bool:
        """The think budget runs as a stage (soft: it raises the closing marker's logit); a hard one forces it."""
        return self.think_budget > 0 and self.think_soft

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
        d["chain"] = list(self.chain)
        d["logit_bias"] = [list(pair) for pair in self.logit_bias]
        d["dry_breakers"] = list(self.dry_breakers)
        d["think_markers"] = list(self.think_markers)
        d["constraint"] = self.constraint.to_dict() if self.constraint else None
        d["steering"] = self.steering.to_dict() if self.steering else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SamplerSettings:
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        if isinstance(d.get("constraint"), dict):
            d["constraint"] = read_constraint(d["constraint"])
        if isinstance(d.get("steering"), dict):
            d["steering"] = read_steering(d["steering"])
        return cls(**d)


def _check_range(f: Field, value: Any) -> None:
    if why := f.refusal(value):
        raise SettingsError(f"{f.name} {why}")


def complete_chain(names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """`names` (each a stage, once) followed by the stages they leave out, in the default order; logit bias, when
    not named, first (where every engine applies it)."""
    unknown = [n for n in names if n not in STAGES]
    if unknown:
        raise SettingsError(f"unknown stage {typed(unknown[0])} in the order: the stages are {', '.join(STAGES)}")
    if len(set(names)) != len(names):
        raise SettingsError("a stage is named twice in the order")
    head = () if "logit_bias" in names else ("logit_bias",)
    return (*head, *names, *(n for n in STAGES if n not in names and n not in head))


def _normal_chain(chain: tuple[str, ...] | list[str], order: StageOrder) -> tuple[StageOrder, tuple[str, ...]]:
    """A chain completed, and stored as () with its `order` when it is one of the two old orders."""
    if not chain:
        return order, ()
    full = complete_chain(list(chain))
    for value, known in ORDER_CHAINS.items():
        if full == known:
            return StageOrder(value), ()
    t = full.index("temperature")
    first = all(t < full.index(n) for n in ("top_k", "top_p", "min_p"))
    return (StageOrder.TEMPERATURE_FIRST if first else StageOrder.TEMPERATURE_LAST), full


def parse_order(text: str) -> tuple[StageOrder, tuple[str, ...]]:
    """`--order`'s value: an old order's name, an engine's (`llama.cpp`, `mlx-lm`, ...), or stage names with commas
    (`top_k,temperature,top_p`; the rest follow in the default order). Returns (order, chain) for the settings."""
    text = text.strip()
    if text in ORDER_CHAINS:
        return StageOrder(text), ()
    given = [n.strip() for n in text.split(",") if n.strip()]
    names = ENGINE_CHAINS.get(text.lower()) or [n.replace("-", "_") for n in given]
    if not names:
        raise SettingsError(f"the order is empty: {_ORDER_CHOICES}")
    unknown = [t for t, n in zip(given, names, strict=False) if n not in STAGES]
    if unknown:
        close = difflib.get_close_matches(unknown[0].lower(), [*ORDER_CHAINS, *ENGINE_CHAINS, *STAGES], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise SettingsError(f"unknown stage {typed(unknown[0])} in the order{hint}: {_ORDER_CHOICES}")
    return _normal_chain(complete_chain(list(names)), StageOrder.TEMPERATURE_FIRST)



def _check_bias(pairs: object) -> tuple[tuple[int, float], ...]:
    """Logit bias as (id, value) pairs, each id once, each value within ±MAX_BIAS."""
    out: dict[int, float] = {}
    for pair in pairs:  # type: ignore[attr-defined]
        ok = isinstance(pair, (tuple, list)) and len(pair) == 2
        tid, value = pair if ok else (None, None)
        if not ok or isinstance(tid, bool) or not isinstance(tid, int) or tid < 0:
            raise SettingsError(f"logit_bias needs (token id ≥ 0, value) pairs, got {pair!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -MAX_BIAS <= value <= MAX_BIAS:
            raise SettingsError(f"logit_bias for token {tid} must be a number from {-MAX_BIAS:g} to {MAX_BIAS:g}, "
                                f"got {value!r}")
        out[tid] = float(value)
    return tuple(sorted(out.items()))


def read_settings(value: dict[str, Any], key: str = "settings") -> SamplerSettings:
    """Sampler settings as a file holds them (`SamplerSettings.to_dict`): each field's JSON type checked here, its
    range by `SamplerSettings` (whose message names it); `key` names the object in messages."""
    for name in value.keys() & SETTING_FIELDS:
        check, kind = _SETTING_KINDS.get(name, (lambda v: isinstance(v, (int, float)), "a number"))
        read_field(value, name, check, kind, null=name in ("seed", "constraint", "steering"), where=f"{key}.")
    try:
        return SamplerSettings.from_dict(value)
    except ValueError as e:  # SettingsError names the setting and its range
        raise ValueError(f"{key}: {e}") from None


SETTING_FIELDS = {f.name for f in fields(SamplerSettings)}
_SETTING_KINDS = {"stop": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of text"),
                  "order": (lambda v: v in [o.value for o in StageOrder], " or ".join(o.value for o in StageOrder)),
                  "chain": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                            "a list of stage names"),
                  "logit_bias": (lambda v: isinstance(v, list) and all(isinstance(x, list) for x in v),
                                 "a list of [token id, value] pairs"),
                  "dry_breakers": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                                   "a list of text"),
                  "think_soft": (lambda v: isinstance(v, bool), "true or false"),
                  "think": (lambda v: isinstance(v, bool), "true or false"),
                  "think_markers": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                                    "a list of two texts"),
                  "constraint": (lambda v: isinstance(v, dict), "an object (kind, text, place)"),
                  "steering": (lambda v: isinstance(v, dict), "an object (path, layers, strength)")}
