"""The editing state (app/ui/viewmodel/editing_state.py) and the widgets bound to it, each on its own: an edit in a
widget writes the state, a change of the state shows in every widget bound to it, and a value that does not change
emits nothing (no widget is redrawn in a loop)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.core.events import Message
from app.core.models.sources import ModelSpec
from app.core.sampler.presets import PresetStore
from app.core.settings import SamplerSettings, SettingsError
from app.ui.panels.model_bar import ModelBar
from app.ui.panels.presets_box import PresetsBox
from app.ui.panels.prompt_editor import PromptEditor
from app.ui.panels.sampler_panel import SamplerPanel
from app.ui.viewmodel.editing_state import UI_MAX_SEED, EditingState, Prompt
from app.ui.viewmodel.playground import Playground


def emitted(signal) -> list:
    seen: list = []
    signal.connect(lambda *args: seen.append(args))
    return seen


# the state alone ------------------------------------------------------------------------------------------------
def test_each_part_emits_its_changed_signal_once_per_change_and_never_for_the_same_value(qtbot):
    state = EditingState()
    prompts, settings, models, selections = (emitted(s) for s in (
        state.prompt_changed, state.settings_changed, state.model_changed, state.selection_changed))
    state.set_prompt(Prompt("Hello"))
    state.set_prompt(Prompt("Hello"))
    state.set_settings(state.settings.with_(temperature=0.3))
    state.set_settings(state.settings.with_(temperature=0.3))
    state.set_model(ModelSpec("/models/a", "torch"))
    state.set_model(ModelSpec("/models/a", "torch"))
    state.set_model(ModelSpec("/models/a", "torch", offline=True))  # a field `==` leaves out still counts
    state.select(None, 3)
    state.select(None, 3)
    assert prompts == [(Prompt("Hello"),)] and len(settings) == 1 and len(models) == 2 and len(selections) == 1
    assert state.model.offline and state.step == 3 and state.run is None


def test_settings_keep_their_seed_in_the_seed_boxs_range_and_an_invalid_edit_refuses_a_run(qtbot):
    state = EditingState()
    state.set_settings(SamplerSettings(seed=7))
    state.set_settings(SamplerSettings(temperature=0.5))  # no seed: the one there stays
    assert state.settings.seed == 7 and state.settings.temperature == 0.5
    state.set_settings(SamplerSettings(seed=UI_MAX_SEED + 5))
    assert state.settings.seed == UI_MAX_SEED
    state.set_settings_error("top_p must be a number from 0 to 1, got 2")
    with pytest.raises(SettingsError, match="top_p"):
        state.valid_settings()
    state.set_settings(SamplerSettings(seed=7))
    assert state.valid_settings().seed == 7


def test_a_locked_seed_is_every_runs_and_an_unlocked_one_is_drawn_anew(qtbot):
    state = EditingState()
    state.set_settings(SamplerSettings(seed=11))
    assert state.seed_locked and state.next_run_seed() == 11 == state.next_run_seed()
    state.set_seed_locked(False)
    seeds = {state.next_run_seed() for _ in range(5)}
    assert len(seeds) > 1 and state.settings.seed in seeds  # the seed drawn is the one shown


# the sampler panel and the presets box --------------------------------------------------------------------------
def test_two_panels_on_one_state_show_each_others_edits(qtbot):
    state = EditingState()
    a, b = SamplerPanel(state), SamplerPanel(state)
    qtbot.addWidget(a)
    qtbot.addWidget(b)
    a.editors["top_k"].setValue(17)
    b.stop_edit.setPlainText("\\n\\n")
    b.lock.setChecked(False)
    assert state.settings.top_k == 17 and state.settings.stop == ("\n\n",) and not state.seed_locked
    assert b.editors["top_k"].value() == 17 and a.stop_edit.toPlainText() == "\\n\\n" and not a.lock.isChecked()
    state.set_settings(SamplerSettings(temperature=1.25, seed=5))
    assert a.settings() == b.settings() == state.settings and a.seed.value() == 5


def test_the_panel_marks_a_servers_settings_when_the_states_model_is_on_a_server(qtbot):
    state = EditingState()
    panel = SamplerPanel(state)
    qtbot.addWidget(panel)
    panel.show()
    state.set_model(ModelSpec("", "remote", base_url="http://127.0.0.1:9/v1"))
    assert all(n.isVisible() for n in panel.notes.values()) and not panel.order.isEnabled()
    state.set_model(ModelSpec())
    assert not any(n.isVisible() for n in panel.notes.values()) and panel.order.isEnabled()


def test_the_presets_box_sets_and_names_the_states_settings_without_a_panel(qtbot, tmp_path):
    state = EditingState()
    state.set_settings(SamplerSettings(seed=9, max_tokens=33))
    box = PresetsBox(state, PresetStore(tmp_path / "presets.json"))
    qtbot.addWidget(box)
    box.choose("balanced")
    s = state.settings
    assert (s.temperature, s.top_k, s.top_p, s.seed, s.max_tokens) == (0.7, 40, 0.9, 9, 33)  # seed, length stay
    state.set_settings(s.with_(temperature=1.0))
    assert box.modified and box.combo.currentText() == "balanced (modified)"
    state.set_settings(s.with_(temperature=0.2, top_k=0, top_p=0.9))
    assert box.combo.currentText() == "precise" and not box.modified  # any preset the settings hold is named


# the prompt editor ------------------------------------------------------------------------------------------------
def test_the_prompt_editor_writes_its_text_messages_and_mode_and_shows_the_states(qtbot):
    state = EditingState()
    editor = PromptEditor(state)
    qtbot.addWidget(editor)
    editor.completion.setPlainText("def f():")
    assert state.prompt == Prompt("def f():")
    messages = (Message("system", "Be brief."), Message("user", "Hi"), Message("assistant", "Hello"))
    state.set_prompt(Prompt("def f():", messages, chat=True))
    assert editor.chat_mode and editor.chat.messages() == messages and editor.messages() == messages
    assert [t.role.currentText() for t in editor.chat.turns] == ["user", "assistant"]
    editor.chat.turns[0].text.setPlainText("Hi there")
    assert state.prompt.messages[1] == Message("user", "Hi there")
    editor.tabs.setCurrentIndex(0)
    assert state.prompt.chat_messages is None and state.prompt.messages[1].content == "Hi there"  # both kept


def test_an_edit_coming_back_from_the_state_leaves_the_cursor_where_it_is(qtbot):
    editor = PromptEditor()
    qtbot.addWidget(editor)
    editor.completion.setPlainText("abcdef")
    cursor = editor.completion.textCursor()
    cursor.setPosition(3)
    editor.completion.setTextCursor(cursor)
    editor.completion.insertPlainText("X")
    assert editor.state.prompt.text == "abcXdef" and editor.completion.textCursor().position() == 4


# the model bar --------------------------------------------------------------------------------------------------
def test_the_model_bar_writes_its_spec_and_shows_the_states_model_and_backend(qtbot):
    state = EditingState()
    bar = ModelBar(state)
    qtbot.addWidget(bar)
    assert state.model == bar.spec()
    bar.model.setCurrentText("/models/a")
    bar.offline.setChecked(True)
    assert state.model.source == "/models/a" and state.model.offline
    state.set_model(replace(state.model, source="/models/b"))
    assert bar.source() == "/models/b" and state.model == bar.spec()
    bar.allow("/models/b", "trust_remote_code")
    assert state.model.options.trust_remote_code


# requests read the state ----------------------------------------------------------------------------------------
def test_a_request_is_the_editing_state_and_an_invalid_setting_is_refused_with_its_reason(qtbot):
    pg = Playground()
    try:
        e = pg.editing
        e.set_prompt(Prompt("Hi", (Message("user", "Hello"),), chat=True))
        e.set_settings(SamplerSettings(top_k=3, seed=4))
        e.set_model(ModelSpec("/models/a", "torch"))
        request = pg.make_request()
        assert (request.prompt, request.messages, request.model.source) == ("Hi", (Message("user", "Hello"),),
                                                                             "/models/a")
        assert request.settings == SamplerSettings(top_k=3, seed=4)
        reasons = emitted(pg.refused)
        e.set_settings_error("top_k must be an integer from 0 to 1000, got -1")
        assert not pg.generate() and reasons == [("top_k must be an integer from 0 to 1000, got -1",)]
        assert not pg.busy
    finally:
        pg.worker.close()
