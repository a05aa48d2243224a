"""Presets: named sampler settings, shipped and the user's own, kept in one versioned file that is written
atomically and never overwritten when it cannot be read; engine presets hold each engine's real defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.sampler.presets import (
    PRESET_FIELDS,
    SHIPPED,
    Preset,
    PresetError,
    PresetFileError,
    PresetStore,
    dumps,
    loads,
)
from app.core.settings import SamplerSettings, StageOrder

MINE = SamplerSettings(temperature=0.55, top_k=30, top_p=0.85, min_p=0.02, repetition_penalty=1.15,
                       frequency_penalty=0.3, presence_penalty=-0.2, order=StageOrder.TEMPERATURE_LAST)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "presets.json"


def shipped(name: str) -> Preset:
    return next(p for p in SHIPPED if p.name == name)


def test_the_shipped_presets_are_named_valid_and_distinct():
    names = [p.name for p in SHIPPED]
    assert {"precise", "balanced", "creative", "llama.cpp server", "mlx-lm", "OpenAI / vLLM"} <= set(names)
    assert any(n.startswith("transformers") for n in names) and len(set(names)) == len(names)
    assert len({tuple(p.values().items()) for p in SHIPPED}) == len(SHIPPED)
    assert all(p.shipped and p.note for p in SHIPPED)


def test_mlx_lm_preset_is_mlx_lm_s_own_defaults():
    generate = pytest.importorskip("mlx_lm.generate")
    s = shipped("mlx-lm").settings
    assert s.temperature == generate.DEFAULT_TEMP and s.min_p == generate.DEFAULT_MIN_P
    assert s.top_k == generate.DEFAULT_TOP_K and s.top_p == generate.DEFAULT_TOP_P
    assert s.order == StageOrder.TEMPERATURE_LAST  # make_sampler filters log-probabilities, then divides by temp


def test_transformers_presets_are_generation_config_defaults():
    from transformers import GenerationConfig

    d = GenerationConfig._get_default_generation_params()
    assert d["do_sample"] is False and shipped("transformers generate()").settings.greedy
    s = shipped("transformers do_sample=True").settings
    assert (s.temperature, s.top_k, s.top_p, s.repetition_penalty) == (
        d["temperature"], d["top_k"], d["top_p"], d["repetition_penalty"])
    assert s.order == StageOrder.TEMPERATURE_FIRST


def test_applying_a_preset_keeps_seed_length_and_stop_strings():
    current = SamplerSettings(seed=42, max_tokens=77, stop=("\n\n",))
    applied = shipped("llama.cpp server").apply(current)
    assert (applied.seed, applied.max_tokens, applied.stop) == (42, 77, ("\n\n",))
    assert shipped("llama.cpp server").matches(applied) and not shipped("balanced").matches(applied)
    assert shipped("llama.cpp server").matches(applied.with_(top_p=0.95 + 1e-9, seed=1))  # a slider's rounding
    assert not shipped("llama.cpp server").matches(applied.with_(top_p=0.94))


def test_a_saved_preset_reads_back_equal_from_a_new_store(path: Path):
    store = PresetStore(path)
    assert store.user == [] and store.error is None and not path.exists()
    store.save("  mine  ", MINE.with_(seed=5, max_tokens=9))
    again = PresetStore(path)
    assert [p.name for p in again.user] == ["mine"] and again.get("mine").values() == Preset("", MINE).values()
    assert again.presets()[: len(SHIPPED)] == list(SHIPPED)
    assert json.loads(path.read_text())["version"] == 1 and [p.name for p in path.parent.iterdir()] == [path.name]


def test_saving_under_a_taken_user_name_replaces_it_in_place(path: Path):
    store = PresetStore(path)
    store.save("a", MINE)
    store.save("b", MINE)
    store.save("a", MINE.with_(temperature=1.5))
    assert [p.name for p in PresetStore(path).user] == ["a", "b"]
    assert PresetStore(path).get("a").settings.temperature == 1.5


def test_rename_and_delete_change_only_user_presets(path: Path):
    store = PresetStore(path)
    store.save("a", MINE)
    store.save("b", MINE)
    store.rename("a", "c")
    store.delete("b")
    assert [p.name for p in PresetStore(path).user] == ["c"]
    for bad in (lambda: store.rename("c", "precise"), lambda: store.rename("precise", "x"),
                lambda: store.delete("balanced"), lambda: store.save("creative", MINE),
                lambda: store.delete("nothing"), lambda: store.save("   ", MINE),
                lambda: store.save("two\nlines", MINE)):
        with pytest.raises(PresetError):
            bad()
    assert [p.name for p in PresetStore(path).user] == ["c"]


def test_export_then_import_adds_the_presets_renaming_clashes(path: Path, tmp_path: Path):
    store = PresetStore(path)
    store.save("mine", MINE)
    out = tmp_path / "shared.json"
    store.export(out, ["mine", "creative"])
    assert [p["name"] for p in json.loads(out.read_text())["presets"]] == ["creative", "mine"]
    assert store.import_file(out) == ["creative (2)", "mine (2)"]
    got = PresetStore(path)
    assert [p.name for p in got.user] == ["mine", "creative (2)", "mine (2)"]
    assert got.get("mine (2)").values() == got.get("mine").values() and not got.get("creative (2)").shipped


def test_a_damaged_file_is_reported_never_overwritten(path: Path):
    path.parent.mkdir(parents=True)
    path.write_text('{"format": "logitlab-presets", "version": 1, "presets": [{"name": "x", "sett')
    store = PresetStore(path)
    assert store.error and "damaged" in store.error and str(path) in store.error
    assert store.presets() == list(SHIPPED)
    with pytest.raises(PresetFileError, match="not saved until"):
        store.save("mine", MINE)
    assert path.read_text().endswith('"sett')


def test_a_file_from_a_newer_version_is_refused_and_kept(path: Path):
    path.parent.mkdir(parents=True)
    newer = json.dumps({"format": "logitlab-presets", "version": 2, "presets": [], "folders": {}})
    path.write_text(newer)
    store = PresetStore(path)
    assert "newer Logit Lab" in store.error
    with pytest.raises(PresetFileError):
        store.save("mine", MINE)
    assert path.read_text() == newer


@pytest.mark.parametrize(("text", "message"), [
    ("[]", "not a Logit Lab presets file"),
    ('{"format": "logitlab-presets", "version": 1, "presets": {}}', "no list of presets"),
    ('{"format": "logitlab-presets", "version": 1, "presets": [{"name": "x", "settings": {"top_p": 3}}]}',
     "top_p must be a number from 0 to 1"),
    ('{"format": "logitlab-presets", "version": 1, "presets": [{"name": "x", "settings": {"order": "sideways"}}]}',
     "preset 1"),
    ('{"format": "logitlab-presets", "version": 1, "presets": [{"name": "", "settings": {}}]}', "needs a name"),
    ("[" * 100_000 + "]" * 100_000, r"is damaged \(not JSON: nested too deeply to be read\)"),
    ('{"format": "logitlab-presets", "version": 1, "presets": [' + '{"a": ' * 100_000, "nested too deeply"),
    ('{"format": "logitlab-presets", "version": 1, "presets": [{"name": "x", "settings": {"temperature": '
     + "[" * 500 + "]" * 500 + "}}]}", r"preset 1: settings.temperature must be a number, got \[\[\[\["),
    ('{"format": "logitlab-presets", "version": 1, "presets": [{"name": "x", "settings": {"top_k": "12"}}]}',
     'preset 1: settings.top_k must be a number, got "12"'),
    ('{"format": "logitlab-session", "version": 1}', "a Logit Lab session file, not a presets file"),
])
def test_bad_contents_name_the_file_and_the_problem(text: str, message: str):
    with pytest.raises(PresetFileError, match=message) as e:
        loads(text, "shared.json")
    assert str(e.value).startswith("shared.json")


def test_a_file_nested_too_deeply_reads_as_the_shipped_presets_and_is_kept(path: Path):
    path.parent.mkdir(parents=True)
    path.write_text("[" * 100_000 + "]" * 100_000)
    store = PresetStore(path)
    assert store.error == f"{path} is damaged (not JSON: nested too deeply to be read)"
    assert store.presets() == list(SHIPPED)
    with pytest.raises(PresetFileError):
        store.save("mine", MINE)
    assert path.read_text().startswith("[[[")


def test_importing_a_bad_file_changes_nothing(path: Path, tmp_path: Path):
    store = PresetStore(path)
    store.save("mine", MINE)
    before = path.read_bytes()
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe not json")
    with pytest.raises(PresetFileError, match=r"bad\.json"):
        store.import_file(bad)
    with pytest.raises(PresetFileError, match="cannot be read"):
        store.import_file(tmp_path / "missing.json")
    assert path.read_bytes() == before and [p.name for p in store.user] == ["mine"]


def test_the_file_holds_only_the_preset_fields():
    text = dumps([Preset("mine", MINE.with_(seed=3, max_tokens=5, stop=("x",)))])
    assert set(json.loads(text)["presets"][0]["settings"]) == set(PRESET_FIELDS)
    assert loads(text)[0].values() == Preset("", MINE).values()
