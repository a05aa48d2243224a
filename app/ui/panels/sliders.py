"""Labelled sliders: a QSlider beside a frameless number box, kept in sync (the look of superqt's QLabeledSlider,
without importing superqt, whose package import cost 0.05–0.16 s of CPU before the window's first paint).

`value()` is the value last set, dragged, scrolled or typed (a double slider keeps a set value as given; its box
shows it rounded to the box's decimals); `valueChanged` fires once per change, whichever part made it. The box
applies what is typed on Enter or when it loses focus. The slider may end before the box's range does
(`setSliderMaximum`): a value past its end is kept whole, the slider shown at its end. Nothing else: no vertical
layout, no range labels.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QAbstractSpinBox, QDoubleSpinBox, QHBoxLayout, QSlider, QSpinBox, QWidget

FIT_MAX = 999_999  # a box is made wide enough for values up to this; a longer one scrolls in it


class LabeledSlider(QWidget):
    """An integer slider with its value in a box on the right."""

    valueChanged = Signal(int)  # noqa: N815 - Qt's name

    def __init__(self, orientation: Qt.Orientation = Qt.Orientation.Horizontal, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.slider = QSlider(orientation)
        self.box = self._make_box()
        self.box.setButtonSymbols(QAbstractSpinBox.ButtonSymbols.NoButtons)
        self.box.setFrame(False)
        self.box.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.box.setKeyboardTracking(False)  # a half-typed "0." is not a value yet: apply on Enter / focus out
        self.box.setFocusPolicy(Qt.FocusPolicy.ClickFocus)  # Tab moves between sliders, as with superqt
        self.box.setStyleSheet("background: transparent;")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(6)
        row.addWidget(self.slider, 1)
        row.addWidget(self.box)
        self.setFocusProxy(self.slider)
        self._slider_top: float | None = None  # where the slider ends, when before the box's maximum
        self._value = self.box.value()
        self.slider.valueChanged.connect(lambda position: self.setValue(position / self._scale()))
        self.box.valueChanged.connect(self.setValue)
        self._fit_box()

    def _make_box(self) -> QSpinBox | QDoubleSpinBox:
        return QSpinBox()

    def _scale(self) -> float:
        """Slider positions per unit of value."""
        return 1

    def _cast(self, value: float) -> int | float:
        return round(value)

    def value(self) -> int | float:
        return self._value

    def setValue(self, value: float) -> None:  # noqa: N802 - Qt's name
        value = min(max(self._cast(value), self.minimum()), self.maximum())
        if value == self._value:
            return
        self._value = value
        self._show(value)
        self.valueChanged.emit(value)

    def _show(self, value: float) -> None:
        """Both parts to `value`, without their signals (the one that moved is already there)."""
        for part in (self.slider, self.box):
            part.blockSignals(True)
        self.slider.setValue(round(value * self._scale()))
        self.box.setValue(value)
        for part in (self.slider, self.box):
            part.blockSignals(False)

    def minimum(self) -> int | float:
        return self.box.minimum()

    def maximum(self) -> int | float:
        return self.box.maximum()

    def setRange(self, lo: float, hi: float) -> None:  # noqa: N802 - Qt's name
        self.box.setRange(self._cast(lo), self._cast(hi))
        self._place_slider()
        self._fit_box()
        self._value = min(max(self._value, self.minimum()), self.maximum())
        self._show(self._value)

    def setSliderMaximum(self, hi: float) -> None:  # noqa: N802 - Qt's style
        """End the slider at `hi`, before the box's maximum: the box still takes every value of the range (one past
        `hi` is kept as it is, the slider at its end), the slider drags over the common part."""
        self._slider_top = hi
        self._place_slider()
        self._show(self._value)

    def _place_slider(self) -> None:
        top = self.box.maximum() if self._slider_top is None else min(self._cast(self._slider_top), self.box.maximum())
        self.slider.setRange(round(self.box.minimum() * self._scale()), round(top * self._scale()))

    def singleStep(self) -> int | float:  # noqa: N802 - Qt's name
        return self.box.singleStep()

    def setSingleStep(self, step: float) -> None:  # noqa: N802 - Qt's name
        """One arrow key or wheel notch, on the slider and in the box."""
        self.box.setSingleStep(step)
        self.slider.setSingleStep(max(1, round(step * self._scale())))

    def _fit_box(self) -> None:
        """As wide as its widest value (the range's ends), so the sliders of a column line up."""
        fm = self.box.fontMetrics()
        texts = (self.box.textFromValue(self.box.minimum()), self.box.textFromValue(min(self.box.maximum(), FIT_MAX)))
        self.box.setFixedWidth(max(fm.horizontalAdvance(t + " ") for t in texts) + 6)


class LabeledDoubleSlider(LabeledSlider):
    """A slider over a float range, in steps of its box's last decimal (two by default)."""

    valueChanged = Signal(float)  # noqa: N815 - Qt's name

    def _make_box(self) -> QDoubleSpinBox:
        box = QDoubleSpinBox()
        box.setDecimals(2)
        return box

    def _scale(self) -> float:
        return 10.0 ** self.box.decimals()

    def _cast(self, value: float) -> float:
        return float(value)

    def decimals(self) -> int:
        return self.box.decimals()

    def setDecimals(self, decimals: int) -> None:  # noqa: N802 - Qt's name
        lo, hi, step = self.box.minimum(), self.box.maximum(), self.box.singleStep()
        self.box.setDecimals(decimals)
        self.setRange(lo, hi)
        self.setSingleStep(step)


def line_up(sliders: Sequence[LabeledSlider]) -> None:
    """Every slider's box as wide as the widest of them: sliders in one column (of one grid or of two) then end at
    one x, whatever their ranges."""
    width = max((s.box.minimumWidth() for s in sliders), default=0)
    for s in sliders:
        s.box.setFixedWidth(width)
