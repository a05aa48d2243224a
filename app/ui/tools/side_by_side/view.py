"""The side-by-side window: 2–4 columns on one prompt, each under its own sampler settings and, if chosen, its own
model, streaming together.

The columns are one `Playground.generate_together`: those on the window's model decode in one batch, a column on
another model (local, or a server's) runs beside it, and every column is a run of the session (saved, reopened and
exported like any run). The runs are kept as a `RunGroup` of the session, so a reopened session brings the columns
back. This view holds the columns' forms and starts, stops and restores them; what the runs drew is `ColumnRuns`'
(app/ui/tools/side_by_side/column_runs.py): the aligned output, the first divergence, the one step cursor and the
charts, one per model. A column whose model fails says why in its column; the others go on. A prompt set runs
against the columns as the forms hold them (`targets`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.core.compare.job_plan import Target
from app.core.compare.prompt_sets import label_names, settings_label
from app.core.compare.side_by_side import MAX_COLUMNS, MIN_COLUMNS
from app.core.models.sources import ModelSpec
from app.core.session.run_group import SIDE_BY_SIDE, GroupColumn, RunGroup
from app.core.settings import SamplerSettings, SettingsError
from app.ui.charts.overlay_chart import COLUMN_COLORS, NAMES
from app.ui.tools.side_by_side.column_form import ColumnForm
from app.ui.tools.side_by_side.column_model import ModelSources, short_name
from app.ui.tools.side_by_side.column_runs import ColumnRuns

if TYPE_CHECKING:
    from collections.abc import Callable

    from app.core.compare.side_by_side import Divergence
    from app.core.events import Request
    from app.core.session.store import Run
    from app.ui.viewmodel.playground import Playground

FORM_GAP = 8  # px between two forms


class SideBySideView(QWidget):
    """Columns' forms, Run / Stop, the aligned output (a table: rows are steps) and the charts, one per model."""

    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("Side by side — Logit Lab")
        self.pg = playground
        self._running = False
        self._placed = (0, 0)  # (forms shown, forms per row)
        self.count = QSpinBox(minimum=MIN_COLUMNS, maximum=MAX_COLUMNS, value=2, suffix=" columns")
        sources = model_sources(parent)
        self.forms = [ColumnForm(NAMES[c], COLUMN_COLORS[c], sources) for c in range(MAX_COLUMNS)]
        self.reset_button = QPushButton("Reset to the panel", toolTip="Every column back to the sampler panel's "
                                        "settings")
        self.run_button = QPushButton("Run side by side")
        self.stop_button = QPushButton("Stop", enabled=False)
        self.compared = ColumnRuns(playground, lambda: self._running, self)  # what the columns' runs drew
        self.table, self.charts, self.status = self.compared.table, self.compared.charts, self.compared.status
        self.distribution = self.compared.distribution
        self._layout()
        self._wire()
        self.reset_forms()
        self._set_count(self.count.value())
        self.restore()

    def _layout(self) -> None:
        top = QHBoxLayout()
        for w in (self.count, self.reset_button, self.run_button, self.stop_button, QLabel("chart:"),
                  self.distribution):
            top.addWidget(w)
        top.addStretch(1)
        self.form_grid = QGridLayout()
        split = QSplitter(Qt.Orientation.Horizontal, childrenCollapsible=False)
        split.addWidget(self.table)
        split.addWidget(self.charts)
        split.setSizes([420, 480])
        box = QVBoxLayout(self)
        box.addLayout(top)
        box.addLayout(self.form_grid)
        box.addWidget(self.status)
        box.addWidget(split, 1)
        self.resize(900, 600)

    def _wire(self) -> None:
        self.count.valueChanged.connect(self._set_count)
        self.reset_button.clicked.connect(self.reset_forms)
        self.run_button.clicked.connect(self.run)
        self.stop_button.clicked.connect(self.stop)
        self.table.cellDoubleClicked.connect(self.open_cell)
        self.pg.steps_recorded.connect(self.compared.sync)  # every column's steps, shown run or not
        self.pg.session_changed.connect(self.compared.sync)
        self.pg.busy_changed.connect(lambda busy: None if busy or not self._running else self._ended())
        self.pg.session_replaced.connect(self.restore)
        self.pg.editing.model_changed.connect(lambda _spec: self._show_empty())
        for f in self.forms:
            f.model.currentIndexChanged.connect(lambda _i: self._show_empty())

    # verbs ------------------------------------------------------------------------------------------------
    def reset_forms(self) -> None:
        """Every form back to the sampler panel's settings (its seed: the one the panel shows)."""
        for f in self.forms:
            f.set_settings(self.pg.editing.settings)

    def run(self) -> bool:
        """Start every column together on the editing state's prompt, each on its settings and model; False (the
        status says why) if the settings are not valid or a run is in progress."""
        base = self.pg.checked_settings()
        if base is None or (self.pg.busy and not self.pg.loading_only):
            self.status.setText("A run is in progress: wait for it, or Stop it." if base else "The sampler panel's "
                                "settings are not valid (the window's banner says why).")
            return False
        forms = self.forms[: self.count.value()]
        try:
            targets = self.targets(base, self.pg.editing.model)
            requests = [replace(self.pg.make_request(t.settings), model=t.model) for t in targets]
        except SettingsError as e:
            self.status.setText(str(e))
            return False
        if not self.pg.generate_together(requests):
            self.status.setText("A run is in progress: wait for it, or Stop it.")
            return False
        self._started(requests, forms)
        return True

    def _started(self, requests: list[Request], forms: list[ColumnForm]) -> None:
        seeds = len({f.seed.value() for f in forms}) > 1  # named where they differ (the tree's tooltip says it)
        group = RunGroup(tuple(GroupColumn(r.id, f"{NAMES[c]}: {f.summary(seeds)}", f.model.choice() and r.model)
                               for c, (r, f) in enumerate(zip(requests, forms, strict=True))), SIDE_BY_SIDE)
        self.pg.session.groups.append(group)
        for column in group.columns:
            self.pg.branches.rename(column.run_id, column.label)
        self.compared.show_group(group)
        self._set_running(True)

    def stop(self) -> None:
        """Stop every column (what each drew so far stays)."""
        self.pg.stop()

    def targets(self, base: SamplerSettings, window: ModelSpec) -> list[Target]:
        """One target per shown column: `base` with the column form's values (a SettingsError names one that is not
        valid), on the column's model (`window`: the window's), labelled by its name, the settings that tell the
        columns apart and a model chosen for it (`A: T=0.7`, `B: T=1.2 · tiny`)."""
        forms = self.forms[: self.count.value()]
        settings = [f.settings(base) for f in forms]
        names = label_names(settings)
        return [Target(f"{f.title()}: {settings_label(s, names)}"
                       + (f" · {short_name(f.model.choice())}" if f.model.choice() is not None else ""),
                       s, f.model.spec(window)) for f, s in zip(forms, settings, strict=True)]

    def runs(self) -> list[Run | None]:
        """Each column's run (None: deleted from the session since)."""
        return self.compared.runs()

    @property
    def divergence(self) -> Divergence | None:
        """The first divergence marked (None: the columns agree so far)."""
        return self.compared.divergence

    def open_cell(self, row: int, col: int) -> None:
        """Show the column's run in the main window, at that step (its output, chart, fork from there)."""
        run = self.compared.run(col)
        if run is not None and row < len(run.steps):
            self.pg.show_run(run.id)
            self.pg.select_step(row)

    def restore(self) -> None:
        """Show the session's last side-by-side group (a reopened session's), or nothing."""
        self._set_running(False)
        group = next((g for g in reversed(self.pg.session.groups) if g.kind == SIDE_BY_SIDE), None)
        if group is None or any(self.pg.session.get(i) is None for i in group.run_ids):
            self._clear()
            return
        self.count.setValue(min(max(len(group.columns), MIN_COLUMNS), MAX_COLUMNS))
        for form, column in zip(self.forms, group.columns, strict=False):
            run = self.pg.session.get(column.run_id)
            form.set_settings(run.trace.settings if run.trace is not None else run.request.settings, own_order=True)
            form.model.set_choice(column.model)
        self.compared.show_group(group)

    # running ----------------------------------------------------------------------------------------------
    def _ended(self) -> None:
        self._set_running(False)
        self.compared.sync()

    def _set_running(self, running: bool) -> None:
        self._running = running
        self.run_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.count.setEnabled(not running)

    def _clear(self) -> None:
        self.compared.clear()
        self._show_empty()

    def _place_forms(self) -> None:
        """The shown forms in one row, or two rows where one would not fit the window's width."""
        n = self.count.value()
        need = sum(f.minimumSizeHint().width() + FORM_GAP for f in self.forms[:n])
        per_row = n if need <= self.width() else (n + 1) // 2
        if (n, per_row) == self._placed:
            return
        self._placed = (n, per_row)
        for c, f in enumerate(self.forms):
            self.form_grid.removeWidget(f)
            f.setVisible(c < n)
            if c < n:
                self.form_grid.addWidget(f, c // per_row, c % per_row)
        for c in range(MAX_COLUMNS):
            self.form_grid.setColumnStretch(c, 1 if c < per_row else 0)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._place_forms()

    def _set_count(self, _n: int) -> None:
        self._place_forms()
        self._show_empty()

    def _show_empty(self) -> None:
        """Before a run: the columns' headers and charts as the forms' models will make them."""
        if not self.compared.columns:
            window = self.pg.editing.model
            self.compared.show_models([f.model.spec(window) for f in self.forms[: self.count.value()]])


def model_sources(window: QWidget | None) -> Callable[[], ModelSources]:
    """What the window's model bar knows of the user's models (recent, folders, its server), asked when a column's
    model list is made or its picker opens; none without a model bar (a view made on its own)."""
    bar = getattr(window, "model_bar", None)

    def sources() -> ModelSources:
        if bar is None:
            return ModelSources()
        return ModelSources(tuple(bar.recent), tuple(bar.folders), bar.remote.base_url())

    return sources
