""""Sample ×N": N continuations of the prompt in one batched run, listed with their statistics.

One request of N samples (one prefill, one batched decode on the model thread) through the `Playground`; every
sample is a run of the session, so a row opens as the shown run (double-click) and forks like any other. Above
the list: distinct-1/2, unique completions, the spread of mean log-probabilities and a chart of how many samples
still agree with the most common continuation, position by position. Every number drawn is
`app.core.compare.statistics`'s, computed once when the samples are done; this view only lays them out and sorts the
rows. The list shown is kept in the session (`Views.samples`) and drawn again, from those numbers, when it is reopened.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.compare.prompt_sets import label_names, settings_label
from app.core.compare.statistics import Comparison, SampleStats, compare
from app.core.record.export import order_text, token_spans
from app.core.session.view_records import SamplesRecord
from app.core.settings import SamplerSettings
from app.ui.charts.shared import RAW, ThemedPlot

if TYPE_CHECKING:
    from app.core.events import Request
    from app.core.session.store import Run
    from app.ui.viewmodel.playground import Playground

MAX_N = 64
COLUMNS = ("#", "seed", "mean logprob", "perplexity", "length", "text")
SORT_KEYS = {"sample": "sequence", "mean logprob": "mean_logprob", "perplexity": "perplexity", "length": "length"}
SORT_COLUMN = {"sequence": 0, "mean_logprob": 2, "perplexity": 3, "length": 4}
EMPTY_POSITIONS = 10  # the chart's width before any sample
AGREEMENT = "Samples that agree with the most common continuation, position by position"
EMPTY = "Press Sample ×N: N continuations of the prompt, drawn together (seeds seed … seed + N − 1)"


def _number(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else "∞" if math.isinf(x) else f"{x:.{digits}f}"


def settings_words(s: SamplerSettings) -> str:
    """What samples ran under, short: the temperature and every setting away from its default, the stage order when
    it is not the default one ("T=1.2, top-p=0.9")."""
    words = settings_label(s, label_names([s]))
    return words if s.stage_order == SamplerSettings().stage_order else f"{words}, order {order_text(s)}"


class Cell(QTableWidgetItem):
    """A number of the list, shown formatted and sorted by its value (a missing one as `missing`)."""

    def __init__(self, text: str, value: float | None, run_id: int, missing: float = -math.inf) -> None:
        super().__init__(text)
        self.value = missing if value is None else float(value)
        self.setData(Qt.ItemDataRole.UserRole, run_id)
        self.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    def __lt__(self, other: QTableWidgetItem) -> bool:
        return self.value < other.value if isinstance(other, Cell) else super().__lt__(other)


class AgreementChart(ThemedPlot):
    """Per position, how many samples share the most common prefix up to there (`SetStats.agreement`), as bars."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.85, brush=RAW, pen=pg.mkPen(None))
        self.addItem(self.bars)
        self.setLabel("bottom", "position (generated token)")
        self.setLabel("left", "samples agreeing")
        self.setMouseEnabled(x=False, y=False)
        self.drawn: tuple[int, ...] = ()

    def show_agreement(self, agreement: tuple[int, ...], n: int) -> None:
        self.drawn = agreement
        self.bars.setOpts(x=np.arange(len(agreement)), height=np.asarray(agreement, dtype=float))
        self.setYRange(0, max(n, 1), padding=0.02)
        self.setXRange(-0.5, max(len(agreement), EMPTY_POSITIONS) - 0.5, padding=0.01)


