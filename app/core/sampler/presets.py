"""Presets: named sampler settings, shipped or the user's own, not tied to any model.

A preset holds what shapes each step's distribution (temperature, the filters, the penalties, the stage order, and a
constraint if it was saved with one); applying one leaves the seed, the length and the stop strings as they are
(and the constraint, for a preset without one). The user's presets live in one
versioned JSON file (`presets.json` in the platform's user data folder), written atomically. A damaged file, or
one from a newer version, gives one `PresetFileError` and is never overwritten: until it is moved away or
repaired, the store reads as the shipped presets alone and refuses to save.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.files import check_header, parse_json, write_atomic
from app.core.settings import FIELDS, SamplerSettings, SettingsError, StageOrder, parse_order, read_settings
from app.core.stage_inputs import Constraint

FORMAT = "logitlab-presets"
VERSION = 1
MAX_NAME = 60
# every numeric sampler setting but the length, and the order (a logit bias names one model's tokens: not kept)
PRESET_FIELDS = (*(f.name for f in FIELDS if f.name != "max_tokens"), "order", "chain", "think_soft", "think_markers")
LAST, FIRST = StageOrder.TEMPERATURE_LAST, StageOrder.TEMPERATURE_FIRST


class PresetError(ValueError):
    """A preset operation that cannot be done (a bad or taken name, an unknown preset); the message says why."""


class PresetFileError(PresetError):
    """A presets file this version cannot read (damaged, not a presets file, or newer); names the file."""


@dataclass(frozen=True)
class Preset:
    name: str
    settings: SamplerSettings = field(default_factory=SamplerSettings)  # only PRESET_FIELDS are the preset's
    note: str = ""  # where the values come from
    shipped: bool = False

    def values(self) -> dict[str, Any]:
        """The settings the preset sets: PRESET_FIELDS, and its constraint when it has one (a preset without
        leaves the constraint being edited as it is)."""
        constraint = {"constraint": self.settings.constraint} if self.settings.constraint else {}
        return {**{f: getattr(self.settings, f) for f in PRESET_FIELDS}, **constraint}

    def apply(self, current: SamplerSettings) -> SamplerSettings:
        """`current` with this preset's values; seed, max tokens and stop strings kept."""
        return current.with_(**self.values())

    def matches(self, s: SamplerSettings) -> bool:
        """The settings hold this preset's values (to the panel's precision)."""
        return all(_same(v, getattr(s, f)) for f, v in self.values().items())

    def to_dict(self) -> dict[str, Any]:
        values = {f: (v.value if isinstance(v, StageOrder) else list(v) if isinstance(v, tuple) else
                      v.to_dict() if isinstance(v, Constraint) else v) for f, v in self.values().items()}
        return {"name": self.name, "note": self.note, "settings": values}

    @classmethod
    def from_dict(cls, d: Any) -> Preset:
        if not isinstance(d, dict) or not isinstance(d.get("settings"), dict):
            raise TypeError("a preset is an object with a name and settings")
        note = d.get("note", "")
        if not isinstance(note, str):
            raise TypeError("a preset's note is text")
        name = check_name(d.get("name"))
        kept = (*PRESET_FIELDS, "constraint")
        return cls(name, read_settings({k: v for k, v in d["settings"].items() if k in kept}), note)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=0, abs_tol=1e-6)
    return a == b


def check_name(name: Any) -> str:
    """A preset name as stored: trimmed, not empty, one line, at most MAX_NAME characters."""
    if not isinstance(name, str) or not name.strip():
        raise PresetError("a preset needs a name")
    name = name.strip()
    if len(name) > MAX_NAME or any(c in name for c in "\n\r\t"):
        raise PresetError(f"a preset name is one line of at most {MAX_NAME} characters")
    return name


def _shipped(name: str, note: str, order: StageOrder | str = FIRST, **values: Any) -> Preset:
    """A shipped preset; `order` an old order or an engine's name (its own chain, `stage_table.ENGINE_CHAINS`)."""
    order, chain = parse_order(order.value if isinstance(order, StageOrder) else order)
    return Preset(name, SamplerSettings(**values, order=order, chain=chain), note, shipped=True)


# Engine defaults as each engine's own source sets them (checked in the installed packages' sources):
# transformers 5 GenerationConfig._get_default_generation_params, mlx-lm 0.32 generate.py / server.py,
# llama.cpp common/common.h common_params_sampling, vLLM SamplingParams and the OpenAI API reference.
SHIPPED: tuple[Preset, ...] = (
    _shipped("precise", "Focused: a low temperature inside a tight nucleus.", temperature=0.2, top_p=0.9),
    _shipped("balanced", "A common middle ground for chat and code.", temperature=0.7, top_k=40, top_p=0.9),
    _shipped("creative", "A high temperature kept sane by min-p, filters first (as the min-p paper).", LAST,
             temperature=1.2, min_p=0.05),
    _shipped("transformers generate()", "GenerationConfig defaults: do_sample=False, greedy; its warpers' order: "
             "temperature, top-k, top-p, min-p, typical, epsilon, eta.", "transformers", temperature=0.0),
    _shipped("transformers do_sample=True", "GenerationConfig defaults with sampling on: temperature 1.0, "
             "top_k 50, top_p 1.0 (a model's generation_config.json often overrides them); temperature first, "
             "then top-k, top-p, min-p, typical, epsilon, eta.", "transformers", temperature=1.0, top_k=50),
    _shipped("mlx-lm", "mlx_lm.generate, mlx_lm.server and make_sampler default to temp 0.0 (greedy), top_p, "
             "min_p and top_k off; make_sampler runs top-p, min-p, XTC, top-k, then temperature.", "mlx-lm",
             temperature=0.0),
    _shipped("llama.cpp server", "common_params_sampling: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, "
             "repeat_penalty 1.0; its chain: penalties, DRY, top-n-sigma, top-k, typical, top-p, min-p, XTC, "
             "temperature (its penalties look back 64 tokens).", "llama.cpp", temperature=0.8, top_k=40,
             top_p=0.95, min_p=0.05),
    _shipped("OpenAI / vLLM", "temperature 1, top_p 1, no penalties (vLLM: top_k and min_p off, run after "
             "temperature, min-p first; it takes a model's generation_config.json defaults when there is one).",
             "vllm", temperature=1.0),
)


