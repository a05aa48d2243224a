"""Preferences: every stored preference goes through one typed table; what a damaged or hand-edited file holds
reads as the default (with one warning), is rewritten at the next save, and never stops the window opening."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from app.core.models.sources import ModelSpec
from app.core.settings import SamplerSettings, StageOrder
from app.ui.files.preferences import PREFS, Preferences
from app.ui.main_window import MainWindow
from app.ui.panels.model_bar import ModelBar
from tests.ui.test_window import RUN_TIMEOUT, run

EXAMPLES = {  # per preference, a value other than its default
    "geometry": b"\x01\xd9\xd0\xcb\x00\x03",
    "splitter/main": b"\x00\x00\x00\xff",
    "splitter/left": b"\x00\x01",
    "splitter/center": b"\x00\x02",
    "sampler": SamplerSettings(temperature=0.3, top_k=12, stop=("\n\n",), seed=7, order=StageOrder.TEMPERATURE_LAST),
    "prompt": "a, b = 1, 2  # commas: INI files read unquoted ones as lists\n",
    "model": "Qwen/Qwen2.5-0.5B-Instruct",
    "backend": "torch",
    "offline": True,
    "recent_models": ["/models/a", "owner/b"],
    "recent_sessions": ["/sessions/a.jsonl"],
    "model_folders": ["/models", "~/.lmstudio/models"],
    "remote/base_url": "http://gpu:8000/v1",
    "remote/concurrency": 8,
    "timeline/series": "entropy",
    "opt_ins": {"/models/a": ["trust_remote_code", "allow_pickle"]},
}

WRONG = [  # (preference, what another version or a hand edit left in the file)
    ("geometry", "hello"),
    ("splitter/main", 3),
    ("splitter/left", ["a", "b"]),
    ("splitter/center", "not bytes"),
    ("sampler", "not json"),
    ("sampler", "[1, 2]"),
    ("sampler", '{"temperature": "hot"}'),
    ("sampler", '{"top_p": 7}'),
    ("prompt", ["a", "list"]),
    ("model", ["x", "y"]),
    ("backend", ["x", "y"]),
    ("offline", "maybe"),
    ("offline", 1),
    ("recent_models", "5"),
    ("recent_models", '["a", 3]'),
    ("recent_models", "{not json"),
    ("recent_sessions", '["a.jsonl", 3]'),
    ("model_folders", '"/models"'),
    ("remote/base_url", ["http", "x"]),
    ("remote/concurrency", "many"),
    ("remote/concurrency", "true"),
    ("timeline/series", ["prob"]),
    ("opt_ins", '{"some/model": 1}'),
    ("opt_ins", '{"some/model": "trust_remote_code"}'),
    ("opt_ins", '["trust_remote_code"]'),
    ("sampler", '{"temperature": ' + "[" * 500 + "]" * 500 + "}"),
    ("sampler", '{"stop": "abc"}'),
    # nested deeper than json reads: the last value of a name is the one the window test below starts with
    ("sampler", "[" * 100_000 + "]" * 100_000),
    ("recent_models", "[" * 100_000 + "]" * 100_000),
    ("opt_ins", '{"a": ' * 100_000 + "1" + "}" * 100_000),
    ("remote/concurrency", "[" * 100_000 + "]" * 100_000),
]


def open_file(path: Path) -> Preferences:
    return Preferences(QSettings(str(path), QSettings.Format.IniFormat))


def write_raw(path: Path, values: dict) -> None:
    raw = QSettings(str(path), QSettings.Format.IniFormat)
    for k, v in values.items():
        raw.setValue(k, v)
    raw.sync()


def warnings_about(caplog, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and repr(name) in r.getMessage()]


def test_the_examples_cover_every_preference():
    assert set(EXAMPLES) == set(PREFS)
    assert all(EXAMPLES[name] != p.default for name, p in PREFS.items())


@pytest.mark.parametrize("name", list(PREFS))
def test_every_preference_round_trips_through_the_file(tmp_path, name, caplog):
    prefs = open_file(tmp_path / "p.ini")
    prefs.set(name, EXAMPLES[name])
    prefs.save()
    assert open_file(tmp_path / "p.ini").get(name) == EXAMPLES[name]
    assert not caplog.records


def test_missing_preferences_read_as_their_defaults_silently(tmp_path, caplog):
    prefs = open_file(tmp_path / "empty.ini")
    assert {name: prefs.get(name) for name in PREFS} == {name: p.default for name, p in PREFS.items()}
    assert not caplog.records


def test_a_default_is_a_fresh_copy(tmp_path):
    prefs = open_file(tmp_path / "p.ini")
    prefs.get("opt_ins").setdefault("m", []).append("trust_remote_code")
    prefs.get("recent_models").append("x")
    assert prefs.get("opt_ins") == {} and prefs.get("recent_models") == []


@pytest.mark.parametrize(("name", "raw"), WRONG)
def test_a_wrong_type_reads_as_the_default_says_so_once_and_is_rewritten_at_save(tmp_path, caplog, name, raw):
    write_raw(tmp_path / "bad.ini", {name: raw})
    prefs = open_file(tmp_path / "bad.ini")
    assert prefs.get(name) == PREFS[name].default
    assert prefs.get(name) == PREFS[name].default
    assert len(warnings_about(caplog, name)) == 1
    prefs.save()
    caplog.clear()
    again = open_file(tmp_path / "bad.ini")
    assert again.store.value(name) is not None and again.get(name) == PREFS[name].default
    assert not caplog.records


def test_a_value_set_after_a_wrong_read_is_the_one_saved(tmp_path):
    write_raw(tmp_path / "bad.ini", {"recent_models": "5"})
    prefs = open_file(tmp_path / "bad.ini")
    assert prefs.get("recent_models") == []
    prefs.set("recent_models", ["owner/model"])
    prefs.save()
    assert open_file(tmp_path / "bad.ini").get("recent_models") == ["owner/model"]


@pytest.mark.skipif(sys.platform != "linux", reason="XDG_CONFIG_HOME is where platformdirs looks on Linux")
def test_by_default_preferences_live_in_the_user_config_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    prefs = Preferences()
    prefs.set("prompt", "kept")
    prefs.save()
    assert Path(prefs.store.fileName()) == tmp_path / "logitlab" / "preferences.ini"
    assert (tmp_path / "logitlab" / "preferences.ini").exists()


def test_the_offline_switch_travels_in_the_spec_not_the_environment(qtbot, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    bar = ModelBar()
    qtbot.addWidget(bar)
    bar.offline.setChecked(True)
    assert bar.spec().offline and "HF_HUB_OFFLINE" not in os.environ
    bar.offline.setChecked(False)
    assert not bar.spec().offline


def test_the_window_opens_and_generates_with_a_damaged_settings_file(qtbot, tiny_path, tmp_path, caplog):
    path = tmp_path / "damaged.ini"
    write_raw(path, dict(WRONG))
    store = QSettings(str(path), QSettings.Format.IniFormat)
    w = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), "torch"))
    qtbot.addWidget(w)
    w.show()
    assert w.prompt.prompt() == PREFS["prompt"].default
    assert w.sampler.settings().with_(seed=None) == SamplerSettings()
    assert w.model_bar.opt_ins == {} and not w.model_bar.offline.isChecked()
    assert warnings_about(caplog, "opt_ins") and warnings_about(caplog, "sampler")
    assert "nested too deeply to be read" in warnings_about(caplog, "sampler")[0]
    w.sampler.seed.setValue(3)
    qtbot.waitUntil(lambda: w.playground.info is not None, timeout=RUN_TIMEOUT)
    assert run(qtbot, w, max_tokens=4).reason in ("length", "eos")
    w.close()
    caplog.clear()
    reread = open_file(path)  # the save on close rewrote every damaged value
    assert all(reread.store.value(name) is not None for name in PREFS)
    values = {name: reread.get(name) for name in PREFS}
    assert not caplog.records
    assert values["recent_models"] == [str(tiny_path)] and values["model"] == str(tiny_path)
