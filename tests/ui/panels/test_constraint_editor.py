"""The constraint editor as a person uses it: typing checks after a pause (one red line naming the position, or a
green "valid"); a valid constraint becomes the settings' and a run's; what was typed is never lost (an error, a
change of kind, a new seed, an example: Ctrl+Z); presets and sessions keep the constraint and bring it back."""

from __future__ import annotations

import json

import pytest

from app.core.sampler.presets import Preset
from app.core.settings import SamplerSettings
from app.core.stage_inputs import Constraint
from app.ui.panels.constraint.editor import INVALID, VALID, ConstraintEditor
from app.ui.panels.constraint.examples import EXAMPLES, PERSON_SCHEMA
from app.ui.panels.sampler_panel import SamplerPanel

BAD_SCHEMA = '{\n  "type": "object",\n  "properties": {"name" {"type": "string"}}\n}'


@pytest.fixture
def panel(qtbot) -> SamplerPanel:
    p = SamplerPanel()
    qtbot.addWidget(p)
    p.constraint.toggle.setChecked(True)
    return p


def type_in(qtbot, editor: ConstraintEditor, kind: str, text: str) -> None:
    editor.kind.setCurrentIndex(editor.kind.findData(kind))
    editor.text.setPlainText(text)
    with qtbot.waitSignal(editor.edited, timeout=2000):  # after the pause in typing
        pass


def test_an_invalid_schema_says_where_in_one_red_line_and_refuses_a_run(qtbot, panel):
    editor = panel.constraint.editor
    type_in(qtbot, editor, "json_schema", BAD_SCHEMA)
    assert editor.status.text() == "the JSON schema is not JSON at line 3, column 25: Expecting ':' delimiter"
    assert INVALID in editor.status.styleSheet()
    assert panel.state.settings_error == ("constraint: the JSON schema is not JSON at line 3, column 25: Expecting "
                                          "':' delimiter")
    assert editor.text.toPlainText() == BAD_SCHEMA  # nothing typed is lost


def test_an_invalid_regex_or_grammar_names_its_position(qtbot, panel):
    type_in(qtbot, panel.constraint.editor, "regex", r"\d{4}-(0[1-9]")
    assert panel.constraint.editor.status.text() == "the regular expression, at character 7: unclosed group"
    type_in(qtbot, panel.constraint.editor, "lark", "start: expr\nexpr: NUMBER +\n")
    assert panel.constraint.editor.status.text() == 'the Lark grammar, line 2, column 7: unknown name: "NUMBER"'
    assert INVALID in panel.constraint.editor.status.styleSheet()


def test_a_valid_schema_is_green_and_the_settings_carry_it(qtbot, panel):
    editor = panel.constraint.editor
    type_in(qtbot, editor, "json_schema", PERSON_SCHEMA)
    assert editor.status.text() == "valid" and VALID in editor.status.styleSheet()
    editor.place.setCurrentIndex(editor.place.findData("on_reject"))
    assert panel.state.valid_settings().constraint == Constraint("json_schema", PERSON_SCHEMA, "on_reject")
    assert panel.constraint.toggle.text() == "Constraint: JSON schema"


def test_an_edit_not_yet_valid_survives_a_new_seed_and_comes_back_valid(qtbot, panel):
    editor = panel.constraint.editor
    type_in(qtbot, editor, "choices", "yes\nno")
    type_in(qtbot, editor, "json_schema", "{")  # the same text box: the choices' text is replaced by typing only
    panel.new_seed()  # the state's settings change (and are shown) while the edit is not valid
    assert editor.text.toPlainText() == "{" and editor.kind.currentData() == "json_schema"
    assert panel.state.settings.constraint == Constraint("choices", "yes\nno")  # the last valid, until fixed
    type_in(qtbot, editor, "json_schema", '{"type": "string"}')
    assert panel.state.valid_settings().constraint == Constraint("json_schema", '{"type": "string"}')


def test_off_keeps_the_text_and_an_example_can_be_undone(qtbot, panel):
    editor = panel.constraint.editor
    type_in(qtbot, editor, "regex", "[a-z]+")
    editor.kind.setCurrentIndex(0)
    assert panel.state.valid_settings().constraint is None and editor.text.toPlainText() == "[a-z]+"
    _label, kind, text = EXAMPLES[3]
    editor.use_example(kind, text)
    assert panel.state.valid_settings().constraint == Constraint("lark", text)
    editor.text.undo()
    assert editor.text.toPlainText() == "[a-z]+"


def test_every_example_is_valid(qtbot, panel):
    for _label, kind, text in EXAMPLES:
        panel.constraint.editor.use_example(kind, text)
        assert panel.constraint.editor.status.text() == "valid", kind
        assert panel.state.valid_settings().constraint == Constraint(kind, text)


def test_settings_from_outside_are_shown_and_unfold_the_section(qtbot):
    panel = SamplerPanel()
    qtbot.addWidget(panel)
    c = Constraint("regex", r"\d+", "on_reject")
    panel.state.set_settings(SamplerSettings(constraint=c, seed=1))
    editor = panel.constraint.editor
    assert (editor.kind.currentData(), editor.text.toPlainText(), editor.place.currentData()) == ("regex", r"\d+",
                                                                                                 "on_reject")
    assert panel.constraint.toggle.isChecked() and panel.state.valid_settings().constraint == c


def test_a_preset_keeps_its_constraint_and_one_without_leaves_it_be():
    c = Constraint("choices", "yes\nno")
    saved = Preset.from_dict(json.loads(json.dumps(Preset("mine", SamplerSettings(top_k=5, constraint=c)).to_dict())))
    assert saved.settings.constraint == c
    assert saved.apply(SamplerSettings()).constraint == c
    assert Preset("plain", SamplerSettings(top_k=5)).apply(SamplerSettings(constraint=c)).constraint == c


def test_a_session_keeps_the_constraint(qtbot, window, tmp_path):
    editor = window.sampler.constraint.editor
    type_in(qtbot, editor, "json_schema", PERSON_SCHEMA)
    assert window.sessions.save_as(tmp_path / "c.jsonl")
    window.sampler.set_settings(SamplerSettings(seed=3))
    assert editor.kind.currentData() == "" and editor.text.toPlainText() == PERSON_SCHEMA  # off, the text kept
    assert window.sessions.open(tmp_path / "c.jsonl")
    assert window.sampler.state.valid_settings().constraint == Constraint("json_schema", PERSON_SCHEMA)
    assert editor.text.toPlainText() == PERSON_SCHEMA and editor.status.text() == "valid"
