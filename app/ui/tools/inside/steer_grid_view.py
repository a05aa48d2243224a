"""The steering dock's Grid tab: the window's prompt under a strength × layer grid of the dock's vector, a cell
a steered run (`SteerGridPlan`, run by the view-model's `run_plan`, one seed for all), each cell drawn from its
`CellResult`: the text, its perplexity under the unsteered model, the mean KL from it, the strength relative to the
residual norm, and a cell the core marked broken in red. It draws what the core computed (`cell_result`,
`mark_broken`) and does no maths of its own. The session keeps the grid shown (`SteerGridRecord`): a reopened
session's is drawn again from its cells' recorded results.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.compare.steer_grid import (
    FLUENCY,
    CellResult,
    GridRun,
    SteerGridPlan,
    cell_result,
    make_grid,
    mark_broken,
)
from app.core.control_vectors import ControlVector, parse_layer_sets, parse_strengths
from app.core.session.view_records import SteeredCell, SteerGridRecord

if TYPE_CHECKING:
    from app.core.events import Request
    from app.core.session.store import Session
    from app.ui.viewmodel.playground import Playground

BROKEN = QColor(220, 40, 40, 110)  # a cell whose fluency broke (the core's mark)
STOPPED = "stopped"
READY = "Make or load a vector, then Run grid. "
SHOWN_CHARS = 600  # a cell's text shown at most (the table elides what does not fit; the tooltip holds it all)
HELP = (f"Each cell the prompt steered at its layers and strength (one seed for all); red: BROKEN, its perplexity "
        f"under the unsteered model {FLUENCY:g}× the row's unsteered one or more. Hover a cell for its whole text.")


def numbers(r: CellResult) -> str:
    """A cell's first line: its mark, perplexity under the unsteered model, mean KL, relative strength."""
    ppl = "?" if r.perplexity is None else f"{r.perplexity:.3g}"
    if not r.cell.strength:
        return f"ppl {ppl} · unsteered"
    rel = "" if r.relative is None else f" · {r.relative:.2g}× norm"
    return f"{'BROKEN · ' if r.broken else ''}ppl {ppl} · KL {r.mean_kl:.3g}{rel}"


def tooltip(r: CellResult) -> str:
    c = r.cell
    rows = [f"<b>layers {','.join(map(str, c.layers))} × strength {c.strength:g}</b>"]
    if r.relative is not None:
        rows.append(f"adds {r.relative:.3g}× the residual stream's norm")
    rows.append("perplexity under the unsteered model: " + ("?" if r.perplexity is None else f"{r.perplexity:.4g}"))
    if c.strength:
        first = "never" if r.diverged_at is None else f"at step {r.diverged_at}"
        rows.append(f"mean KL from the unsteered model {r.mean_kl:.3g} nats per step; first left its draw {first}")
    if r.broken:
        rows.append(f"<b>BROKEN</b>: {FLUENCY:g}× the row's unsteered perplexity or more")
    return "<br>".join(rows) + f"<hr><div style='white-space: pre-wrap'>{html.escape(r.text)}</div>"


