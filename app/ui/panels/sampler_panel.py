"""The sampler panel: one row per setting, built from the core's `FIELDS` table (range, default, help).

Each numeric setting is a slider bound to a number box with a reset button; the boxes' ranges are the allowed
ranges, so a value that is not allowed cannot be entered (top-k's slider stops at 200; its box takes any k, and a
larger one, from a preset or a session, is kept as it is). Seed (with new-seed and lock), stop strings and the
stage order follow: an engine's order picked from a list, or the stages dragged into any order. The rarer
samplers (typical-p, top-n-sigma, XTC, dynamic temperature, epsilon and eta, a thinking model's budget and markers,
logit bias) fold under "More samplers",
the constraint (`constraint/`: what the text must match) under "Constraint".
The panel is bound to the `EditingState`: an edit writes its settings there (or says why they are not valid), and
it shows whatever settings the state holds; a remote model marks what a server may not apply.
"""

from __future__ import annotations

import contextlib
import json

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.files import parse_json
from app.core.models.sources import ModelSpec
from app.core.remote.server_request import MORE_SERVER_NOTES, SERVER_NOTES
from app.core.settings import (
    FIELDS,
    SamplerSettings,
    SettingsError,
    parse_order,
    read_escapes,
    write_escapes,
)
from app.core.stage_table import ORDER_LABELS
from app.ui.panels.constraint.section import ConstraintSection
from app.ui.panels.logit_bias_editor import LogitBiasEditor
from app.ui.panels.presets_box import PresetsBox
from app.ui.panels.sliders import LabeledDoubleSlider, LabeledSlider, line_up
from app.ui.panels.stage_list import StageList
from app.ui.viewmodel.editing_state import UI_MAX_SEED, EditingState

CUSTOM = "custom"  # the order box's last entry, after the stage table's `ORDER_LABELS`: a dragged order
BOX_MAX = 2**31 - 1  # a number box's largest value (Qt's int), for a range with no upper end


def _slider(f) -> QWidget:  # noqa: ANN001 - a settings.Field
    if f.name == "max_tokens":
        w = QSpinBox(minimum=int(f.lo), maximum=int(f.hi), singleStep=16, accelerated=True)
        w.setValue(int(f.default))
        return w
    w = LabeledSlider() if f.integer else LabeledDoubleSlider()
    w.setRange(f.lo, min(f.hi, BOX_MAX))
    if f.slider_hi is not None:  # (top-k: the slider stops at 200, the box takes any k)
        w.setSliderMaximum(f.slider_hi)
    if not f.integer:
        w.setDecimals(f.decimals)
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


def _line_up(grids: tuple[QGridLayout, ...], sliders: list[LabeledSlider]) -> None:
    """The main rows and the "More samplers" rows in one set of columns: each grid's label, reset and note columns
    as wide as the widest of either, every slider's box as wide as the widest, so all sliders start and end at one x."""
    for col in (0, 2, 3):
        width = max(_column_width(g, col) for g in grids)
        for g in grids:
            g.setColumnMinimumWidth(col, width)
    line_up(sliders)


def _column_width(grid: QGridLayout, col: int) -> int:
    """The widest size hint of the widgets in a column (asked of each widget: not yet shown, its layout item says 0)."""
    items = (grid.itemAtPosition(row, col) for row in range(grid.rowCount()))
    return max((item.widget().sizeHint().width() for item in items if item is not None and item.widget() is not None),
               default=0)


class ThinkFields(QWidget):
    """Beside the think budget's slider: its mode (soft: a stage raising the closing marker; else the marker is forced
    at the budget) and a custom pair of reasoning markers, for a model whose tokenizer's are not found."""

    edited = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.soft = QCheckBox("Soft budget", toolTip="Soft: the think budget raises the closing marker's logit as it "
                              "nears (a stage) instead of forcing it at the budget")
        self.soft.toggled.connect(self.edited)
        tip = ("A thinking model's reasoning markers, where its tokenizer's are not found (empty: <think> and "
               "</think>, or gpt-oss's channels)")
        self.opening = QLineEdit(placeholderText="<think>", toolTip=tip)
        self.closing = QLineEdit(placeholderText="</think>", toolTip=tip)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.soft)
        row.addWidget(QLabel("Markers", toolTip=tip))
        for edit in (self.opening, self.closing):
            edit.editingFinished.connect(self.edited)
            row.addWidget(edit, 1)

    def markers(self) -> tuple[str, ...]:
        pair = (read_escapes(self.opening.text()), read_escapes(self.closing.text()))
        return pair if any(pair) else ()  # (one of two given: the settings say why that will not do)

    def show_settings(self, s: SamplerSettings) -> None:
        self.soft.setChecked(s.think_soft)
        for edit, text in zip((self.opening, self.closing), s.think_markers or ("", ""), strict=True):
            edit.setText(write_escapes(text))


