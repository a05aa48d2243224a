"""Every preference the window keeps between sessions, in one typed table: `SCHEMA` (name, type, default).

`Preferences` reads and writes them through QSettings, by default in an INI file in the user's config folder
(platformdirs). A stored value of the wrong type (another version, a hand edit, a damaged file) reads as the
default, with one warning per preference, and is rewritten at the next `save`. No widget logic here.
"""

from __future__ import annotations

import copy
import json
import logging
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
from PySide6.QtCore import QByteArray, QSettings

from app.core.files import brief, parse_json
from app.core.models.sources import BUILTIN_NAME
from app.core.settings import SamplerSettings, read_settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pref:
    name: str
    type: Any  # bytes, bool, str, SamplerSettings, or a JSON shape such as int or list[str]
    default: Any


SCHEMA: tuple[Pref, ...] = (
    Pref("geometry", bytes, b""),  # QWidget.saveGeometry; empty: let the window size itself
    Pref("splitter/main", bytes, b""),  # QSplitter.saveState of each splitter, by its object name
    Pref("splitter/left", bytes, b""),
    Pref("splitter/center", bytes, b""),
    Pref("sampler", SamplerSettings, SamplerSettings()),
    Pref("prompt", str, "def fibonacci(n):\n"),
    Pref("model", str, BUILTIN_NAME),  # the model source: "builtin", a folder or a hub id
    Pref("backend", str, "auto"),
    Pref("offline", bool, False),
    Pref("recent_models", list[str], []),  # most recent first
    Pref("recent_sessions", list[str], []),  # session files, most recent first
    Pref("model_folders", list[str], []),  # folders of models the user added in the picker (`logitlab models` too)
    Pref("opt_ins", dict[str, list[str]], {}),  # model source -> the LoadOptions flags the user allowed for it
    Pref("remote/base_url", str, ""),  # the last server's URL (its API key stays in the keychain: app/core/secrets)
    Pref("remote/concurrency", int, 4),  # its requests at once
    Pref("timeline/series", str, "both"),  # what the run timeline draws: both, prob or entropy (chart_host.SERIES)
)
PREFS = {p.name: p for p in SCHEMA}


def default_path() -> Path:
    return platformdirs.user_config_path("logitlab", appauthor=False) / "preferences.ini"


class Preferences:
    """Typed access to the stored preferences; `get` never raises on what it finds in the file."""

    def __init__(self, store: QSettings | None = None) -> None:
        self.store = store if store is not None else QSettings(str(default_path()), QSettings.Format.IniFormat)
        self._wrong: set[str] = set()  # read as the default because what was stored had the wrong type

    def get(self, name: str) -> Any:
        pref = PREFS[name]
        raw = self.store.value(name)
        if raw is not None:
            try:
                return _decode(pref.type, raw)
            except (TypeError, ValueError) as e:
                if name not in self._wrong:
                    log.warning("preference %r in %s is not a valid %s (%s): using the default, which the next "
                                "save writes", name, self.store.fileName(), _type_name(pref.type), e)
                    self._wrong.add(name)
        return copy.deepcopy(pref.default)  # callers may change what they get

    def set(self, name: str, value: Any) -> None:
        self.store.setValue(name, _encode(PREFS[name].type, value))
        self._wrong.discard(name)

    def save(self) -> None:
        """Write what was read wrong (as its default, unless set since), then flush to disk."""
        for name in sorted(self._wrong):
            self.set(name, PREFS[name].default)
        self.store.sync()


def _decode(tp: Any, raw: Any) -> Any:
    if tp is bytes:
        if not isinstance(raw, (QByteArray, bytes)):
            raise TypeError(f"got {type(raw).__name__}")
        return bytes(raw)
    if tp is bool:
        if isinstance(raw, bool) or raw in ("true", "false"):  # INI files hold text; PySide turns some to bool
            return raw in (True, "true")
        raise ValueError(f"got {raw!r}")
    if tp is str:
        if not isinstance(raw, str):
            raise TypeError(f"got {type(raw).__name__}")
        return raw
    value = parse_json(raw)  # raises TypeError on a non-string, ValueError on text that is not JSON (or too deep)
    if tp is SamplerSettings:
        if not isinstance(value, dict):
            raise TypeError(f"got {type(value).__name__}")
        return read_settings(value, "sampler")  # a ValueError naming the setting that is wrong
    if not _conforms(value, tp):
        raise TypeError(f"got {brief(value)}")
    return value


def _encode(tp: Any, value: Any) -> Any:
    if tp is bytes:
        return QByteArray(bytes(value))
    if tp is bool:
        return "true" if value else "false"
    if tp is str:
        return str(value)
    return json.dumps(value.to_dict() if tp is SamplerSettings else value)


def _conforms(value: Any, tp: Any) -> bool:
    """Whether a JSON value has the shape `tp` (int, str, list[...], dict[str, ...])."""
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)  # JSON's true is not a count
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_conforms(k, args[0]) and _conforms(v, args[1])
                                               for k, v in value.items())
    return isinstance(value, tp)


def _type_name(tp: Any) -> str:
    return str(tp) if typing.get_origin(tp) else tp.__name__
