"""The side-by-side window: 2–4 columns on one prompt, each under its own sampler settings and, if chosen, its own
model, streaming together.

The columns are one `Playground.generate_together`: those on the window's model decode in one batch, a column on
another model (local, or a server's) runs beside it, and every column is a run of the session (saved, reopened and
exported like any run). The runs are kept as a `RunGroup` of the session, so a reopened session brings the columns
back. The output is aligned by step (`AlignedTable`), filled as steps arrive, the first divergence marked
(`side_by_side.first_divergence`); one step cursor for all: the charts overlay that step of the columns that share
a model, one chart per model (`ModelCharts`). A column whose model fails says why in its column; the others go on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.core.compare.side_by_side import MAX_COLUMNS, MIN_COLUMNS, first_divergence, model_groups, overlay, step_keys
from app.core.models.sources import ModelSpec
from app.core.session.run_group import SIDE_BY_SIDE, GroupColumn, RunGroup
from app.core.settings import SettingsError
from app.ui.charts.overlay_chart import COLUMN_COLORS, NAMES
from app.ui.tools.side_by_side.aligned_table import AlignedTable
from app.ui.tools.side_by_side.column_form import ColumnForm
from app.ui.tools.side_by_side.column_model import ModelSources, short_name
from app.ui.tools.side_by_side.model_charts import ModelCharts

if TYPE_CHECKING:
    from collections.abc import Callable

    from app.core.compare.side_by_side import Divergence
    from app.core.events import Request
    from app.core.session.store import Run
    from app.ui.viewmodel.playground import Playground

EMPTY = "Set each column's settings (and model), then Run side by side: one run per column, streaming together"
FORM_GAP = 8  # px between two forms
DISTRIBUTIONS = {"sampled from": "final", "model (raw)": "raw"}


@dataclass(frozen=True)
class Column:
    """A column once started (or reopened): its run, its label, and its model (None: the window's)."""

    run_id: int
    label: str
    model: ModelSpec | None = None


class SideBySideView(QWidget):
    """Columns' forms, Run / Stop, the aligned output (a table: rows are steps) and the charts, one per model."""

    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("Side by side — Logit Lab")
        self.pg = playground
        self.columns: list[Column] = []
        self.step: int | None = None  # the step cursor (None: the first divergence, else the latest step)
        self._running = False
        self._placed = (0, 0)  # (forms shown, forms per row)
        self.count = QSpinBox(minimum=MIN_COLUMNS, maximum=MAX_COLUMNS, value=2, suffix=" columns")
        sources = model_sources(parent)
        self.forms = [ColumnForm(NAMES[c], COLUMN_COLORS[c], sources) for c in range(MAX_COLUMNS)]
        self.reset_button = QPushButton("Reset to the panel", toolTip="Every column back to the sampler panel's "
                                        "settings")
        self.run_button = QPushButton("Run side by side")
        self.stop_button = QPushButton("Stop", enabled=False)
        self.distribution = QComboBox(toolTip="The chart's distribution: what each column sampled from, or the "
                                      "model's own")
        self.distribution.addItems(list(DISTRIBUTIONS))
        self.status = QLabel(EMPTY, wordWrap=True)
        self.table = AlignedTable()
        self.charts = ModelCharts()
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
        self.distribution.currentTextChanged.connect(lambda _t: self._draw_chart())
        self.table.currentCellChanged.connect(lambda row, _c, _r, _pc: self.select_step(row if row >= 0 else None))
        self.table.cellDoubleClicked.connect(self.open_cell)
        self.pg.steps_recorded.connect(self._sync)  # every column's steps, shown run or not
        self.pg.session_changed.connect(self._sync)
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
            requests = [replace(self.pg.make_request(f.settings(base)), model=f.model.spec(self.pg.editing.model))
                        for f in forms]
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
        self._show_group(group)
        self._set_running(True)

    def stop(self) -> None:
        """Stop every column (what each drew so far stays)."""
        self.pg.stop()

    def select_step(self, step: int | None) -> None:
        """Move the one step cursor: the charts show step `step` of every column."""
        if step != self.step:
            self.step = step
            self._draw_chart()

    def open_cell(self, row: int, col: int) -> None:
        """Show the column's run in the main window, at that step (its output, chart, fork from there)."""
        run = self._run(col)
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
        self._show_group(group)

    # running ----------------------------------------------------------------------------------------------
    def _show_group(self, group: RunGroup) -> None:
        self.columns = [Column(c.run_id, c.label, c.model) for c in group.columns[:MAX_COLUMNS]]
        self.step = None
        models = [self._model(c) for c in range(len(self.columns))]
        self._show_columns(models, [f"{col.label}\nmodel: {m.label}" for col, m in zip(self.columns, models,
                                                                                        strict=True)])
        self._sync()

    def _ended(self) -> None:
        self._set_running(False)
        self._sync()

    def _set_running(self, running: bool) -> None:
        self._running = running
        self.run_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.count.setEnabled(not running)

    def _run(self, col: int) -> Run | None:
        return self.pg.session.get(self.columns[col].run_id) if col < len(self.columns) else None

    def _model(self, col: int) -> ModelSpec:
        run = self._run(col)
        return run.request.model if run is not None else self.pg.editing.model

    def runs(self) -> list[Run | None]:
        """Each column's run (None: deleted from the session since)."""
        return [self._run(c) for c in range(len(self.columns))]

    def _clear(self) -> None:
        self.columns, self.step = [], None
        self.status.setText(EMPTY)
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
        if not self.columns:
            window = self.pg.editing.model
            self._show_columns([f.model.spec(window) for f in self.forms[: self.count.value()]])

    def _show_columns(self, models: list[ModelSpec], tips: list[str] | None = None) -> None:
        """Headers (each column's model named where they differ) and one chart per model."""
        several = len(set(models)) > 1
        self.table.reset([f"{NAMES[c]} · {short_name(m)}" if several else NAMES[c] for c, m in enumerate(models)],
                         tips or [])
        groups = model_groups(models)
        self.charts.set_groups(groups, [short_name(models[g[0]]) if several else "" for g in groups])

    # drawing ----------------------------------------------------------------------------------------------
    def _sync(self) -> None:
        """Append the steps that arrived since the last call (every column), then mark, say and chart."""
        runs = self.runs()
        if not self.columns or any(r is None for r in runs):
            return
        self.table.append([r.steps for r in runs])
        failed = [c for c, r in enumerate(runs) if self._failed(r)]
        for c in failed:
            self.table.show_failure(c, runs[c].finished.message)
        compared = [c for c in range(len(runs)) if c not in failed]
        keys = step_keys([runs[c].steps for c in compared], len({self._model(c) for c in compared}) <= 1)
        d = first_divergence(keys, [not runs[c].running for c in compared])
        if d is not None and compared != list(range(len(runs))):  # back to every column, a failed one: None
            tokens = dict(zip(compared, d.tokens, strict=True))
            d = replace(d, tokens=tuple(tokens.get(c) for c in range(len(runs))))
        self.table.mark(d, [not r.running for r in runs])
        self._status(runs, failed)
        self._draw_chart()

    @staticmethod
    def _failed(run: Run) -> bool:
        return run.finished is not None and run.finished.reason == "error" and not run.steps

    @property
    def divergence(self) -> Divergence | None:
        """The first divergence marked (None: the columns agree so far)."""
        return self.table.divergence

    def _status(self, runs: list[Run], failed: list[int]) -> None:
        d = self.divergence
        where = "the columns agree so far" if d is None else (
            f"first divergence{'' if d.settled else ' so far'} at step {d.step}: "
            + " · ".join(f"{NAMES[c]} {self._token_text(c, d.step)}" for c in range(len(runs)) if c not in failed))
        running = [NAMES[c] for c, r in enumerate(runs) if r.running]
        more = f" — running {', '.join(running)}" if running and self._running else ""
        fails = "".join(f" {NAMES[c]} failed: {runs[c].finished.message}." for c in failed)
        self.status.setText(f"{where}{more}.{fails} Click a row for that step's distributions; double-click a cell "
                            "to open its run in the window.")

    def _token_text(self, col: int, step: int) -> str:
        run = self._run(col)
        if run is not None and step < len(run.steps):
            return repr(run.steps[step].text)
        return "(ended)" if run is not None and not run.running else "(not yet)"

    def shown_step(self) -> int | None:
        """The step the charts show: the cursor, else the first divergence, else the latest step."""
        if self.step is not None:
            return self.step
        if self.divergence is not None:
            return self.divergence.step
        rows = max(self.table.filled, default=0)
        return rows - 1 if rows else None

    def _draw_chart(self) -> None:
        k, runs = self.shown_step(), self.runs()
        if k is None or not self.columns or any(r is None for r in runs):
            self.charts.draw([None] * len(self.charts.groups))
            return
        steps = [r.steps[k] if k < len(r.steps) else None for r in runs]
        how = DISTRIBUTIONS[self.distribution.currentText()]
        self.charts.draw([overlay([steps[c] for c in g], k, how) for g in self.charts.groups])


def model_sources(window: QWidget | None) -> Callable[[], ModelSources]:
    """What the window's model bar knows of the user's models (recent, folders, its server), asked when a column's
    model list is made or its picker opens; none without a model bar (a view made on its own)."""
    bar = getattr(window, "model_bar", None)

    def sources() -> ModelSources:
        if bar is None:
            return ModelSources()
        return ModelSources(tuple(bar.recent), tuple(bar.folders), bar.remote.base_url())

    return sources
