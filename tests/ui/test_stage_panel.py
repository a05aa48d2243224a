"""The sampler panel's new parts on the real widgets (offscreen): the "More samplers" fold, the stage order picked by
engine or dragged, the logit bias picked from the vocabulary; each edit lands in the editing state."""

from __future__ import annotations

import json

from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QToolButton

from app.core.sampler.presets import SHIPPED
from app.core.settings import ENGINE_CHAINS, FIELDS, SamplerSettings, StageOrder, parse_order
from app.ui.panels.sampler_panel import SamplerPanel
from app.ui.panels.sliders import LabeledSlider
from app.ui.viewmodel.editing_state import EditingState


class Vocabulary:
    """A tokenizer of a few whole words (encode finds a word's id; anything else is two tokens)."""

    words = ("import", " os", " sys", "def", " re", "\n")

    def token_text(self, i: int) -> str:
        return self.words[i]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [self.words.index(text)] if text in self.words else [0, 0]


def panel(qtbot) -> tuple[SamplerPanel, EditingState]:
    state = EditingState()
    p = SamplerPanel(state)
    qtbot.addWidget(p)
    return p, state


def test_the_more_samplers_are_folded_and_each_writes_its_setting(qtbot):
    p, state = panel(qtbot)
    more = [f for f in FIELDS if f.more]
    assert more and not p.more.isVisibleTo(p)
    p.more_toggle.setChecked(True)
    assert p.more.isVisibleTo(p)
    p.editors["typical_p"].setValue(0.85)
    p.editors["epsilon_cutoff"].setValue(0.0003)  # four decimals: its step is 0.0001
    assert (state.settings.typical_p, state.settings.epsilon_cutoff) == (0.85, 0.0003)


def test_the_more_samplers_sliders_sit_in_the_main_sliders_columns(qtbot):
    p, _state = panel(qtbot)
    p.more_toggle.setChecked(True)
    p.resize(340, 1400)
    p.show()
    qtbot.waitExposed(p)
    sliders = [e for e in p.editors.values() if isinstance(e, LabeledSlider)]
    assert {f.name for f in FIELDS if f.more} <= {e.objectName() for e in sliders}
    starts = {e.slider.mapTo(p, QPoint(0, 0)).x() for e in sliders}
    ends = {e.slider.mapTo(p, QPoint(e.slider.width(), 0)).x() for e in sliders}
    resets = {b.mapTo(p, QPoint(0, 0)).x() for b in p.findChildren(QToolButton) if b.text() == "↺"}
    assert (len(starts), len(ends), len(resets)) == (1, 1, 1), (starts, ends, resets)


def test_an_engine_s_order_is_picked_and_shown_in_the_list(qtbot):
    p, state = panel(qtbot)
    p.order.setCurrentIndex(p.order.findData("mlx-lm"))
    assert state.settings.stage_order[:6] == ENGINE_CHAINS["mlx-lm"]
    assert p.stages.order() == state.settings.stage_order
    state.set_settings(SamplerSettings(order=StageOrder.TEMPERATURE_LAST))
    assert p.order.currentData() == "temperature-last" and p.stages.order()[-2:] == ("temperature", "mirostat")


def test_dragging_a_stage_makes_a_custom_order(qtbot):
    p, state = panel(qtbot)
    state.set_settings(SamplerSettings(top_k=10, top_p=0.9))
    names = list(p.stages.order())
    assert names.index("temperature") < names.index("top_k")
    item = p.stages.takeItem(names.index("temperature"))  # a drag is a move of the row: the model's rowsMoved
    p.stages.insertItem(p.stages.count() - 1, item)  # after XTC, before mirostat
    p.stages.model().rowsMoved.emit(p.stages.rootIndex(), 0, 0, p.stages.rootIndex(), p.stages.count())
    s = state.settings
    assert s.stage_order[-2] == "temperature" and s.order == StageOrder.TEMPERATURE_LAST
    assert p.order.currentData() == "temperature-last"  # this drag made the old temperature-last order
    item = p.stages.takeItem(p.stages.order().index("top_p"))
    p.stages.insertItem(0, item)
    p.stages.model().rowsMoved.emit(p.stages.rootIndex(), 0, 0, p.stages.rootIndex(), 0)
    assert state.settings.stage_order[0] == "top_p" and p.order.currentData() == "custom"
    assert state.settings.enabled_stages() == ("top_p", "top_k", "temperature")


def test_a_dragged_stage_list_is_numbered_top_to_bottom_again(qtbot):
    p, state = panel(qtbot)
    state.set_settings(SamplerSettings(top_k=10, top_p=0.9))
    min_p = p.stages.order().index("min_p")
    assert p.stages.model().moveRow(p.stages.rootIndex(), min_p, p.stages.rootIndex(), 0)  # what a drop does
    assert state.settings.stage_order[0] == "min_p"
    texts = [p.stages.item(i).text() for i in range(p.stages.count())]
    assert [t.split(".")[0] for t in texts] == [str(i + 1) for i in range(len(texts))]
    assert texts[0] == "1. min-p  (off)" and "5. temperature" in texts


def test_the_list_greys_the_stages_that_are_off(qtbot):
    p, state = panel(qtbot)
    state.set_settings(SamplerSettings(top_k=10))
    texts = [p.stages.item(i).text() for i in range(p.stages.count())]
    assert [t for t in texts if "(off)" not in t] == ["4. temperature", "6. top-k"]


def test_a_logit_bias_is_picked_by_text_or_id_and_a_bad_token_says_why(qtbot):
    p, state = panel(qtbot)
    p.bias.set_tokenizer(Vocabulary(), 6)
    p.bias.token.setText(" sys")
    p.bias.value.setValue(-7.5)
    p.bias.add()
    p.bias.token.setText("4")
    p.bias.value.setValue(3)
    p.bias.add()
    assert state.settings.logit_bias == ((2, -7.5), (4, 3.0))
    p.bias.token.setText("importos")
    p.bias.add()
    assert p.bias.error.isVisibleTo(p.bias) and "2 tokens here" in p.bias.error.text()
    assert p.bias.token.text() == "importos"  # what was typed stays
    p.bias._fill_vocabulary()
    assert "' sys' #2" in p.bias.completions.stringList()
    p.bias.list.setCurrentRow(0)
    qtbot.keyClick(p.bias.list, Qt.Key.Key_Delete)
    assert state.settings.logit_bias == ((4, 3.0),)


def test_a_preset_with_an_engine_order_names_it_in_the_box(qtbot):
    p, state = panel(qtbot)
    preset = next(x for x in SHIPPED if x.name == "llama.cpp server")
    state.set_settings(preset.apply(state.settings))
    assert p.order.currentData() == "llama.cpp" and state.settings.chain == parse_order("llama.cpp")[1]


def test_dry_s_breakers_are_a_json_list_and_a_bad_one_is_refused_with_its_reason(qtbot):
    p, state = panel(qtbot)
    assert json.loads(p.breakers.text()) == ["\n", ":", '"', "*"]
    p.breakers.setText('["\\n", "###"]')
    p.breakers.editingFinished.emit()
    assert state.settings.dry_breakers == ("\n", "###")
    p.breakers.setText("[oops")
    p.breakers.editingFinished.emit()
    assert "DRY breakers must be a JSON list" in state.settings_error and state.settings.dry_breakers == ("\n", "###")
    assert p.breakers.text() == "[oops"  # what was typed stays
