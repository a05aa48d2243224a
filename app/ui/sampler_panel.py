"""The sampler panel: one row per setting, built from the core's `FIELDS` table (range, default, help).

Each numeric setting is a slider bound to a number box with a reset button; the boxes' ranges are the allowed
ranges, so a value that is not allowed cannot be entered. Seed (with new-seed and lock), stop strings and
the stage order follow. `changed` fires on any edit; `settings()` reads the current record.
"""

from __future__ import annotations

import random

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.remote_run import SERVER_NOTES
from app.core.settings import FIELDS, SamplerSettings, StageOrder, read_escapes, write_escapes
from app.ui.presets_box import PresetsBox
from app.ui.sliders import LabeledDoubleSlider, LabeledSlider

UI_MAX_SEED = 2**31 - 1  # QSpinBox holds a signed 32-bit int
ORDER_LABELS = {
    StageOrder.TEMPERATURE_FIRST: "Temperature first (transformers, vLLM)",
    StageOrder.TEMPERATURE_LAST: "Temperature last (llama.cpp, mlx-lm)",
}


def _slider(f) -> QWidget:  # noqa: ANN001 - a settings.Field
    if f.name == "max_tokens":
        w = QSpinBox(minimum=int(f.lo), maximum=int(f.hi), singleStep=16, accelerated=True)
        w.setValue(int(f.default))
        return w
    w = LabeledSlider() if f.integer else LabeledDoubleSlider()
    w.setRange(f.lo, f.hi)
    if not f.integer:
        w.setDecimals(2)
        w.setSingleStep(f.step)
    w.setValue(f.default)
    return w


def _note(text: str) -> QLabel:
    """A small mark beside a setting that a remote server may not apply as we do; why, on hover."""
    note = QLabel("⚠", toolTip=f"A server may not apply this as Logit Lab does: {text}", visible=False)
    note.setObjectName("server_note")
    note.setStyleSheet("color: #b26a00;")
    policy = note.sizePolicy()
    policy.setRetainSizeWhenHidden(True)  # its room is kept: the panel never widens when a server is chosen
    note.setSizePolicy(policy)
    return note


class SamplerPanel(QWidget):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.editors: dict[str, QWidget] = {}
        self.notes = {name: _note(text) for name, text in SERVER_NOTES.items()}  # shown for a remote model
        grid = QGridLayout()
        grid.setColumnStretch(1, 1)
        for row, f in enumerate(FIELDS):
            self._add_row(grid, row, f)
        self._add_seed(grid, len(FIELDS))
        box = QVBoxLayout(self)
        box.addLayout(grid)
        box.addWidget(QLabel("Stop strings (one per line, \\n for a newline)"))
        self.stop_edit = QPlainTextEdit(placeholderText="e.g. \\n\\n", toolTip="Generation stops when the text "
                                        "contains one of these; the stop string itself is not shown.")
        self.stop_edit.setFixedHeight(self.fontMetrics().lineSpacing() * 3 + 12)
        self.stop_edit.textChanged.connect(self.changed)
        box.addWidget(self.stop_edit)
        self.order = QComboBox(toolTip="Where temperature runs relative to top-k, top-p and min-p: engines differ.")
        for order, label in ORDER_LABELS.items():
            self.order.addItem(label, order.value)
        self.order.currentIndexChanged.connect(self.changed)
        order_label = QHBoxLayout()
        order_label.addWidget(QLabel("Stage order"))
        order_label.addWidget(self.notes["order"])
        order_label.addStretch(1)
        box.addLayout(order_label)
        box.addWidget(self.order)
        reset = QPushButton("Reset all", toolTip="Every setting back to its default")
        reset.clicked.connect(self.reset_all)
        box.addWidget(reset, alignment=Qt.AlignmentFlag.AlignRight)
        box.addStretch(1)
        self.presets = PresetsBox(self)  # the presets combo, above the sliders (built last: it reads settings())
        box.insertWidget(0, self.presets)

    def _add_row(self, grid: QGridLayout, row: int, f) -> None:  # noqa: ANN001
        label = QLabel(f.label, toolTip=f.help)
        editor = _slider(f)
        editor.setToolTip(f.help)
        editor.setObjectName(f.name)
        editor.valueChanged.connect(self.changed)
        reset = QToolButton(text="↺", toolTip=f"Reset {f.label.lower()} to {f.default:g}", autoRaise=True)
        reset.clicked.connect(lambda _=False, e=editor, v=f.default: e.setValue(v))
        grid.addWidget(label, row, 0)
        grid.addWidget(editor, row, 1)
        grid.addWidget(reset, row, 2)
        if f.name in self.notes:
            grid.addWidget(self.notes[f.name], row, 3)
        self.editors[f.name] = editor

    def _add_seed(self, grid: QGridLayout, row: int) -> None:
        self.seed = QSpinBox(minimum=0, maximum=UI_MAX_SEED, toolTip="The run's random seed: the same seed and "
                             "settings give the same tokens, on either backend.")
        self.seed.setValue(random.randrange(UI_MAX_SEED))
        self.seed.valueChanged.connect(self.changed)
        dice = QToolButton(text="New", toolTip="A new random seed", autoRaise=True)
        dice.clicked.connect(self.new_seed)
        self.lock = QCheckBox("Lock", toolTip="Locked: every run uses this seed. Unlocked: a new seed per run.")
        self.lock.setChecked(True)
        self.lock.toggled.connect(self.changed)
        row_box = QHBoxLayout()
        row_box.addWidget(self.seed, 1)
        row_box.addWidget(self.lock)
        grid.addWidget(QLabel("Seed", toolTip=self.seed.toolTip()), row, 0)
        grid.addLayout(row_box, row, 1)
        grid.addWidget(dice, row, 2)
        grid.addWidget(self.notes["seed"], row, 3)

    def set_remote(self, remote: bool) -> None:
        """Mark the settings a server may ignore or cannot express (its note in the tooltip); the stage order
        is not sent at all, so its box is off."""
        for note in self.notes.values():
            note.setVisible(remote)
        self.order.setEnabled(not remote)

    def new_seed(self) -> None:
        self.seed.setValue(random.randrange(UI_MAX_SEED))

    def next_run_seed(self) -> int:
        """The seed for the next run: this one if locked, else a fresh one (shown in the box)."""
        if not self.lock.isChecked():
            self.new_seed()
        return self.seed.value()

    def stops(self) -> tuple[str, ...]:
        return tuple(read_escapes(line) for line in self.stop_edit.toPlainText().splitlines() if line)

    def settings(self) -> SamplerSettings:
        values = {f.name: (int if f.integer else float)(self.editors[f.name].value()) for f in FIELDS}
        return SamplerSettings(**values, seed=self.seed.value(), stop=self.stops(),
                               order=StageOrder(self.order.currentData()))

    def set_settings(self, s: SamplerSettings) -> None:
        for f in FIELDS:
            self.editors[f.name].setValue(getattr(s, f.name))
        if s.seed is not None:
            self.seed.setValue(min(s.seed, UI_MAX_SEED))
        self.stop_edit.setPlainText("\n".join(write_escapes(x) for x in s.stop))
        self.order.setCurrentIndex(max(0, self.order.findData(s.order.value)))

    def reset_all(self) -> None:
        self.set_settings(SamplerSettings(seed=self.seed.value()))
