"""Presets, exports and view code, through the real window on the tiny model: a preset sets the sliders and the
combo says when they leave it; the user's presets survive a restart and a damaged file is reported, never
overwritten; every export writes a file that parses; the code dialog shows every engine and copies it."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage

from app.core.record.export import CANDIDATE_COLUMNS, STEP_COLUMNS
from app.core.record.trace import RunTrace
from app.core.sampler.presets import PresetStore, default_path
from app.core.settings import StageOrder
from tests.core.record.test_export import spans_of

RUN_TIMEOUT = 60_000


@pytest.fixture(autouse=True)
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's data folder (presets.json) in a temporary folder: platformdirs reads XDG_DATA_HOME."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data"


def run(qtbot, w, max_tokens: int = 12) -> None:
    w.prompt.set_prompt("Hello")
    w.sampler.editors["max_tokens"].setValue(max_tokens)
    with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT):
        qtbot.keyClick(w.prompt.completion, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)


def test_the_presets_combo_sits_above_the_sliders_and_sets_them(window):
    box, panel = window.sampler.presets, window.sampler
    assert panel.layout().itemAt(0).widget() is box
    seed = panel.seed.value()
    box.combo.activated.emit(box.combo.findData("llama.cpp server"))  # as a click on the item does
    s = panel.settings()
    assert (s.temperature, s.top_k, s.top_p, s.min_p) == pytest.approx((0.8, 40, 0.95, 0.05))
    assert s.order == StageOrder.TEMPERATURE_LAST and panel.seed.value() == seed
    assert box.combo.currentText() == "llama.cpp server" and not box.modified
    panel.editors["temperature"].setValue(1.3)
    assert box.combo.currentText() == "llama.cpp server (modified)" and box.modified
    panel.editors["temperature"].setValue(0.8)
    assert box.combo.currentText() == "llama.cpp server"


def test_a_saved_preset_survives_a_restart_and_can_be_renamed_exported_and_deleted(qtbot, window, tmp_path):
    box, panel = window.sampler.presets, window.sampler
    panel.editors["temperature"].setValue(0.42)
    panel.editors["top_k"].setValue(17)
    box.ask_name = lambda title, name: "my code preset"
    box.save_as()
    assert box.combo.currentText() == "my code preset" and not box.modified
    assert PresetStore(default_path()).get("my code preset").settings.top_k == 17  # on disk, for the next start
    box.ask_name = lambda title, name: "renamed"
    box.rename()
    out = tmp_path / "shared"
    box.ask_save = lambda title, name: str(out) + ".json"
    box.export_current()
    assert [p["name"] for p in json.loads(out.with_suffix(".json").read_text())["presets"]] == ["renamed"]
    box.confirm = lambda question: True
    box.delete()
    assert box.combo.findData("renamed") == -1 and PresetStore(default_path()).user == []
    box.ask_open = lambda title: str(out) + ".json"
    box.import_presets()
    assert box.combo.currentText() == "renamed" and panel.settings().top_k == 17


def test_changing_a_shipped_preset_is_refused_with_one_line(qtbot, window):
    box = window.sampler.presets
    box.choose("balanced")
    box.ask_name = lambda title, name: "creative"
    box.save_as()
    assert window.banner.isVisible() and "shipped preset" in window.banner.label.text()


def test_a_damaged_presets_file_is_reported_at_start_and_never_overwritten(qtbot, tiny_path, store, data_home):
    from app.core.models.sources import ModelSpec
    from app.ui.main_window import MainWindow

    path = default_path()
    path.parent.mkdir(parents=True)
    path.write_text('{"format": "logitlab-presets", "version": 1, "pres')
    w = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), "torch"))
    qtbot.addWidget(w)
    w.show()
    assert w.banner.isVisible() and "damaged" in w.banner.label.text()
    w.sampler.presets.ask_name = lambda title, name: "mine"
    w.sampler.presets.save_as()
    assert "not saved until" in w.banner.label.text() and path.read_text().endswith('"pres')
    assert w.sampler.presets.combo.findData("precise") >= 0  # the shipped ones are still there
    w.close()


def export(window, key: str, path: Path) -> Path:
    window.exporter.ask_save = lambda title, name, filters: str(path)
    window.exporter.actions[key].trigger()
    return path


def test_every_export_writes_a_file_that_parses(qtbot, window, tmp_path):
    run(qtbot, window)
    trace = window.playground.trace
    window.exporter.enable()
    assert all(a.isEnabled() for a in window.exporter.actions.values())
    for key in ("step_png", "timeline_png"):
        image = QImage(str(export(window, key, tmp_path / f"{key}.png")))
        assert not image.isNull() and image.width() >= window.timeline.width()
    for key in ("step_svg", "timeline_svg"):
        root = ET.parse(export(window, key, tmp_path / f"{key}.svg")).getroot()
        assert root.tag.endswith("svg") and len(list(root.iter())) > 20
    for key, suffix in (("markdown", ".md"), ("html", ".html")):
        page = export(window, key, tmp_path / f"out{suffix}").read_text(encoding="utf-8")
        assert "".join(text for text, _, _ in spans_of(page)) == trace.text
    saved = RunTrace.load(export(window, "jsonl", tmp_path / "run.jsonl"))
    assert saved.token_ids == trace.token_ids
    steps = list(csv.DictReader(io.StringIO(export(window, "steps_csv", tmp_path / "s.csv").read_text())))
    assert tuple(steps[0]) == STEP_COLUMNS and [int(r["token_id"]) for r in steps] == trace.token_ids
    cands = list(csv.DictReader(io.StringIO(export(window, "candidates_csv", tmp_path / "c.csv").read_text())))
    assert tuple(cands[0]) == CANDIDATE_COLUMNS and len(cands) == sum(st.top_n for st in trace.steps)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary left


def test_an_export_adds_its_suffix_and_a_failed_one_is_one_line(qtbot, window, tmp_path):
    window.exporter.actions["html"].trigger()  # nothing has run yet
    assert "Nothing to export yet" in window.banner.label.text()
    run(qtbot, window, max_tokens=4)
    assert export(window, "markdown", tmp_path / "notes").name == "notes"
    assert (tmp_path / "notes.md").exists()
    export(window, "html", tmp_path / "missing" / "out.html")
    assert window.banner.isVisible() and "Could not write" in window.banner.label.text()


def test_view_code_shows_every_engine_with_the_panel_s_settings_and_copies(qtbot, window):
    window.prompt.set_prompt("def add(a, b):")
    window.sampler.presets.choose("creative")
    window.code_action.trigger()
    dialog = window.code_action.dialog
    assert dialog.isVisible()
    titles = [dialog.tabs.tabText(i) for i in range(dialog.tabs.count())]
    assert titles == ["mlx-lm", "transformers", "OpenAI JSON", "OpenAI Python", "curl", "llama.cpp"]
    mlx = dialog.editors["mlx-lm"].toPlainText()
    assert "prompt = 'def add(a, b):'" in mlx and "temp=1.2" in mlx and "min_p=0.05" in mlx
    assert f"mx.random.seed({window.sampler.seed.value()})" in mlx
    body = json.loads(dialog.editors["OpenAI JSON"].toPlainText())
    assert body["temperature"] == 1.2 and body["min_p"] == 0.05 and body["logprobs"] == 20
    qtbot.mouseClick(dialog.copy_buttons["transformers"], Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == dialog.editors["transformers"].toPlainText()
    assert dialog.copy_buttons["transformers"].text() == "Copied"
    dialog.close()


def test_view_code_in_chat_mode_sends_llama_cpp_the_rendered_template(qtbot, window):
    window.prompt.tabs.setCurrentIndex(1)
    window.prompt.chat.turns[0].text.setPlainText("Hi there")
    window.code_action.trigger()
    editors = window.code_action.dialog.editors
    body = json.loads(editors["llama.cpp"].toPlainText().split("<<'JSON'\n")[1].split("\nJSON")[0])
    assert body["prompt"] == "<|user|>Hi there\n<|assistant|>"  # the tiny model's template, as the app sends it
    assert json.loads(editors["OpenAI JSON"].toPlainText())["messages"] == [{"role": "user", "content": "Hi there"}]
    assert "apply_chat_template" in editors["transformers"].toPlainText()
