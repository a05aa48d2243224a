"""The sweep window: N samples of the prompt under each cell of a grid over two settings, cells coloured by a
chosen statistic as they finish.

Each cell is one request of N samples; cells share the window's model and prompt, so they run in batches
(`Playground.generate_together`: one prefill, one batched decode of every row) of at most `batch_rows` rows, one
batch after another; every sample is a run of the session. A cell fills as its samples finish. Stop ends the batch in
progress: its cells, and the cells not started, stay empty. Clicking a finished cell asks for its samples
(`samples_requested`); a prompt set runs against the cell selected (`selected_cell`).
The grid and every statistic are `app.core.compare.statistics`'s; the grid (`SweepGrid`, app/ui/tools/sweep_grid.py)
only colours cells between the lowest and the highest value shown, and this view writes the table as CSV (File →
Export's atomic writer). The grid shown is kept in the session (`Views.sweep`: each cell's runs and statistics) and
drawn again, from those numbers, when it is reopened.
"""

from __future__ import annotations

import csv
import io
from dataclasses import replace
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.compare.job_plan import CellRun, SweepPlan
from app.core.compare.statistics import STATISTICS, Axis, compare, make_grid, parse_axis, sweep_header, sweep_row
from app.core.files import write_atomic
from app.core.session.view_records import SweepRecord, SweptCell
from app.core.settings import FIELDS, SettingsError
from app.ui.tools.sweep_grid import SweepGrid, at

if TYPE_CHECKING:
    from app.core.compare.statistics import Cell
    from app.core.events import Request
    from app.core.session.store import Session
    from app.ui.viewmodel.playground import Playground

DEFAULT_AXES = (("temperature", "0.2,0.7,1.2"), ("top_p", "0.8,0.95,1"))
MAX_BATCH_ROWS = 64  # rows decoded together at most (a cell of N samples is N rows; a cell is never split)


