"""Run ▸ Compare quantization…: a dock that teacher-forces one sequence through the window's model (A) and a variant
of it (B: another precision, MLX 4- or 8-bit quantize-on-load, or another model file such as a GGUF), and draws the
`QuantDiff` record: KL(A‖B) per token as bars, a mark over each position whose top-1 tokens differ, the text
shaded by KL, and the summary line.

The sequence is the shown run's (its prompt and output tokens) or, with no run, the prompt. The diff runs on the
model thread (a `diff` job), whose events land in this view's own queue, drained on a timer. Every number
drawn is the record's: the view maps KL to a bar height and a shade, and computes nothing else.
"""

from __future__ import annotations

import html
import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QComboBox,
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.core.decoding.quant_diff import Diffed, DiffProgress, DiffRequest, DiffSummary, QuantDiff
from app.core.events import Failed
from app.core.models.sources import ModelSpec
from app.core.record.export import SHADES
from app.ui.charts.shared import DRAWN, RAW, ThemedPlot, _show_tip, finite
from app.ui.formatting import format_logprob, shown_piece, visible
from app.ui.run_view.surprisal_view import surprise_color
from app.ui.run_view.token_spans import Legend, TokenSpans
from app.ui.viewmodel.model_job import ModelJob

if TYPE_CHECKING:
    from app.ui.viewmodel.playground import Playground

