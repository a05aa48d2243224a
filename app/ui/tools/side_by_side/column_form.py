"""One side-by-side column's compact form: the few settings that matter most (temperature, top-k, top-p, min-p,
seed) and the stage order, over the sampler panel's settings for everything else; and its model (`ColumnModel`:
the window's, or another).

A table of `FIELDS` rows drives the boxes (their ranges, steps and help are the panel's); it reads and writes
`SamplerSettings` only, and computes nothing else.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtGui import QColor
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QGridLayout, QGroupBox, QLabel, QSpinBox, QWidget

from app.core import stage_table
from app.core.settings import FIELD_BY_NAME, MAX_SEED, SamplerSettings, parse_order
from app.core.stage_table import ORDER_LABELS
from app.ui.tools.side_by_side.column_model import ColumnModel, ModelSources, short_name

FORM_FIELDS = ("temperature", "top_k", "top_p", "min_p")
SHORT = {"temperature": "T", "top_k": "k", "top_p": "p", "min_p": "min-p"}
SHORT_LABEL = {**{n: stage_table.label(n) for n in FORM_FIELDS}, "temperature": "temp."}  # the stage table's
AS_PANEL = "As the panel"
SEED_PX = 64
BOX_MAX = 2**31 - 1  # a QSpinBox holds a signed 32-bit number
SEED_MAX = min(MAX_SEED, BOX_MAX)


class ColumnForm(QGroupBox):
    """A column's name in its colour, then a box per setting and the order; `settings(base)` is the column's."""

    def __init__(self, name: str, color: QColor, sources: Callable[[], ModelSources] = ModelSources,
                 parent: QWidget | None = None) -> None:
        super().__init__(name, parent)
        self.setStyleSheet(f"QGroupBox {{ font-weight: bold; color: {color.name()}; }}")
        self.boxes: dict[str, QSpinBox | QDoubleSpinBox] = {}
        grid = QGridLayout(self)
        grid.setContentsMargins(6, 2, 6, 2)
        grid.setVerticalSpacing(2)
        for name_ in FORM_FIELDS:
            f = FIELD_BY_NAME[name_]
            box = QSpinBox() if f.integer else QDoubleSpinBox(decimals=f.decimals)
            hi = min(f.hi, BOX_MAX)  # (top-k has no upper end)
            box.setRange(int(f.lo) if f.integer else f.lo, int(hi) if f.integer else hi)
            box.setSingleStep(int(f.step) if f.integer else f.step)
            box.setToolTip(f.help)
            self.boxes[name_] = box
        self.seed = QSpinBox(minimum=0, maximum=SEED_MAX, toolTip="The column's seed: the same in two columns, the "
                             "same random numbers, so what differs is the settings' doing")
        self.seed.setMinimumWidth(SEED_PX)  # (its hint fits ten digits: four columns would not fit 900 px)
        self.order = QComboBox(toolTip="The order the stages run in", minimumContentsLength=4,
                               sizeAdjustPolicy=QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.order.addItem(AS_PANEL, None)
        for value, label in ORDER_LABELS.items():
            self.order.addItem(label, value)
        cells = [(SHORT_LABEL[n], b) for n, b in self.boxes.items()] + [("seed", self.seed), ("order", self.order)]
        for i, (label, widget) in enumerate(cells):  # two settings a row: a short form
            grid.addWidget(QLabel(label), i // 2, (i % 2) * 2)
            grid.addWidget(widget, i // 2, (i % 2) * 2 + 1)
        self.model = ColumnModel(sources)
        grid.addWidget(QLabel("model"), len(cells) // 2, 0)
        grid.addWidget(self.model, len(cells) // 2, 1, 1, 3)
        grid.setColumnStretch(1, 1)
        grid.setColumnStretch(3, 1)

    def set_settings(self, s: SamplerSettings, own_order: bool = False) -> None:
        """Show `s`'s values; the order: as the panel's, or with `own_order`, `s`'s own where the list names it
        (a run's, shown again). The model stays as chosen."""
        for name_, box in self.boxes.items():
            box.setValue(getattr(s, name_))
        self.seed.setValue(min(s.seed or 0, SEED_MAX))
        self.order.setCurrentIndex(next((i for i in range(1, self.order.count()) if own_order
                                         and parse_order(self.order.itemData(i)) == (s.order, s.chain)), 0))

    def settings(self, base: SamplerSettings) -> SamplerSettings:
        """`base` with this form's values (raises `SettingsError` if they are not valid together)."""
        values = {name_: box.value() for name_, box in self.boxes.items()}
        value = self.order.currentData()
        if value is not None:
            values["order"], values["chain"] = parse_order(value)
        return base.with_(**values, seed=self.seed.value())

    def summary(self, seed: bool = True) -> str:
        """The form's values in a few characters, for the run's name: the temperature, the filters that are on, the
        seed (unless not `seed`: every column has the same), and the order and model when the column has its own:
        `T 0.3 · min-p 0.05 · seed 3`."""
        parts = [f"{SHORT[n]} {b.value():g}" for n, b in self.boxes.items()
                 if n == "temperature" or b.value() != FIELD_BY_NAME[n].default]
        order, model = self.order.currentData(), self.model.choice()
        return " · ".join([*parts, *([f"seed {self.seed.value()}"] if seed else []), *([order] if order else []),
                           *([short_name(model)] if model is not None else [])])
