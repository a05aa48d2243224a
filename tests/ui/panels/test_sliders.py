"""The labelled sliders (app/ui/panels/sliders.py): slider and box always show one value, whichever part changed it
(keys, wheel, typing, code), and `valueChanged` fires once per change."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication

from app.ui.panels.sliders import LabeledDoubleSlider, LabeledSlider


@pytest.fixture
def temperature(qtbot) -> LabeledDoubleSlider:
    """Set up as the sampler panel sets up its float rows."""
    w = LabeledDoubleSlider()
    qtbot.addWidget(w)
    w.setRange(0.0, 2.0)
    w.setDecimals(2)
    w.setSingleStep(0.01)
    w.setValue(0.8)
    w.show()
    return w


def changes(w: LabeledSlider) -> list:
    got: list = []
    w.valueChanged.connect(got.append)
    return got


def wheel(widget, notches: int) -> None:
    pos = QPointF(widget.width() / 2, widget.height() / 2)
    ev = QWheelEvent(pos, widget.mapToGlobal(pos), QPoint(0, 0), QPoint(0, 120 * notches), Qt.MouseButton.NoButton,
                     Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, ev)


def test_a_value_set_in_code_shows_in_both_parts_and_is_kept_as_given(temperature):
    got = changes(temperature)
    temperature.setValue(0.95 + 1e-9)
    assert temperature.value() == 0.95 + 1e-9 and got == [0.95 + 1e-9]  # a preset's value, not rounded away
    assert temperature.box.text() == "0.95" and temperature.slider.value() == 95
    temperature.setValue(0.95 + 1e-9)
    assert len(got) == 1  # no change, no signal


def test_arrow_keys_on_the_slider_move_one_step(qtbot, temperature):
    got = changes(temperature)
    qtbot.keyClick(temperature.slider, Qt.Key.Key_Right)
    assert temperature.value() == pytest.approx(0.81) and temperature.box.text() == "0.81" and len(got) == 1
    qtbot.keyClick(temperature.slider, Qt.Key.Key_End)
    assert temperature.value() == 2.0 and temperature.box.text() == "2.00"


def test_the_wheel_on_the_slider_moves_it(temperature):
    got = changes(temperature)
    wheel(temperature.slider, 1)
    assert temperature.value() > 0.8 and got == [temperature.value()]
    assert temperature.box.value() == pytest.approx(temperature.value())


def test_typing_in_the_box_applies_on_enter(qtbot, temperature):
    got = changes(temperature)
    temperature.box.setFocus()
    temperature.box.lineEdit().selectAll()
    qtbot.keyClicks(temperature.box, "1.37")
    assert temperature.value() == 0.8 and got == []  # half-typed: not yet
    qtbot.keyClick(temperature.box, Qt.Key.Key_Return)
    assert temperature.value() == 1.37 and temperature.slider.value() == 137 and got == [1.37]


def test_values_outside_the_range_are_clamped(temperature):
    temperature.setValue(5)
    assert temperature.value() == 2.0
    temperature.setValue(-1)
    assert temperature.value() == 0.0


def test_an_integer_slider_holds_integers(qtbot):
    w = LabeledSlider()
    qtbot.addWidget(w)
    w.setRange(0, 200)
    got = changes(w)
    w.setValue(12)
    assert (w.value(), w.slider.value(), w.box.text(), got) == (12, 12, "12", [12])
    assert isinstance(w.value(), int)
    w.box.setFocus()
    w.box.lineEdit().selectAll()
    qtbot.keyClicks(w.box, "150")
    qtbot.keyClick(w.box, Qt.Key.Key_Return)
    assert (w.value(), w.slider.value(), got) == (150, 150, [12, 150])


def test_the_box_is_as_wide_as_the_widest_value(qtbot):
    narrow, wide = LabeledDoubleSlider(), LabeledDoubleSlider()
    for w, (lo, hi) in ((narrow, (0.0, 1.0)), (wide, (-2.0, 2.0))):
        qtbot.addWidget(w)
        w.setRange(lo, hi)
    fm = narrow.box.fontMetrics()
    assert narrow.box.width() >= fm.horizontalAdvance("1.00") and wide.box.width() > narrow.box.width()


def test_a_slider_may_end_before_its_box_and_a_value_past_its_end_is_kept_whole(qtbot):
    w = LabeledSlider()
    qtbot.addWidget(w)
    w.setRange(0, 2**31 - 1)
    w.setSliderMaximum(200)
    got = changes(w)
    w.setValue(500)
    assert (w.value(), w.box.text(), w.slider.value(), w.slider.maximum(), got) == (500, "500", 200, 200, [500])
    w.slider.setValue(50)  # a drag: within the slider's part of the range
    assert (w.value(), w.box.text(), got) == (50, "50", [500, 50])


def test_top_k_from_a_preset_past_the_sliders_end_is_not_clamped_by_the_panel(qtbot):
    from app.core.settings import SamplerSettings
    from app.ui.panels.sampler_panel import SamplerPanel

    panel = SamplerPanel()
    qtbot.addWidget(panel)
    panel.set_settings(SamplerSettings(top_k=5000, temperature=0.5))
    top_k = panel.editors["top_k"]
    assert panel.state.settings.top_k == 5000 and (top_k.value(), top_k.slider.value()) == (5000, 200)
    panel.editors["temperature"].setValue(0.7)  # another edit keeps it whole
    assert panel.state.settings.top_k == 5000 and panel.state.settings.temperature == 0.7
