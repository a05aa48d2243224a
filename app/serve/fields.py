"""A request's sampling fields read into our `SamplerSettings`. The names each server gives a setting (OpenAI's,
vLLM's, llama.cpp's, mlx_lm.server's) are the dialects' (`app.core.remote.server_request`) inverted, with the stage
table's own names and engines' off values: no third table. Every value is checked against `FIELDS` (a `RequestError`,
HTTP 400, names the field and its range); a field this server does not apply is returned in `ignored`, never dropped
unseen. Unset fields take OpenAI's defaults (temperature 1, every other stage off). Thinking off is asked for as
vLLM and llama.cpp take it (`chat_template_kwargs: {"enable_thinking": false}`), as Qwen's API does (`enable_thinking`)
or as llama.cpp's `reasoning_budget: 0`. No HTTP, no model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.remote.server_request import DIALECTS
from app.core.settings import FIELD_BY_NAME, MAX_BIAS, MAX_SEED, SamplerSettings, SettingsError, complete_chain
from app.core.stage_table import ROWS

OPENAI_TEMPERATURE = 1.0  # OpenAI's default where a request sends none (ours, in the window, is 0.8)
MAX_STOPS = 16
MIROSTAT_TAU = 5.0  # llama.cpp's default τ when a request turns mirostat 2 on without one


class RequestError(ValueError):
    """A request this server refuses: HTTP `status`, OpenAI's error shape, `param` the field it names."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.param, self.status, self.kind = param, status, kind


def _names() -> dict[str, str]:
    """Their field -> our setting: each stage's settings under our names, then every dialect's names for them."""
    names = {f: f for row in ROWS for f in row.fields if f != "logit_bias"}
    for dialect in DIALECTS.values():
        names.update({theirs: ours for ours, theirs in dialect.fields.items()})
    return names


NAMES = _names()  # e.g. repeat_penalty -> repetition_penalty, samplers -> order, dry_sequence_breakers -> dry_breakers
NAMES["thinking_budget"] = "think_budget"  # (Qwen's API's name for a reasoning budget; llama.cpp's: reasoning_budget)
NAMES |= {"enable_thinking": "think", "think": "think", "chat_template_kwargs": "chat_template_kwargs"}
# an engine's own "off" outside our range (vLLM's top_k -1, llama.cpp's top_n_sigma -1) -> our off (the default)
OFF_VALUES = {row.fields[0]: set(row.off.values()) for row in ROWS if row.off} | {"think_budget": {-1}}
# llama.cpp's `samplers` entries -> our stages (its names where they differ: typ_p); ours are taken as they are
SAMPLER_NAMES = {**{r.name: r.name for r in ROWS if r.chain},
                 **{name: r.name for r in ROWS for e, name in r.engines.items() if e == "llama.cpp" and name}}


@dataclass(frozen=True)
class Sampling:
    settings: SamplerSettings
    ignored: tuple[str, ...]  # fields sent that this server does not apply


def read_sampling(body: Mapping[str, Any], handled: Sequence[str], max_tokens: int, vocab: int) -> Sampling:
    """The settings `body` asks for (`handled`: the fields its route reads itself; `max_tokens`: the route's
    default; `vocab`: the model's vocabulary, for logit_bias ids). Fields neither here nor handled are ignored."""
    values: dict[str, Any] = {"temperature": OPENAI_TEMPERATURE, "max_tokens": max_tokens}
    ignored: list[str] = []
    for theirs, value in body.items():
        if theirs in handled or value is None:
            continue
        ours = NAMES.get(theirs, theirs if theirs in ("seed", "stop", "logit_bias", "max_tokens") else None)
        if theirs in ("max_completion_tokens", "max_output_tokens"):
            ours = "max_tokens"
        if ours is None:
            ignored.append(theirs)
        else:
            _read(theirs, ours, value, values, ignored, vocab)
    _mirostat(body, values, ignored)
    if "order" in values:
        _samplers(values, body, ignored)
    try:
        return Sampling(SamplerSettings(**values), tuple(ignored))
    except SettingsError as e:
        raise RequestError(str(e)) from None