class SweepView(QWidget):
    """Two axes (setting, values), N, the statistic that colours the cells, Run / Stop, progress, the grid."""

    samples_requested = Signal(object)  # the Request of a finished cell: show its samples
    failed = Signal(str)  # a line a person can act on (a bad axis, a file that cannot be written)

    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("Sweep — Logit Lab")
        self.pg = playground
        self.cells: list[CellRun] = []
        self.axes: tuple[Axis, Axis] | None = None
        self.plan = SweepPlan()  # the sweep's cells, run batch after batch by the view-model
        self._running = False
        self.batch_rows = MAX_BATCH_ROWS
        self.names = [QComboBox() for _ in DEFAULT_AXES]
        self.values = [QLineEdit(v) for _, v in DEFAULT_AXES]
        for combo, (name, _) in zip(self.names, DEFAULT_AXES, strict=True):
            combo.addItems([f.name for f in FIELDS])
            combo.setCurrentText(name)
        self.count = QSpinBox(minimum=1, maximum=64, value=4, prefix="N = ", toolTip="Samples per cell")
        self.statistic = QComboBox(toolTip="What colours the cells")
        self.statistic.addItems(list(STATISTICS))
        self.pattern = QLineEdit(placeholderText="regular expression (match_rate)")
        self.run_button = QPushButton("Run sweep")
        self.stop_button = QPushButton("Stop", enabled=False)
        self.export_button = QPushButton("Export CSV…", enabled=False)
        self.status = QLabel("Choose two settings and their values (2 to 6 each), then Run sweep.")
        self.grid = SweepGrid()
        self._layout()
        self._wire()
        self.restore()

    def _layout(self) -> None:
        form = QGridLayout()
        for i, label in enumerate(("rows", "columns")):
            form.addWidget(QLabel(label), i, 0)
            form.addWidget(self.names[i], i, 1)
            form.addWidget(self.values[i], i, 2)
        form.setColumnStretch(2, 1)
        controls = QHBoxLayout()
        for w in (self.count, QLabel("colour by"), self.statistic, self.pattern, self.run_button, self.stop_button,
                  self.export_button):
            controls.addWidget(w)
        box = QVBoxLayout(self)
        box.addLayout(form)
        box.addLayout(controls)
        box.addWidget(self.status)
        box.addWidget(self.grid, 1)
        self.resize(900, 600)

    def _wire(self) -> None:
        self.run_button.clicked.connect(self.run)
        self.stop_button.clicked.connect(self.stop)
        self.export_button.clicked.connect(self._choose_export)
        self.statistic.currentTextChanged.connect(lambda _s: (self._draw(), self._store()))
        self.grid.cellClicked.connect(self.open_cell)
        self.pg.session_changed.connect(self._score)
        self.pg.plan_ended.connect(self._ended)
        self.pg.session_replaced.connect(self.restore)

    # verbs ------------------------------------------------------------------------------------------------
    def run(self) -> bool:
        """Start the sweep from the editing state's prompt and settings; False (with `failed`) if it cannot."""
        settings = self.pg.checked_settings()
        if settings is None:
            return False
        if self.pg.busy and not self.pg.loading_only:
            message = "a run is in progress: wait for it, or Stop it, then Run sweep"
            self.failed.emit(message)
            self.status.setText(message)
            return False
        try:
            axes = tuple(parse_axis(f"{n.currentText()}={v.text()}") for n, v in zip(self.names, self.values,
                                                                                     strict=True))
            if any(len(a.values) < 2 for a in axes):
                raise SettingsError("a sweep's axes take 2 to 6 values each")
            cells = make_grid(settings.with_(seed=self.pg.editing.next_run_seed()), axes)
            pattern = self.pattern.text() or None
            compare([], pattern)  # a bad regular expression is refused now, not after the first cell
        except SettingsError as e:
            self.failed.emit(str(e))
            self.status.setText(str(e))
            return False
        self.axes, self.cells = (axes[0], axes[1]), [CellRun(c) for c in cells]
        self.plan = SweepPlan(self.cells, self.pg.make_request(settings), self.count.value(), self.batch_rows)
        self.grid.make(self.axes, self.cells)
        started = self.pg.run_plan(self.plan)
        self._set_running(started)
        self._progress()
        return started

    @property
    def batches(self) -> int:
        """Batches submitted in this sweep."""
        return self.plan.jobs

    def stop(self) -> None:
        """Stop the batch in progress; its cells and those not started stay empty."""
        self.plan.stop()
        self.pg.stop()

    def open_cell(self, row: int, col: int) -> None:
        cr = at(self.cells, row, col)
        if cr is not None and cr.result is not None:
            self.samples_requested.emit(cr.request)

    def selected_cell(self) -> Cell | None:
        """The cell selected in the grid (the one last clicked), None if none is."""
        cr = self.grid.current(self.cells)
        return cr.cell if cr is not None else None

    def export_csv(self, path: str) -> None:
        """The finished cells as CSV (`sweep_header` columns), written atomically."""
        write_atomic(path, self.csv_text())

    def csv_text(self) -> str:
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        names = [a.name for a in self.axes] if self.axes else []
        w.writerow(sweep_header(names))
        for cr in self.cells:
            if cr.result is not None:
                w.writerow(sweep_row(0, cr.cell, cr.result.stats, names))
        return out.getvalue()

    # running ----------------------------------------------------------------------------------------------
    def _ended(self, plan: SweepPlan) -> None:
        if plan is self.plan:
            self._set_running(False)
            self._progress()

    def _score(self) -> None:
        """A run finished somewhere: score each started cell whose samples have all ended (the view-model starts the
        next batch); a cell stopped before its end stays empty."""
        for cr in self.cells:
            if cr.request is None or cr.result is not None or cr.stopped:
                continue
            traces = self.pg.session.finished_traces(cr.request.id)
            if traces is None:
                continue
            runs = self.pg.session.of_request(cr.request.id)
            if any(r.finished.reason in ("cancelled", "error") for r in runs):
                cr.stopped = True
                self.grid.mark_stopped(cr)
                continue
            cr.result = compare(traces, self.pattern.text() or None)
        self._draw()
        self._progress()

    def _set_running(self, running: bool) -> None:
        self._running = running
        self.run_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.export_button.setEnabled(not running and any(cr.result is not None for cr in self.cells))

    def _progress(self) -> None:
        done = sum(cr.result is not None for cr in self.cells)
        word = "stopped" if self.plan.stopped else "done" if done == len(self.cells) else "running"
        batches = f"{self.batches} batch{'es' * (self.batches != 1)}"
        self.status.setText(f"{done} of {len(self.cells)} cells {word} · {self.count.value()} samples each, "
                            f"{batches} · colour: red the lowest value shown, green the highest · click a cell for "
                            "its samples")
        self._store()

    # the session keeps what the view shows --------------------------------------------------------------------
    def record(self) -> SweepRecord | None:
        """The grid as shown: axes, N, the colouring statistic, and each cell's runs and statistics."""
        if self.axes is None:
            return None
        cells = tuple(SweptCell(cr.cell, cr.request.run_ids if cr.request is not None else (), cr.result, cr.stopped)
                      for cr in self.cells)
        return SweepRecord(self.axes, self.count.value(), self.statistic.currentText(), self.pattern.text(),
                           self.batches, cells)

    def _store(self) -> None:
        """Keep the grid shown in the session (what its file saves); a change marks the session modified."""
        session, record = self.pg.session, self.record()
        if record != session.views.sweep:
            session.views = replace(session.views, sweep=record)
            self.pg.session_changed.emit()

    def restore(self) -> None:
        """Draw the session's sweep (a reopened session's) from its cells' recorded statistics, or nothing."""
        record = self.pg.session.views.sweep
        self._forget()
        if record is None:
            return
        for combo, values, axis in zip(self.names, self.values, record.axes, strict=False):
            combo.setCurrentText(axis.name)
            values.setText(",".join(f"{v:g}" for v in axis.values))
        self.count.setValue(record.samples)
        self.pattern.setText(record.pattern)
        self.axes = (record.axes[0], record.axes[-1])
        session = self.pg.session
        self.cells = [CellRun(c.cell, _request_of(session, c.run_ids), c.result, c.stopped) for c in record.cells]
        self.plan = SweepPlan(self.cells, n=record.samples, batch_rows=self.batch_rows)
        # not running now: a cell that had not ended was stopped
        self.plan.jobs, self.plan.stopped = record.batches, any(cr.result is None for cr in self.cells)
        self.grid.make(self.axes, self.cells)
        for cr in (cr for cr in self.cells if cr.stopped):
            self.grid.mark_stopped(cr)
        self.statistic.setCurrentText(record.statistic)
        self._draw()
        self._set_running(False)
        self._progress()

    def _forget(self) -> None:
        self.plan.stop()
        self.cells, self.axes = [], None
        self.grid.forget()
        self._set_running(False)

    # drawing ----------------------------------------------------------------------------------------------
    def _draw(self) -> None:
        self.grid.draw(self.cells, self.statistic.currentText())

    def _choose_export(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export the sweep as CSV", "sweep.csv", "CSV (*.csv)")
        if path:
            try:
                self.export_csv(path)
            except OSError as e:
                self.failed.emit(f"cannot write {path}: {e.strerror or e}")


def _request_of(session: Session, run_ids: tuple[int, ...]) -> Request | None:
    """The request of a cell's samples (None: none of them is in the session)."""
    run = session.get(run_ids[0]) if run_ids else None
    return run.request if run is not None else None
