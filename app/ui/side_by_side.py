"""The side-by-side window: 2–4 columns on one prompt and one model, each under its own sampler settings.

Each column is one request through the `Playground`, sent one after another (the model thread runs one at a
time; after the first, the prompt's KV cache is reused), so every column is a run of the session (saved, reopened
and exported like any run). The output is aligned by step, one row per step and one column per run, streaming in
as steps arrive; the first divergence (`side_by_side.first_divergence`) is marked. One step cursor for all: the
chart overlays that step of every column (`side_by_side.overlay`, drawn by `OverlayChart` as recorded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QResizeEvent
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.events import Request
from app.core.settings import SamplerSettings, SettingsError
from app.core.side_by_side import MAX_COLUMNS, MIN_COLUMNS, Divergence, first_divergence, overlay
from app.ui.column_form import ColumnForm
from app.ui.formatting import DIVERGED, format_prob, visible
from app.ui.overlay_chart import COLUMN_COLORS, NAMES, OverlayChart

if TYPE_CHECKING:
    from app.core.record import StepTrace
    from app.core.session import Run
    from app.ui.playground import Playground

EMPTY = "Set each column's settings, then Run side by side: the prompt, one run per column, aligned by step"
MARK = QColor(DIVERGED.red(), DIVERGED.green(), DIVERGED.blue(), 70)  # the first divergence's row
FORM_GAP = 8  # px between two forms
DISTRIBUTIONS = {"sampled from": "final", "model (raw)": "raw"}


@dataclass
class Column:
    """A column once started: its settings and its request (one run)."""

    settings: SamplerSettings
    request: Request | None = None


class SideBySideView(QWidget):
    """Columns' forms, Run / Stop, the aligned output (a table: rows are steps) and the overlaid step chart."""

    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("Side by side — Logit Lab")
        self.pg = playground
        self.columns: list[Column] = []
        self.divergence: Divergence | None = None
        self.step: int | None = None  # the step cursor (None: the first divergence, else the latest step)
        self._running = False
        self._filled: list[int] = []  # steps shown per column: appending only what is new
        self._placed = (0, 0)  # (forms shown, forms per row)
        self.count = QSpinBox(minimum=MIN_COLUMNS, maximum=MAX_COLUMNS, value=2, suffix=" columns")
        self.forms = [ColumnForm(NAMES[c], COLUMN_COLORS[c]) for c in range(MAX_COLUMNS)]
        self.reset_button = QPushButton("Reset to the panel", toolTip="Every column back to the sampler panel's "
                                        "settings")
        self.run_button = QPushButton("Run side by side")
        self.stop_button = QPushButton("Stop", enabled=False)
        self.distribution = QComboBox(toolTip="The chart's distribution: what each column sampled from, or the "
                                      "model's own")
        self.distribution.addItems(list(DISTRIBUTIONS))
        self.status = QLabel(EMPTY, wordWrap=True)
        self.table = QTableWidget(0, MIN_COLUMNS, editTriggers=QTableWidget.EditTrigger.NoEditTriggers,
                                  selectionBehavior=QTableWidget.SelectionBehavior.SelectRows,
                                  selectionMode=QTableWidget.SelectionMode.SingleSelection)
        self.chart = OverlayChart()
        self._layout()
        self._wire()
        self.reset_forms()
        self._set_count(self.count.value())

    def _layout(self) -> None:
        top = QHBoxLayout()
        for w in (self.count, self.reset_button, self.run_button, self.stop_button, QLabel("chart:"),
                  self.distribution):
            top.addWidget(w)
        top.addStretch(1)
        self.form_grid = QGridLayout()
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        split = QSplitter(Qt.Orientation.Horizontal, childrenCollapsible=False)
        split.addWidget(self.table)
        split.addWidget(self.chart)
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
        self.pg.steps_appended.connect(lambda _steps: self._sync())
        self.pg.session_changed.connect(self._sync)
        self.pg.busy_changed.connect(lambda busy: None if busy or not self._running else self._start_next())
        self.pg.session_replaced.connect(self._forget)
        self.pg.failed.connect(lambda _message: self._set_running(False))  # a model that fails fails every column

    # verbs ------------------------------------------------------------------------------------------------
    def reset_forms(self) -> None:
        """Every form back to the sampler panel's settings (its seed: the one the panel shows)."""
        for f in self.forms:
            f.set_settings(self.pg.editing.settings)

    def run(self) -> bool:
        """Start one run per column on the editing state's prompt and model; False (the status says why) if the
        panel's settings are not valid or a run is in progress."""
        base = self.pg.checked_settings()
        if base is None or (self.pg.busy and not self.pg.loading_only):
            self.status.setText("A run is in progress: wait for it, or Stop it." if base else "The sampler panel's "
                                "settings are not valid (the window's banner says why).")
            return False
        try:
            settings = [f.settings(base) for f in self.forms[: self.count.value()]]
        except SettingsError as e:
            self.status.setText(str(e))
            return False
        self._clear()
        self.columns = [Column(s) for s in settings]
        self._filled = [0] * len(settings)
        self._set_running(True)
        return self._start_next()

    def stop(self) -> None:
        """Stop the column in progress; the columns not started stay empty."""
        self._set_running(False)
        self.pg.stop()

    def select_step(self, step: int | None) -> None:
        """Move the one step cursor: the chart shows step `step` of every column."""
        if step != self.step:
            self.step = step
            self._draw_chart()

    def open_cell(self, row: int, col: int) -> None:
        """Show the column's run in the main window, at that step (its output, chart, fork from there)."""
        run = self._run(col)
        if run is not None and row < len(run.steps):
            self.pg.show_run(run.id)
            self.pg.select_step(row)

    # running ----------------------------------------------------------------------------------------------
    def _start_next(self) -> bool:
        nxt = next((c for c in self.columns if c.request is None), None)
        if nxt is None or not self._running:
            self._set_running(False)
            return False
        nxt.request = self.pg.make_request(nxt.settings)
        if not self.pg.generate(nxt.request):
            nxt.request = None
            self._set_running(False)
            return False
        i = self.columns.index(nxt)
        self.pg.branches.rename(nxt.request.id, f"{NAMES[i]}: {self.forms[i].summary()}")
        return True

    def _set_running(self, running: bool) -> None:
        self._running = running
        self.run_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.count.setEnabled(not running)

    def _run(self, col: int) -> Run | None:
        c = self.columns[col] if col < len(self.columns) else None
        return self.pg.session.get(c.request.id) if c is not None and c.request is not None else None

    def runs(self) -> list[Run | None]:
        """Each column's run (None: not started)."""
        return [self._run(c) for c in range(len(self.columns))]

    def _forget(self) -> None:
        self._set_running(False)
        self._clear()

    def _clear(self) -> None:
        self.columns, self.divergence, self.step, self._filled = [], None, None, []
        self.table.setRowCount(0)
        self.status.setText(EMPTY)
        self.chart.show_overlay(None, self.count.value())

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

    def _set_count(self, n: int) -> None:
        self._place_forms()
        if not self.columns:
            self.table.setColumnCount(n)
            self.table.setHorizontalHeaderLabels(list(NAMES[:n]))
            self.chart.show_overlay(None, n)

    # drawing ----------------------------------------------------------------------------------------------
    def _sync(self) -> None:
        """Append the steps that arrived since the last call (every column), then mark and chart."""
        if not self.columns:
            return
        runs = self.runs()
        steps = [r.steps if r is not None else [] for r in runs]
        rows = max(len(s) for s in steps)
        if self.table.columnCount() != len(self.columns):
            self.table.setColumnCount(len(self.columns))
            self.table.setHorizontalHeaderLabels(list(NAMES[: len(self.columns)]))
        if rows > self.table.rowCount():
            self.table.setRowCount(rows)
        for c, col_steps in enumerate(steps):
            for k in range(self._filled[c], len(col_steps)):
                self.table.setItem(k, c, self._cell(col_steps[k]))
            self._filled[c] = len(col_steps)
        done = [r is not None and not r.running for r in runs]
        self._mark(first_divergence([[st.token_id for st in s] for s in steps], done), done)
        self._status(runs)
        self._draw_chart()

    def _cell(self, st: StepTrace) -> QTableWidgetItem:
        item = QTableWidgetItem(visible(st.text))
        p, kind = st.drawn_prob
        item.setToolTip(f"step {st.step + 1}: {st.text!r}, p = {format_prob(p) if p is not None else '—'}"
                        f"{' (model)' if kind == 'model' else ''}")
        return item

    def _mark(self, divergence: Divergence | None, done: list[bool]) -> None:
        """Shade the row of the first divergence (and only it); a column that had ended there says so."""
        if self.divergence is not None and divergence != self.divergence:
            self._paint_row(self.divergence.step, None, done)
        self.divergence = divergence
        if divergence is not None:
            self._paint_row(divergence.step, MARK, done)

    def _paint_row(self, row: int, color: QColor | None, done: list[bool]) -> None:
        self.table.setVerticalHeaderItem(row, QTableWidgetItem(f"◆ {row + 1}" if color is not None else str(row + 1)))
        for c in range(self.table.columnCount()):
            item = self.table.item(row, c)
            if item is None and color is not None and c < len(done) and done[c] and self._filled[c] <= row:
                item = QTableWidgetItem("(ended)")
                self.table.setItem(row, c, item)
            if item is not None:
                item.setBackground(QBrush(color) if color is not None else QBrush())

    def _status(self, runs: list[Run | None]) -> None:
        running = [NAMES[c] for c, r in enumerate(runs) if r is None or r.running]
        d = self.divergence
        where = "the columns agree so far" if d is None else (
            f"first divergence{'' if d.settled else ' so far'} at step {d.step + 1}: "
            + " · ".join(f"{NAMES[c]} {self._token_text(c, d.step)}" for c in range(len(runs))))
        more = f" — running {', '.join(running)}" if running and self._running else ""
        self.status.setText(f"{where}{more}. Click a row for that step's distributions; double-click a cell to "
                            "open its run in the window.")

    def _token_text(self, col: int, step: int) -> str:
        run = self._run(col)
        if run is not None and step < len(run.steps):
            return repr(run.steps[step].text)
        return "(ended)" if run is not None and not run.running else "(not yet)"

    def shown_step(self) -> int | None:
        """The step the chart shows: the cursor, else the first divergence, else the latest step."""
        if self.step is not None:
            return self.step
        if self.divergence is not None:
            return self.divergence.step
        rows = self.table.rowCount()
        return rows - 1 if rows else None

    def _draw_chart(self) -> None:
        k = self.shown_step()
        if k is None or not self.columns:
            self.chart.show_overlay(None, self.count.value())
            return
        steps = [r.steps[k] if r is not None and k < len(r.steps) else None for r in self.runs()]
        self.chart.show_overlay(overlay(steps, k, DISTRIBUTIONS[self.distribution.currentText()]), len(steps))