def _read(theirs: str, ours: str, value: Any, values: dict[str, Any], ignored: list[str], vocab: int) -> None:
    if ours == "think_budget" and type(value) is int and value == 0 and theirs != "think_budget":
        values["think"] = False  # llama.cpp's 0: no thinking at all (ours: a budget of 0 is off; thinking off is this)
    elif ours in FIELD_BY_NAME:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value in OFF_VALUES.get(ours, ()):
            value = FIELD_BY_NAME[ours].default
        if why := FIELD_BY_NAME[ours].refusal(value):
            raise RequestError(f"{theirs} {why}", theirs)
        values[ours] = value
    elif ours == "seed":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
            raise RequestError(f"seed must be an integer from 0 to {MAX_SEED}, got {value!r}", theirs)
        values["seed"] = value
    elif ours == "stop":
        values["stop"] = _strings(theirs, [value] if isinstance(value, str) else value, MAX_STOPS)
    elif ours == "dry_breakers":
        values["dry_breakers"] = _strings(theirs, value, 64)
    elif ours in ("think_soft", "think"):
        values[ours] = _bool(theirs, value)
    elif ours == "chat_template_kwargs":
        if not isinstance(value, dict):
            raise RequestError(f"{theirs} must be an object of the chat template's variables", theirs)
        for key, v in value.items():
            if key == "enable_thinking":
                values["think"] = _bool(f"{theirs}.{key}", v)
            else:  # (only the thinking switch is passed on to the template)
                ignored.append(f"{theirs}.{key}")
    elif ours == "logit_bias":
        values["logit_bias"] = _bias(value, vocab)
    elif ours == "order":
        values["order"] = _strings(theirs, value, 64)
    elif ours == "dry_last_n" and value != -1:  # ours always looks back over the whole text (llama.cpp's -1)
        ignored.append(theirs)


def _bool(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise RequestError(f"{field} must be true or false, got {value!r}", field)
    return value


def _strings(field: str, value: Any, most: int) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise RequestError(f"{field} must be a string or a list of non-empty strings", field)
    if len(value) > most:
        raise RequestError(f"{field} takes at most {most} strings, got {len(value)}", field)
    return tuple(value)


def _bias(value: Any, vocab: int) -> tuple[tuple[int, float], ...]:
    """OpenAI's logit_bias: {"token id": value from -100 to 100}, each id in the vocabulary."""
    if not isinstance(value, dict):
        raise RequestError('logit_bias must be an object of "token id": bias', "logit_bias")
    pairs = []
    for key, bias in value.items():
        if not (isinstance(key, str) and key.isdigit() and int(key) < vocab):
            raise RequestError(f"logit_bias names {key[:40]!r}, not a token id from 0 to {vocab - 1}", "logit_bias")
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -MAX_BIAS <= bias <= MAX_BIAS:
            raise RequestError(f"logit_bias for token {key} must be a number from {-MAX_BIAS:g} to {MAX_BIAS:g}, "
                               f"got {bias!r}", "logit_bias")
        pairs.append((int(key), float(bias)))
    return tuple(pairs)


def _mirostat(body: Mapping[str, Any], values: dict[str, Any], ignored: list[str]) -> None:
    """llama.cpp's `mirostat` mode: 2 runs ours (v2) with its τ (default 5); 0 or absent leaves it off, any τ or η
    sent then not applied (as there); 1 (v1) is not implemented."""
    mode = values.pop("mirostat", 0)
    if mode not in (0, 2) or isinstance(mode, bool):
        raise RequestError(f"mirostat must be 0 (off) or 2 (v2; v1 is not implemented here), got {mode!r}",
                           "mirostat")
    if mode == 2:
        values.setdefault("mirostat_tau", MIROSTAT_TAU)
        return
    for ours in ("mirostat_tau", "mirostat_eta"):
        if values.pop(ours, None) is not None:
            ignored.extend(k for k in body if NAMES.get(k) == ours)


def _samplers(values: dict[str, Any], body: Mapping[str, Any], ignored: list[str]) -> None:
    """llama.cpp's `samplers` list as our chain (its "penalties" entry: ours always run first). As there, a stage
    left out of the list does not run: its settings sent are listed as not applied."""
    names = [n for n in values.pop("order") if n != "penalties"]
    unknown = [n for n in names if n not in SAMPLER_NAMES]
    if unknown:
        raise RequestError(f"samplers names {unknown[0][:40]!r}, not a sampler: give any of "
                           f"{', '.join(sorted(SAMPLER_NAMES))}", "samplers")
    chain = [SAMPLER_NAMES[n] for n in names]
    try:
        values["chain"] = complete_chain(chain)
    except SettingsError as e:
        raise RequestError(f"samplers: {e}", "samplers") from None
    for row in ROWS:
        if row.chain and row.name not in chain and row.name != "logit_bias":
            for f in row.fields:
                if f in values and f != "max_tokens":
                    values.pop(f)
                    ignored.extend(k for k in body if NAMES.get(k, k) == f)
    values.setdefault("temperature", 1.0)  # (llama.cpp without its temperature sampler draws at 1)
