"""The run timeline with its header: what it draws (the drawn token's probability, the entropy, or both) and the
threshold above which a step's entropy marks it uncertain (a click on a mark forks there).

The chart itself is `TimelineHost`'s (app/ui/charts/chart_host.py, built after the first paint); this panel only
holds the two choices and hands them on.
"""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.ui.charts.chart_host import SERIES, TimelineHost

TIMELINE_MIN = 90  # px: the timeline's least readable height, which a dock never takes (its ticks overlap below it)


class TimelinePanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.timeline = TimelineHost()  # a timeline.TimelineChart, built after the first paint
        self.uncertain = QDoubleSpinBox(minimum=0.0, maximum=20.0, singleStep=0.1, decimals=2, suffix=" nats",
                                        specialValueText="top 5 %", toolTip="Mark the steps whose entropy is "
                                        "above this (top 5 %: the most uncertain 5 % of the run); click a mark "
                                        "to continue with the runner-up token there")
        self.uncertain.valueChanged.connect(lambda v: self.timeline.set_uncertain_above(v or None))
        self.series = QComboBox(toolTip="What the timeline draws: the drawn token's probability (area, left axis), "
                                "the entropy of the model's distribution (line, right axis), or both")
        for key, label in SERIES.items():
            self.series.addItem(label, key)
        self.series.currentIndexChanged.connect(lambda _i: self.timeline.show_series(self.series.currentData()))
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        head = QHBoxLayout()
        title = QLabel("<b>Run timeline</b> — click to select a step", toolTip="Click to select a step")
        title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # cut, never widening
        head.addWidget(title, 1)
        head.addWidget(self.series)
        head.addWidget(QLabel("▲ uncertain:"))
        head.addWidget(self.uncertain)
        box.addLayout(head)
        box.addWidget(self.timeline, 1)
        self.timeline.setMinimumHeight(TIMELINE_MIN)