EMPTY_POSITIONS = 20  # the chart's x range before a diff
KL_FLOOR, KL_DECADES = 1e-6, 6  # the shading runs from KL <= 1e-6 nats (clear) to >= 1 nat (full colour), log-spaced
DTYPES = {"as A": None, "float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}
QUANTIZE = {"none": None, "8-bit (MLX)": 8, "4-bit (MLX)": 4}
AGREE, DISAGREE = pg.mkBrush(RAW), pg.mkBrush(DRAWN)


def kl_level(kl: float) -> float:
    """0 at KL <= `KL_FLOOR` .. 1 at KL >= 1 nat, linear in log KL (an infinite KL: 1)."""
    if not kl > KL_FLOOR:
        return 0.0
    return min(math.log10(kl / KL_FLOOR) / KL_DECADES, 1.0)


def kl_shade(kl: float) -> int:
    """The shade (0 .. SHADES - 1) a token whose position has this KL is drawn with."""
    return round(kl_level(kl) * (SHADES - 1))


def summary_line(s: DiffSummary) -> str:
    """The summary as one line: mean and max KL, top-1 agreement, each variant's perplexity."""
    agree = round(s.agreement * s.tokens)
    return (f"{s.tokens} tokens · mean KL(A‖B) {s.mean_kl:.3g} nats · max {s.max_kl:.3g} · top-1 agreement "
            f"{s.agreement:.1%} ({agree}/{s.tokens}) · perplexity A {s.perplexity_a:.4g}, B {s.perplexity_b:.4g}")


def position_tip(d: QuantDiff, t: int) -> str:
    """Row t of the record (the token at position t + 1): its KL, both log-probabilities and both top-1 tokens."""
    r = d.row(t)
    same = "agree" if r.agree else "<b>differ</b>"
    return (f"position {r.position} <code>{html.escape(visible(r.text))}</code> · id {r.token_id}<br>"
            f"KL(A‖B) <b>{r.kl:.3g}</b> nats<br>log p A {format_logprob(r.logprob_a)} · B {format_logprob(r.logprob_b)}"
            f"<br>top-1 {same}: A <code>{html.escape(visible(r.top_a_text))}</code>, "
            f"B <code>{html.escape(visible(r.top_b_text))}</code>")


class KlChart(ThemedPlot):
    """KL(A‖B) per position as bars (crimson where the top-1 tokens differ), with an × above each such position."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.diff: QuantDiff | None = None
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush=AGREE, pen=pg.mkPen(None))
        self.marks = pg.ScatterPlotItem(symbol="x", size=9, pen=pg.mkPen(DRAWN, width=2), brush=None)
        self.addItem(self.bars)
        self.addItem(self.marks)
        plot = self.getPlotItem()
        plot.setLabel("left", "KL(A‖B), nats")
        plot.setLabel("bottom", "position")
        plot.showGrid(y=True, alpha=0.2)
        plot.setXRange(0.5, EMPTY_POSITIONS + 0.5, padding=0)  # whole positions on the axis before a diff
        self.setMouseTracking(True)
        self.scene().sigMouseMoved.connect(self._hover)

    def show_diff(self, d: QuantDiff) -> None:
        """Bars at positions 1 .. T-1 reaching each recorded KL (an infinite one drawn at 0 and named in its tip)."""
        self.diff = d
        x = np.arange(1, len(d.kl) + 1, dtype=float)
        heights = finite(d.kl)
        self.bars.setOpts(x=x, height=heights, brushes=[AGREE if a else DISAGREE for a in d.agree])
        top = float(heights.max()) if len(heights) else 0.0
        self.marks.setData(x=x[~d.agree], y=np.full(int((~d.agree).sum()), top * 1.08 if top > 0 else 1.0))
        self.getPlotItem().setXRange(0.4, len(d.kl) + 0.6, padding=0)
        self.getPlotItem().enableAutoRange(axis="y")

    def clear_diff(self) -> None:
        self.diff = None
        self.bars.setOpts(x=[], height=[], brushes=None)
        self.marks.setData(x=[], y=[])
        self.getPlotItem().setXRange(0.5, EMPTY_POSITIONS + 0.5, padding=0)

    def bar_tip(self, position: int) -> str:
        d = self.diff
        return position_tip(d, position - 1) if d is not None and 1 <= position <= len(d.kl) else ""

    def _hover(self, pos: QPointF) -> None:
        x = self.getPlotItem().vb.mapSceneToView(pos).x()
        _show_tip(self, self.bar_tip(round(x)))


class KlText(TokenSpans):
    """The sequence, each token shaded by the KL at the position that predicts it (log scale), underlined where
    the two variants' top-1 tokens differ; the first token (nothing predicts it) grey."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.diff: QuantDiff | None = None
        self._formats = {(level, agree): self._format(level, agree) for level in range(SHADES)
                         for agree in (True, False)}
        self._first = QTextCharFormat()
        self._first.setForeground(QColor(128, 128, 128))

    @staticmethod
    def _format(level: int, agree: bool) -> QTextCharFormat:
        f = QTextCharFormat()
        f.setBackground(surprise_color(level / (SHADES - 1)))
        if not agree:
            f.setUnderlineStyle(QTextCharFormat.UnderlineStyle.WaveUnderline)
            f.setUnderlineColor(DRAWN)
        return f

    def show_diff(self, d: QuantDiff) -> None:
        self.clear_spans()
        self.diff = d
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        self.insert_span(cursor, shown_piece(d.pieces[0]), self._first)
        for t, (kl, agree) in enumerate(zip(d.kl.tolist(), d.agree.tolist(), strict=True)):
            self.insert_span(cursor, shown_piece(d.pieces[t + 1]), self._formats[(kl_shade(kl), agree)])
        cursor.endEditBlock()

    def clear_diff(self) -> None:
        self.clear_spans()
        self.diff = None

    def span_tooltip(self, i: int) -> str:
        if self.diff is None or i == 0:
            return "the first token: nothing predicts it" if self.diff is not None else ""
        return position_tip(self.diff, i - 1)


class VariantControls(QWidget):
    """Variant B: a model (empty: A's), a precision and a quantize-on-load; Run and Stop."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = QLineEdit(placeholderText="A's model")
        self.model.setToolTip("B's model: a folder, a .gguf file or a hub id; empty: the same model as A")
        self.browse = QPushButton("…", toolTip="Choose B's model file (a .gguf) or a model folder's config.json")
        self.browse.setFixedWidth(32)
        self.browse.clicked.connect(self._browse)
        self.dtype, self.quantize = QComboBox(), QComboBox()
        self.dtype.addItems(list(DTYPES))
        self.dtype.setToolTip("B's precision (torch: float32 / float16 / bfloat16)")
        self.quantize.addItems(list(QUANTIZE))
        self.quantize.setToolTip("Quantize B's weights on load (MLX only: B then runs on MLX)")
        self.run, self.stop = QPushButton("Run"), QPushButton("Stop", enabled=False)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("B:"))
        row.addWidget(self.model, 1)
        row.addWidget(self.browse)
        for text, w in (("precision", self.dtype), ("quantize", self.quantize)):
            row.addWidget(QLabel(text))
            row.addWidget(w)
        row.addWidget(self.run)
        row.addWidget(self.stop)

    def spec_b(self, a: ModelSpec) -> ModelSpec:
        """B: A's spec with this model, precision and quantization (MLX when quantized on load, which only it does)."""
        bits = QUANTIZE[self.quantize.currentText()]
        dtype = DTYPES[self.dtype.currentText()] or a.options.dtype
        return ModelSpec(self.model.text().strip() or a.source, "mlx" if bits else a.backend,
                         replace(a.options, dtype=dtype, quantize_bits=bits), offline=a.offline)

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "B's model", "", "Models (*.gguf config.json);;All files (*)")
        if path:
            self.model.setText(path.removesuffix("config.json").rstrip("/") if path.endswith("config.json") else path)