class SteerGridView(QWidget):
    """Strengths and layer sets typed, samples per cell, Run grid / Stop, a status line, the table of cells."""

    ended = Signal(object)  # the SteerGridPlan, once its last cell has ended (done or stopped)

    def __init__(self, playground: Playground, busy: Callable[[], bool] = lambda: False,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.pg = playground
        self._busy = busy  # the dock's own job in progress (a vector being made, a single steered run)
        self.vector: ControlVector | None = None
        self.path = ""
        self.plan = SteerGridPlan()
        self._plan_vector: ControlVector | None = None  # the vector the plan runs (a new one made meanwhile is not)
        self._stopped: set[tuple[int, int]] = set()  # the cells (row, col) stopped or failed before their samples ended
        self.strengths = QLineEdit("0, 0.5, 1, 2, 4", toolTip="The columns: strengths with commas (0, the "
                                   "unsteered baseline, is always the first)")
        self.layer_sets = QLineEdit(placeholderText="1; 2-3", toolTip="The rows: sets of layers steered together "
                                    "(3, 2-5 or 1,3), sets apart by semicolons")
        self.samples = QSpinBox(minimum=1, maximum=16, value=1, prefix="N = ", toolTip="Samples per cell (their "
                                "perplexities and KL averaged; the text shown is the first's)")
        self.run_button, self.stop_button = QPushButton("Run grid"), QPushButton("Stop", enabled=False)
        self.status = QLabel(READY + HELP, wordWrap=True)
        self.table = QTableWidget(0, 0, editTriggers=QTableWidget.EditTrigger.NoEditTriggers, wordWrap=True)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        for header in (self.table.horizontalHeader(), self.table.verticalHeader()):
            header.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self._layout()
        self.run_button.clicked.connect(self.run)
        self.stop_button.clicked.connect(self.stop)
        playground.session_changed.connect(self._score)
        playground.plan_ended.connect(self._ended)
        playground.session_replaced.connect(self.restore)
        self.restore()

    def _layout(self) -> None:
        row = QHBoxLayout()
        for w in (QLabel("strengths"), self.strengths, QLabel("layer sets"), self.layer_sets, self.samples,
                  self.run_button, self.stop_button):
            row.addWidget(w)
        row.setStretch(1, 2)
        row.setStretch(3, 1)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 4, 0, 0)
        box.addLayout(row)
        box.addWidget(self.status)
        box.addWidget(self.table, 1)

    def set_vector(self, vector: ControlVector, path: str) -> None:
        """The vector the grid steers with (the dock's); its middle layer as the first row when none is typed."""
        self.vector, self.path = vector, path
        if not self.layer_sets.text().strip():
            self.layer_sets.setText(str(vector.layers[len(vector.layers) // 2]))

    # verbs ------------------------------------------------------------------------------------------------------
    def run(self) -> bool:
        """Start the grid on the window's prompt and sampler; False (and why, in the status) if it cannot."""
        settings = self.pg.checked_settings()
        if self.vector is None or settings is None:
            self.status.setText("Make or load a vector first." if self.vector is None else
                                "The sampler settings are not valid: see the sampler panel.")
            return False
        if self.pg.busy or self._busy():
            self.status.setText("A run is in progress: wait for it, or stop it.")
            return False
        try:
            settings = settings.with_(seed=self.pg.editing.next_run_seed())  # one seed: cells differ by steering
            cells = make_grid(settings, self.path, parse_layer_sets(self.layer_sets.text()),
                              parse_strengths(self.strengths.text()), self.vector)
        except ValueError as e:
            self.status.setText(str(e))
            return False
        self.plan = SteerGridPlan([GridRun(c) for c in cells], self.pg.make_request(settings), self.samples.value())
        self._plan_vector = self.vector
        self._make_table()
        started = self.pg.run_plan(self.plan)
        self._set_running(started)
        self._progress()
        return started

    def stop(self) -> None:
        """Stop the cell in progress; it and the cells not started stay empty."""
        self.plan.stop()
        self.pg.stop()

    @property
    def results(self) -> list[CellResult]:
        return [run.result for run in self.plan.cells if run.result is not None]

    # running ----------------------------------------------------------------------------------------------------
    def _score(self) -> None:
        """A run ended somewhere: each started cell whose samples have all ended gets its result, then the broken
        marks over the cells done (a row's baseline, strength 0, runs first)."""
        session, changed = self.pg.session, False
        for run in self.plan.cells:
            if run.request is None or run.result is not None or (run.cell.row, run.cell.col) in self._stopped:
                continue
            traces = session.finished_traces(run.request.id)
            if traces is None:
                continue
            if any(r.finished.reason in ("cancelled", "error") for r in session.of_request(run.request.id)):
                self._stopped.add((run.cell.row, run.cell.col))
            else:
                run.result = cell_result(run.cell, traces, self._plan_vector)
            changed = True
        if changed:
            marked = iter(mark_broken(self.results))
            for run in self.plan.cells:
                run.result = next(marked) if run.result is not None else None
            self._draw()
            self._progress()

    def _ended(self, plan: object) -> None:
        if plan is self.plan:
            self._set_running(False)
            self._progress()
            self.ended.emit(plan)

    def _set_running(self, running: bool) -> None:
        self.run_button.setEnabled(not running)
        self.stop_button.setEnabled(running)

    def _progress(self) -> None:
        done, total = len(self.results), len(self.plan.cells)
        word = "stopped" if self.plan.stopped else "done" if done == total else "running"
        self.status.setText(f"{done} of {total} cells {word}. {HELP}")
        self._store()

    # the session keeps what the view shows ----------------------------------------------------------------------
    def record(self) -> SteerGridRecord | None:
        """The grid as shown: strengths and layer sets as typed, N, each cell's runs and result (None: no grid)."""
        if not self.plan.cells:
            return None
        cells = tuple(SteeredCell(run.cell, run.request.run_ids if run.request is not None else (), run.result,
                                  (run.cell.row, run.cell.col) in self._stopped) for run in self.plan.cells)
        return SteerGridRecord(self.strengths.text(), self.layer_sets.text(), self.plan.n, cells)

    def _store(self) -> None:
        """Keep the grid shown in the session (what its file saves); a change marks the session modified."""
        session, record = self.pg.session, self.record()
        if record != session.views.steer_grid:
            session.views = replace(session.views, steer_grid=record)
            self.pg.session_changed.emit()

    def restore(self) -> None:
        """Draw the session's grid (a reopened session's) from its cells' recorded results, or nothing."""
        record = self.pg.session.views.steer_grid
        self.plan.stop()
        self.plan, self._plan_vector = SteerGridPlan(), None
        self._set_running(False)
        if record is None:
            self.table.clear()
            self.table.setRowCount(0)
            self.table.setColumnCount(0)
            self.status.setText(READY + HELP)
            return
        self.strengths.setText(record.strengths)
        self.layer_sets.setText(record.layer_sets)
        self.samples.setValue(record.samples)
        session = self.pg.session
        runs = [GridRun(c.cell, _request_of(session, c.run_ids), c.result) for c in record.cells]
        self.plan = SteerGridPlan(runs, n=record.samples)
        self._make_table()
        # not running now: a cell that had not ended was stopped
        self._stopped = {(c.cell.row, c.cell.col) for c in record.cells if c.stopped}
        self.plan.stopped = any(run.result is None for run in runs)
        self._draw()
        self._progress()

    # drawing ----------------------------------------------------------------------------------------------------
    def _make_table(self) -> None:
        """Rows by layer set, columns by strength, every cell waiting."""
        self._stopped = set()
        cells = [run.cell for run in self.plan.cells]
        rows = sorted({(c.row, c.layers) for c in cells})
        cols = sorted({(c.col, c.strength) for c in cells})
        self.table.clear()
        self.table.setRowCount(len(rows))
        self.table.setColumnCount(len(cols))
        self.table.setVerticalHeaderLabels([f"layers {','.join(map(str, layers))}" for _, layers in rows])
        self.table.setHorizontalHeaderLabels([f"{s:g} (unsteered)" if not s else f"strength {s:g}" for _, s in cols])
        for c in cells:
            item = QTableWidgetItem("…")
            item.setTextAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
            self.table.setItem(c.row, c.col, item)

    def _draw(self) -> None:
        for run in self.plan.cells:
            item = self.table.item(run.cell.row, run.cell.col)
            if item is None:
                continue
            r = run.result
            if r is None:
                if (run.cell.row, run.cell.col) in self._stopped:
                    item.setText(STOPPED)
                    item.setToolTip("Stopped (or failed) before its samples ended")
                continue
            text = r.text[:SHOWN_CHARS].replace("\n", "↵")
            item.setText(f"{numbers(r)}\n{text}")
            item.setToolTip(tooltip(r))
            item.setBackground(QBrush(BROKEN) if r.broken else QBrush())


def _request_of(session: Session, run_ids: tuple[int, ...]) -> Request | None:
    """The request of a cell's samples (None: none of them is in the session)."""
    run = session.get(run_ids[0]) if run_ids else None
    return run.request if run is not None else None