class SamplesView(QWidget):
    """The "Sample ×N" window: N, Sample / Stop, the set's statistics, the agreement chart and the sortable list."""

    run_opened = Signal(int)  # run id: a sample was opened as the shown run

    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("Sample ×N — Logit Lab")
        self.pg = playground
        self.request: Request | None = None
        self.result: Comparison | None = None
        self.count = QSpinBox(minimum=2, maximum=MAX_N, value=8, prefix="N = ", toolTip="Samples to draw together")
        self.sample_button = QPushButton("Sample ×N", toolTip="Draw N continuations of the prompt under the panel's "
                                         "settings, in one batch: sample i with seed + i")
        self.stop_button = QPushButton("Stop", enabled=False)
        self.sort = QComboBox(toolTip="Order of the list (or click a column's header)")
        self.sort.addItems(list(SORT_KEYS))
        self.status = QLabel(EMPTY, wordWrap=True)
        self.summary = QLabel("", wordWrap=True, textFormat=Qt.TextFormat.RichText)
        self.chart = AgreementChart()
        self.table = QTableWidget(0, len(COLUMNS), selectionBehavior=QTableWidget.SelectionBehavior.SelectRows,
                                  editTriggers=QTableWidget.EditTrigger.NoEditTriggers)
        self._key, self._descending = "sequence", False
        self._layout()
        self._wire()
        self.restore()

    def _layout(self) -> None:
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setWordWrap(False)
        top = QHBoxLayout()
        for w in (self.count, self.sample_button, self.stop_button, QLabel("sort by"), self.sort):
            top.addWidget(w)
        top.addStretch(1)
        head = QWidget()
        hb = QVBoxLayout(head)
        hb.setContentsMargins(0, 0, 0, 0)
        hb.addWidget(self.summary)
        hb.addWidget(QLabel(AGREEMENT))
        hb.addWidget(self.chart, 1)
        split = QSplitter(Qt.Orientation.Vertical, childrenCollapsible=False)
        split.addWidget(head)
        split.addWidget(self.table)
        split.setSizes([220, 380])
        box = QVBoxLayout(self)
        box.addLayout(top)
        box.addWidget(self.status)
        box.addWidget(split, 1)
        self.resize(900, 600)

    def _wire(self) -> None:
        self.sample_button.clicked.connect(self.sample)
        self.stop_button.clicked.connect(self.pg.stop)
        self.sort.currentTextChanged.connect(lambda label: self.sort_by(SORT_KEYS[label]))
        self.table.horizontalHeader().sectionClicked.connect(self._header_clicked)
        self.table.cellDoubleClicked.connect(lambda row, _col: self.open_row(row))
        self.pg.session_changed.connect(self._refresh)
        self.pg.steps_appended.connect(lambda _steps: self._progress())
        self.pg.busy_changed.connect(self._busy)
        self.pg.session_replaced.connect(self.restore)

    # verbs ------------------------------------------------------------------------------------------------
    def sample(self) -> bool:
        """Start N samples of what the editing state holds; False (the playground says why) if it cannot."""
        settings = self.pg.checked_settings()
        if settings is None or (self.pg.busy and not self.pg.loading_only):
            return False
        request = self.pg.make_request(settings.with_(seed=self.pg.editing.next_run_seed()))
        request = type(request)(model=request.model, prompt=request.prompt, messages=request.messages,
                                settings=request.settings, top_n=request.top_n, n=self.count.value())
        self.clear()
        self._store(None)
        self.request = request
        if not self.pg.generate(request):
            self.request = None
            return False
        self._progress()
        return True

    def show_request(self, request: Request) -> None:
        """List the samples of an earlier request of the session (a sweep's cell)."""
        self.clear()
        self._store(None)
        self.request = request
        self._refresh()

    def open_row(self, row: int) -> None:
        """Show the row's sample as the window's run (its output, chart and timeline; fork from there)."""
        item = self.table.item(row, 0)
        if item is not None:
            run_id = int(item.data(Qt.ItemDataRole.UserRole))
            self.pg.show_run(run_id)
            self.run_opened.emit(run_id)

    def sort_by(self, key: str, descending: bool | None = None) -> None:
        """Order the rows by a `SampleStats` field (the numbers by default highest first, the sample number up)."""
        self._key = key
        self._descending = key != "sequence" if descending is None else descending
        order = Qt.SortOrder.DescendingOrder if self._descending else Qt.SortOrder.AscendingOrder
        self.table.sortItems(SORT_COLUMN[key], order)  # the rows move with their shaded text

    def clear(self) -> None:
        self.request, self.result = None, None
        self.table.setRowCount(0)
        self.summary.setText("")
        self.chart.show_agreement((), 1)
        self.status.setText(EMPTY)

    # the session keeps what the view shows --------------------------------------------------------------------
    def _store(self, record: SamplesRecord | None) -> None:
        """Keep the list shown in the session (what its file saves); a new one marks the session modified."""
        session = self.pg.session
        if record is not session.views.samples:
            session.views = replace(session.views, samples=record)
            self.pg.session_changed.emit()

    def restore(self) -> None:
        """Draw the session's list (a reopened session's) from its recorded statistics, or nothing."""
        self.clear()
        record = self.pg.session.views.samples
        if record is None:
            return
        first = self.pg.session.get(record.run_ids[0]) if record.run_ids else None
        self.request = first.request if first is not None else None
        self.result = record.result
        self._draw()

    # drawing ----------------------------------------------------------------------------------------------
    def _runs(self) -> list[Run]:
        return self.pg.session.of_request(self.request.id) if self.request is not None else []

    def _busy(self, busy: bool) -> None:
        self.stop_button.setEnabled(busy)
        self.sample_button.setEnabled(not busy or self.pg.loading_only)

    def _progress(self) -> None:
        runs = self._runs()
        if runs and self.result is None:
            done = sum(not r.running for r in runs)
            tokens = sum(len(r.steps) for r in runs)
            self.status.setText(f"sampling {len(runs)} continuations… {done} done, {tokens} tokens so far")

    def _refresh(self) -> None:
        if self.request is None or self.result is not None:
            return
        traces = self.pg.session.finished_traces(self.request.id)
        if traces is None:
            self._progress()
            return
        self.result = compare(traces)
        self._draw()
        self._store(SamplesRecord(self.request.run_ids, self.result))

    def _draw(self) -> None:
        r = self.result
        assert r is not None
        s = r.stats
        settings = self.request.settings if self.request is not None else None
        about = f" at {settings_words(settings)}, seeds {settings.seed}…" if settings else ""
        self.count.setValue(s.n)  # the N of the list shown (a sweep's cell has its own)
        self.status.setText(f"{s.n} samples{about} (double-click one to open it; fork it from there)")
        self.summary.setText(
            f"distinct-1 <b>{s.distinct_1:.3f}</b> · distinct-2 <b>{s.distinct_2:.3f}</b> · unique completions "
            f"<b>{s.unique}</b> of {s.n} · mean logprob <b>{_number(s.mean_logprob)}</b> ± "
            f"{_number(s.logprob_spread)} (min {_number(s.logprob_min)}, max {_number(s.logprob_max)}) · "
            f"perplexity {_number(s.perplexity, 2)} · mean length {s.mean_length:.1f}")
        self.chart.show_agreement(s.agreement, s.n)
        self._fill()

    def shown_samples(self) -> list[SampleStats]:
        """The samples in the list's order."""
        if self.result is None:
            return []
        by_run = {s.run_id: s for s in self.result.samples}
        return [by_run[int(self.table.item(r, 0).data(Qt.ItemDataRole.UserRole))] for r in range(self.table.rowCount())]

    def _fill(self) -> None:
        """One row per sample, made once per result; sorting moves them."""
        samples = self.result.samples if self.result is not None else ()
        traces = {r.id: r.trace for r in self._runs()}
        self.table.setRowCount(len(samples))
        for row, s in enumerate(samples):
            cells = (Cell(str(s.sequence + 1), s.sequence, s.run_id), Cell(str(s.seed), s.seed, s.run_id),
                     Cell(_number(s.mean_logprob), s.mean_logprob, s.run_id),
                     Cell(_number(s.perplexity, 2), s.perplexity, s.run_id, math.inf),
                     Cell(str(s.length), s.length, s.run_id))
            for col, item in enumerate(cells):
                self.table.setItem(row, col, item)
            trace = traces.get(s.run_id)
            label = QLabel(token_spans(trace).replace("\n", "↵") if trace is not None else s.text,
                           textFormat=Qt.TextFormat.RichText, toolTip=s.text)
            self.table.setCellWidget(row, len(COLUMNS) - 1, label)
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setStretchLastSection(True)
        self.sort_by(self._key, self._descending)

    def _header_clicked(self, col: int) -> None:
        key = {c: k for k, c in SORT_COLUMN.items()}.get(col)
        if key is not None:
            self.sort_by(key, not self._descending if key == self._key else None)