class QuantView(QDockWidget):
    finished = Signal(object)  # the QuantDiff drawn (None: cancelled)

    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__("Compare quantization", parent)
        self.setObjectName("quant_diff")
        self.playground = playground
        self.controls = VariantControls()
        self.chart, self.text = KlChart(), KlText()
        self.text.setPlaceholderText("Each token, shaded by how far B's prediction of it is from A's (KL).")
        self.status = QLabel("Choose B and press Run: the shown run's tokens (or the prompt) go through A, the "
                             "window's model, and through B.")
        self.status.setWordWrap(True)
        self.summary = QLabel(wordWrap=True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._build()
        self.job = ModelJob(playground, self)  # the diff on the model thread: its queue, drained on a timer
        self.diff: QuantDiff | None = None
        self.job.event.connect(self._on_event)
        self.job.running_changed.connect(self._show_running)
        self.controls.run.clicked.connect(self.run)
        self.controls.stop.clicked.connect(self.stop)

    def _build(self) -> None:
        tip = f"Background: KL(A‖B) at the position predicting the token, log scale from {KL_FLOOR:g} to 1 nat; " \
              "wavy underline: the two variants' top-1 tokens differ there"
        head = QHBoxLayout()
        head.addWidget(self.summary, 1)
        head.addWidget(QLabel(f"KL ≤ {KL_FLOOR:g}"))
        head.addWidget(Legend(surprise_color, tip, width=96))
        head.addWidget(QLabel("≥ 1 nat"))
        lower = QWidget()
        col = QVBoxLayout(lower)
        col.setContentsMargins(0, 0, 0, 0)
        col.addLayout(head)
        col.addWidget(self.text, 1)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.chart)
        split.addWidget(lower)
        split.setSizes([300, 260])
        body = QWidget()
        box = QVBoxLayout(body)
        box.addWidget(self.controls)
        box.addWidget(self.status)
        box.addWidget(split, 1)
        self.setWidget(body)

    @property
    def running(self) -> bool:
        return self.job.running

    def make_request(self) -> DiffRequest:
        """A is the shown run's model on its tokens (prompt and output), else the window's model on the prompt."""
        e = self.playground.editing
        run = e.run
        trace = run.trace if run is not None else None
        if trace is not None:
            a = run.request.model
            return DiffRequest(model=a, model_b=self.controls.spec_b(a),
                               prompt_ids=(*trace.prompt_ids, *trace.token_ids))
        return DiffRequest(model=e.model, model_b=self.controls.spec_b(e.model), prompt=e.prompt.text)

    def run(self) -> bool:
        """Start the diff; False (and why, in the status) if it cannot start now."""
        if self.running or self.playground.busy:
            self.status.setText("A run is in progress: wait for it, or stop it, then compare.")
            return False
        request = self.make_request()
        self.diff = None
        self.summary.setText("")
        self.chart.clear_diff()
        self.text.clear_diff()
        self.job.start("diff", request)
        source = "the shown run's" if request.prompt_ids is not None else "the prompt's"
        self.status.setText(f"Comparing on {source} tokens…")
        return True

    def stop(self) -> None:
        self.job.stop()

    def _show_running(self, running: bool) -> None:
        self.controls.run.setEnabled(not running)
        self.controls.stop.setEnabled(running)

    def drain(self) -> None:
        """Take every waiting event now (the job's timer does it every few milliseconds)."""
        self.job.drain()

    def _on_event(self, ev: object) -> None:
        if isinstance(ev, DiffProgress):
            self.status.setText(ev.message)
        elif isinstance(ev, Diffed):
            self.job.done()
            if ev.diff is not None:
                self.show_diff(ev.diff)
            else:
                self.status.setText("Stopped: nothing compared.")
            self.finished.emit(ev.diff)
        elif isinstance(ev, Failed):
            self.status.setText(ev.message)
            self.job.done()

    def show_diff(self, d: QuantDiff) -> None:
        """Draw a record: chart, shaded text, summary."""
        self.diff = d
        self.chart.show_diff(d)
        self.text.show_diff(d)
        self.summary.setText(summary_line(d.summary()))
        where = "beside A" if d.beside else "after A was freed (both would not fit)"
        self.status.setText(f"A: {d.label_a}  ·  B: {d.label_b}, loaded {where}")