class SamplerPanel(QWidget):
    def __init__(self, state: EditingState | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state if state is not None else EditingState(self)
        self._showing = False  # the state's settings are being put into the editors: not an edit
        self._sent: SamplerSettings | None = None  # what the editors showed when last written to the state
        self.editors: dict[str, QWidget] = {}
        self.notes = {name: _note(text) for name, text in SERVER_NOTES.items()}  # shown for a remote model
        self.more_notes = {name: _note(text) for name, text in MORE_SERVER_NOTES.items()}  # under "More samplers"
        grid, more = QGridLayout(), QGridLayout()
        grid.setColumnStretch(1, 1)
        more.setColumnStretch(1, 1)
        for f in FIELDS:
            self._add_row(more if f.more else grid, (more if f.more else grid).rowCount(), f)
        self._add_seed(grid, grid.rowCount())
        _line_up((grid, more), [e for e in self.editors.values() if isinstance(e, LabeledSlider)])
        box = QVBoxLayout(self)
        box.addLayout(grid)
        box.addWidget(self._more_section(more))
        box.addWidget(QLabel("Stop strings (one per line, \\n for a newline)"))
        self.stop_edit = QPlainTextEdit(placeholderText="e.g. \\n\\n", toolTip="Generation stops when the text "
                                        "contains one of these; the stop string itself is not shown.")
        self.stop_edit.setFixedHeight(self.fontMetrics().lineSpacing() * 3 + 12)
        self.stop_edit.textChanged.connect(self._edited)
        box.addWidget(self.stop_edit)
        self.constraint = ConstraintSection()  # (folded: what the text must match)
        self.constraint.edited.connect(self._edited)
        box.addWidget(self.constraint)
        self._add_order(box)
        reset = QPushButton("Reset all", toolTip="Every setting back to its default")
        reset.clicked.connect(self.reset_all)
        box.addWidget(reset, alignment=Qt.AlignmentFlag.AlignRight)
        box.addStretch(1)
        self.presets = PresetsBox(self.state, parent=self)  # the presets combo, above the sliders
        box.insertWidget(0, self.presets)
        self.state.settings_changed.connect(self._show)
        self.state.seed_lock_changed.connect(self.lock.setChecked)
        self.state.model_changed.connect(self._show_model)
        self._show(self.state.settings)
        self.lock.setChecked(self.state.seed_locked)
        self._show_model(self.state.model)

    def _more_section(self, grid: QGridLayout) -> QWidget:
        """The rarer samplers and the logit bias, folded under a "More samplers" toggle (folded at first)."""
        section = QWidget()
        column = QVBoxLayout(section)
        column.setContentsMargins(0, 0, 0, 0)
        self.more_toggle = QToolButton(text="More samplers", checkable=True, autoRaise=True,
                                       toolButtonStyle=Qt.ToolButtonStyle.ToolButtonTextBesideIcon,
                                       arrowType=Qt.ArrowType.RightArrow, toolTip="Typical-p, top-n-sigma, XTC, "
                                       "dynamic temperature, epsilon and eta cutoffs, DRY, mirostat, a thinking "
                                       "model's budget, logit bias")
        self.more = QWidget(visible=False)
        inner = QVBoxLayout(self.more)
        inner.setContentsMargins(0, 0, 0, 0)
        inner.addLayout(grid)
        self.breakers = QLineEdit(toolTip="DRY's sequence breakers, a JSON list of strings: a token whose text holds "
                                  'one ends a repeat (llama.cpp\'s default: ["\\n", ":", "\\"", "*"])')
        self.breakers.editingFinished.connect(self._edited)
        inner.addWidget(QLabel("DRY breakers", toolTip=self.breakers.toolTip()))
        inner.addWidget(self.breakers)
        self.think = ThinkFields()
        self.think.edited.connect(self._edited)
        inner.addWidget(self.think)
        inner.addWidget(QLabel("Logit bias", toolTip="A value added to chosen tokens' logits, first in every order"))
        self.bias = LogitBiasEditor()
        self.bias.pairs_changed.connect(self._edited)
        inner.addWidget(self.bias)
        self.more_toggle.toggled.connect(self._fold)
        column.addWidget(self.more_toggle)
        column.addWidget(self.more)
        return section

    def _fold(self, unfolded: bool) -> None:
        self.more.setVisible(unfolded)
        self.more_toggle.setArrowType(Qt.ArrowType.DownArrow if unfolded else Qt.ArrowType.RightArrow)

    def _add_order(self, box: QVBoxLayout) -> None:
        """The order box (an engine's order, or "custom") above the stage list, which a drag reorders."""
        self.order = QComboBox(toolTip="The order the stages run in: engines differ. Drag the stages below for "
                               "any other order.")
        for value, label in ORDER_LABELS.items():
            self.order.addItem(label, value)
        self.order.addItem("Custom (dragged)", CUSTOM)
        self.order.currentIndexChanged.connect(self._order_picked)
        self.stages = StageList()
        self.stages.order_changed.connect(self._dragged)
        order_label = QHBoxLayout()
        order_label.addWidget(QLabel("Stage order"))
        order_label.addWidget(self.notes["order"])
        order_label.addStretch(1)
        box.addLayout(order_label)
        box.addWidget(self.order)
        box.addWidget(self.stages)
        self._chain = self.state.settings.order, self.state.settings.chain  # (order, chain) the editors show

    def _order_picked(self) -> None:
        value = self.order.currentData()
        if value != CUSTOM:
            self._chain = parse_order(value)
        self._edited()

    def _dragged(self, names: tuple[str, ...]) -> None:
        self._chain = parse_order(",".join(names))
        self._edited()

    def _show_order(self, s: SamplerSettings) -> None:
        """The box on the named order the settings hold, else on "custom"; the list in their order."""
        self._chain = s.order, s.chain
        values = [self.order.itemData(i) for i in range(self.order.count() - 1)]
        named = next((v for v in values if parse_order(v) == self._chain), CUSTOM)
        self.order.blockSignals(True)
        self.order.setCurrentIndex(self.order.findData(named))
        self.order.blockSignals(False)
        self.stages.show_order(s.stage_order, s.enabled_stages())

    def bind(self, pg: object) -> None:
        """The loaded model's vocabulary, for the logit bias's search."""
        pg.loaded.connect(lambda info: self.bias.set_tokenizer(pg.tokenizer, info.vocab_size))

    def _add_row(self, grid: QGridLayout, row: int, f) -> None:  # noqa: ANN001
        label = QLabel(f.label, toolTip=f.help)
        editor = _slider(f)
        editor.setToolTip(f.help)
        editor.setObjectName(f.name)
        editor.valueChanged.connect(self._edited)
        reset = QToolButton(text="↺", toolTip=f"Reset {f.label.lower()} to {f.default:g}", autoRaise=True)
        reset.clicked.connect(lambda _=False, e=editor, v=f.default: e.setValue(v))
        grid.addWidget(label, row, 0)
        grid.addWidget(editor, row, 1)
        grid.addWidget(reset, row, 2)
        if (note := self.notes.get(f.name) or self.more_notes.get(f.name)) is not None:
            grid.addWidget(note, row, 3)
        self.editors[f.name] = editor

    def _add_seed(self, grid: QGridLayout, row: int) -> None:
        self.seed = QSpinBox(minimum=0, maximum=UI_MAX_SEED, toolTip="The run's random seed: the same seed and "
                             "settings give the same tokens, on either backend.")
        self.seed.valueChanged.connect(self._edited)
        dice = QToolButton(text="New", toolTip="A new random seed", autoRaise=True)
        dice.clicked.connect(self.new_seed)
        self.lock = QCheckBox("Lock", toolTip="Locked: every run uses this seed. Unlocked: a new seed per run.")
        self.lock.toggled.connect(self.state.set_seed_locked)
        row_box = QHBoxLayout()
        row_box.addWidget(self.seed, 1)
        row_box.addWidget(self.lock)
        grid.addWidget(QLabel("Seed", toolTip=self.seed.toolTip()), row, 0)
        grid.addLayout(row_box, row, 1)
        grid.addWidget(dice, row, 2)
        grid.addWidget(self.notes["seed"], row, 3)

    def _show_model(self, spec: ModelSpec) -> None:
        self.set_remote(spec.backend == "remote")

    def set_remote(self, remote: bool) -> None:
        """Mark the settings a server may ignore or cannot express (its note in the tooltip); the stage order
        is not sent at all, so its box is off."""
        for note in (*self.notes.values(), *self.more_notes.values()):
            note.setVisible(remote)
        self.order.setEnabled(not remote)
        self.stages.setEnabled(not remote)
        self.constraint.set_remote(remote)

    def new_seed(self) -> None:
        self.state.new_seed()

    def stops(self) -> tuple[str, ...]:
        return tuple(read_escapes(line) for line in self.stop_edit.toPlainText().splitlines() if line)

    def settings(self) -> SamplerSettings:
        """The settings as the editors show them (raises SettingsError for one that is not valid)."""
        values = {f.name: (int if f.integer else float)(self.editors[f.name].value()) for f in FIELDS}
        return SamplerSettings(**values, seed=self.seed.value(), stop=self.stops(), order=self._chain[0],
                               chain=self._chain[1], logit_bias=self.bias.pairs(), dry_breakers=self._breakers(),
                               constraint=self.constraint.constraint(), think_soft=self.think.soft.isChecked(),
                               think_markers=self.think.markers(),
                               steering=self.state.settings.steering,  # (no editor here: kept as it came)
                               think=self.state.settings.think)  # (the chat editor's Think box: kept too)

    def _breakers(self) -> tuple[str, ...]:
        """The DRY breakers box as a JSON list of strings (SettingsError when it is not one)."""
        try:
            value = parse_json(self.breakers.text() or "[]")  # (too deeply nested: a ValueError too)
        except ValueError:
            value = None
        if not isinstance(value, list) or not all(isinstance(b, str) and b for b in value):
            raise SettingsError('DRY breakers must be a JSON list of strings, e.g. ["\\n", ":"]')
        return tuple(value)

    def set_settings(self, s: SamplerSettings) -> None:
        """Edit the settings to `s` (a seed of None keeps the seed shown)."""
        self.state.set_settings(s)

    def reset_all(self) -> None:
        # (the chat's Think box is the prompt's: kept, as the seed is)
        self.state.set_settings(SamplerSettings(seed=self.state.settings.seed, think=self.state.settings.think))

    def _edited(self) -> None:
        """An editor changed: the state takes the settings shown, or learns why they are not valid."""
        if self._showing:
            return
        self._sent = None
        try:
            settings = self.settings()
        except SettingsError as e:
            self.state.set_settings_error(str(e))
            return
        self._sent = settings
        self.state.set_settings(settings)

    def _show(self, s: SamplerSettings) -> None:
        """Put the state's settings into the editors (their steps may round them: the state then takes what
        they show)."""
        self._show_order(s)  # the order and which stages are on follow every edit, the editors' own included
        if s == self._sent:  # the editors' own edit coming back: built once, and they are left (and the cursor) be
            return
        with contextlib.suppress(SettingsError):
            if self.settings() == s:  # the editors' own edit coming back: leave them (and the cursor) be
                return
        self._showing = True
        try:
            for f in FIELDS:
                self.editors[f.name].setValue(getattr(s, f.name))
            self.seed.setValue(s.seed)
            self.stop_edit.setPlainText("\n".join(write_escapes(x) for x in s.stop))
            self.bias.set_pairs(s.logit_bias)
            self.breakers.setText(json.dumps(list(s.dry_breakers), ensure_ascii=False))
            self.constraint.set_constraint(s.constraint)
            self.think.show_settings(s)
        finally:
            self._showing = False
        self._edited()