def default_path() -> Path:
    import platformdirs

    return platformdirs.user_data_path("logitlab", appauthor=False) / "presets.json"


def dumps(presets: list[Preset]) -> str:
    return json.dumps({"format": FORMAT, "version": VERSION, "presets": [p.to_dict() for p in presets]},
                      ensure_ascii=False, allow_nan=False, indent=2) + "\n"


def loads(data: bytes | str, name: str = "<presets>") -> list[Preset]:
    """The presets in a file `dumps` wrote; anything else raises `PresetFileError` naming `name`."""
    try:
        obj = parse_json(data)
    except ValueError as e:
        raise PresetFileError(f"{name} is damaged (not JSON: {e})") from None
    try:
        check_header(obj, FORMAT, VERSION, "presets", PresetFileError)
    except PresetFileError as e:
        raise PresetFileError(f"{name}: {e}") from None
    items = obj.get("presets")
    if not isinstance(items, list):
        raise PresetFileError(f"{name} is damaged (no list of presets)")
    presets = [_preset(item, i, name) for i, item in enumerate(items, 1)]
    names = [p.name for p in presets]
    if len(set(names)) != len(names):
        raise PresetFileError(f"{name} is damaged (two presets share a name)")
    return presets


def _preset(item: Any, i: int, name: str) -> Preset:
    try:
        return Preset.from_dict(item)
    except (SettingsError, PresetError, TypeError, ValueError) as e:
        raise PresetFileError(f"{name} is damaged (preset {i}: {e})") from None


def read(path: Path) -> list[Preset]:
    try:
        return loads(path.read_bytes(), str(path))
    except OSError as e:
        raise PresetFileError(f"{path} cannot be read ({e.strerror or e})") from None


class PresetStore:
    """The shipped presets, then the user's, read from and saved to `path`."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.user: list[Preset] = []
        self.error: str | None = None  # why the file could not be read: nothing is saved over it
        try:
            self.user = read(self.path) if self.path.exists() else []
        except PresetFileError as e:
            self.error = str(e)

    def presets(self) -> list[Preset]:
        return [*SHIPPED, *self.user]

    def get(self, name: str) -> Preset | None:
        return next((p for p in self.presets() if p.name == name), None)

    def save(self, name: str, settings: SamplerSettings) -> Preset:
        """Save `settings` as the user preset `name` (replacing a user preset of that name)."""
        name = check_name(name)
        if any(p.name == name for p in SHIPPED):
            raise PresetError(f"“{name}” is a shipped preset: choose another name")
        preset = Preset(name, SamplerSettings().with_(**Preset("", settings).values()))
        at = self._index(name)
        user = list(self.user)
        if at is None:
            user.append(preset)
        else:
            user[at] = preset
        self._write(user)
        return preset

    def rename(self, old: str, new: str) -> Preset:
        at = self._own(old)
        new = check_name(new)
        if new != old and self.get(new) is not None:
            raise PresetError(f"a preset named “{new}” exists already")
        user = list(self.user)
        user[at] = Preset(new, user[at].settings, user[at].note)
        self._write(user)
        return user[at]

    def delete(self, name: str) -> None:
        at = self._own(name)
        self._write(self.user[:at] + self.user[at + 1:])

    def export(self, path: str | os.PathLike, names: list[str]) -> None:
        """Write the named presets (shipped ones too) to `path` as a presets file, atomically."""
        presets = [p for p in self.presets() if p.name in names]
        write_atomic(Path(path), dumps([Preset(p.name, p.settings, p.note) for p in presets]))

    def import_file(self, path: str | os.PathLike) -> list[str]:
        """Add the presets of a file; a name already taken gets a number. Returns the names given."""
        incoming = read(Path(path))
        user, given = list(self.user), []
        taken = {p.name for p in self.presets()}
        for p in incoming:
            name = _free(p.name, taken)
            taken.add(name)
            user.append(Preset(name, p.settings, p.note))
            given.append(name)
        self._write(user)
        return given

    def _index(self, name: str) -> int | None:
        return next((i for i, p in enumerate(self.user) if p.name == name), None)

    def _own(self, name: str) -> int:
        at = self._index(name)
        if at is None:
            shipped = any(p.name == name for p in SHIPPED)
            raise PresetError(f"“{name}” is a shipped preset: it cannot be changed" if shipped
                              else f"no preset named “{name}”")
        return at

    def _write(self, user: list[Preset]) -> None:
        if self.error is not None:
            raise PresetFileError(f"{self.error}. Presets are not saved until that file is moved away or repaired.")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, dumps(user))
        self.user = user


def _free(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    n = 2
    while f"{name} ({n})" in taken:
        n += 1
    return f"{name} ({n})"
