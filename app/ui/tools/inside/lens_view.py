"""Run ▸ Logit lens…: a dock that draws the logit lens at the step the window shows. With the step's live lens recorded
(the run decoded with "Live lens in new runs" on) it draws at once: each layer's share among the step's top
candidates. "Full lens" asks the model thread for the full one (`lens` job: the step's position recomputed from the
run's tokens) and draws the `LensGrid`: a layers × top tokens grid shaded by probability, the drawn token's cells
marked, and the drawn token's probability across layers as a line, where it first leads marked. Labelled as the
approximation it is. Every number drawn is the record's; the view maps them to shades and positions only.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QCheckBox,
    QHeaderView,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from app.core.decoding.inside import APPROXIMATION, LIVE_K, LensGrid
from app.ui.charts.shared import DRAWN, RAW, ThemedPlot
from app.ui.formatting import format_prob, visible
from app.ui.tools.inside.look_dock import LookDock

if TYPE_CHECKING:
    from app.core.record.live_lens import LiveLens
    from app.core.record.trace import StepTrace
    from app.ui.viewmodel.playground import Playground

FLOOR = 1e-9  # the line's log axis starts here (a probability below it is drawn on it)
LIVE_TIP = ("Record each step's live lens in the runs started from now on: every layer's logits for the step's top "
            f"{LIVE_K} candidates, read from the forward that made the step (about a tenth more time a step)")


def heat(p: float) -> QColor:
    """A cell's shade for probability (or share) p: clear at 0, full cornflower at 1 (square root: small ones show)."""
    c = QColor(RAW)
    c.setAlpha(round(235 * float(np.sqrt(min(max(p, 0.0), 1.0)))))
    return c


def percent(p: float) -> str:
    """A full lens cell's probability, short enough for a narrow column: 22%, 4.5%, 0.3%, <0.1% (the tooltip has it
    in full)."""
    x = 100 * p
    return "0%" if p == 0 else f"{x:.0f}%" if x >= 9.95 else f"{x:.1f}%" if x >= 0.095 else "<0.1%"


class LensTable(QTableWidget):
    """Rows: the embeddings, then each layer. Full lens: a column per rank, each cell a token over its probability
    (two lines, the token elided where the column is narrow). Live lens: a column per candidate of the step, each cell
    its share among them."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QTableWidget.SelectionMode.NoSelection)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.verticalHeader().setMinimumSectionSize(16)
        self.setWordWrap(False)

    def show_grid(self, g: LensGrid) -> None:
        k = g.top_ids.shape[1]
        self._shape(g.layer_names, [f"#{i + 1}" for i in range(k)], lines=2)
        for r, name in enumerate(g.layer_names):
            for c in range(k):
                text, p, t = g.top_texts[r][c], float(g.top_probs[r, c]), int(g.top_ids[r, c])
                self._cell(r, c, f"{visible(text)[:12]}\n{percent(p)}", p, t == g.token_id,
                           f"layer {name}: <code>{html.escape(visible(text))}</code> p = {format_prob(p)} (rank {c})")

    def show_live(self, lens: LiveLens, texts: list[str], drawn: int) -> None:
        names = ["embeddings", *(str(i) for i in range(1, lens.layers))]
        self._shape(names, [visible(t) for t in texts])
        shares = lens.shares()
        for r, name in enumerate(names):
            for c, t in enumerate(lens.ids.tolist()):
                s = float(shares[r, c])
                self._cell(r, c, f"{s:.2f}", s, t == drawn, f"layer {name}: <code>{html.escape(visible(texts[c]))}"
                           f"</code> share {format_prob(s)} among these {len(texts)}, logit {lens.logits[r, c]:.3g}")

    def _shape(self, rows: list[str] | tuple[str, ...], cols: list[str], lines: int = 1) -> None:
        """Rows and columns named, emptied; a row at least `lines` lines high (many layers: the table scrolls)."""
        self.clear()
        self.verticalHeader().setMinimumSectionSize(max(16, lines * self.fontMetrics().lineSpacing() + 6))
        self.setRowCount(len(rows))
        self.setColumnCount(len(cols))
        self.setVerticalHeaderLabels(list(rows))
        self.setHorizontalHeaderLabels(cols)

    def _cell(self, r: int, c: int, text: str, p: float, drawn: bool, tip: str) -> None:
        item = QTableWidgetItem(text)
        item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
        item.setBackground(QBrush(heat(p)))
        item.setToolTip(tip)
        if drawn:
            f = QFont(item.font())
            f.setBold(True)
            item.setFont(f)
            item.setForeground(QBrush(DRAWN))
        self.setItem(r, c, item)


class LensCurve(ThemedPlot):
    """The drawn token's probability across layers (log axis), a mark where it first leads."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        plot = self.getPlotItem()
        self.line = plot.plot([], [], pen=pg.mkPen(DRAWN, width=2), symbol="o", symbolSize=6,
                              symbolBrush=pg.mkBrush(DRAWN), symbolPen=None)
        self.lead = pg.InfiniteLine(angle=90, pen=pg.mkPen(QColor(RAW), style=Qt.PenStyle.DashLine))
        self.lead.hide()
        plot.addItem(self.lead)
        plot.setLogMode(y=True)
        plot.showGrid(x=True, y=True, alpha=0.2)
        plot.setLabel("bottom", "layer")
        plot.setLabel("left", "p(drawn)")
        plot.getAxis("left").enableAutoSIPrefix(False)  # (a log axis read as 10^2 × 0.001 otherwise)
        self.clear_values()

    def show_values(self, names: tuple[str, ...] | list[str], values: np.ndarray, lead: int | None,
                    label: str) -> None:
        x = np.arange(len(values), dtype=float)
        y = np.clip(np.where(np.isfinite(values), values, FLOOR), FLOOR, 1.0)
        self.line.setData(x, y)
        axis = self.getPlotItem().getAxis("bottom")
        every = max(1, len(names) // 12)
        axis.setTicks([[(i, "emb" if i == 0 else n) for i, n in enumerate(names) if i % every == 0]])
        self.getPlotItem().setLabel("left", label)
        self.lead.setVisible(lead is not None)
        if lead is not None:
            self.lead.setValue(lead)
        self.getPlotItem().enableAutoRange()

    def clear_values(self) -> None:
        """Nothing drawn: an empty axis from 10⁻⁶ to 1 (the log axis' range is in decades)."""
        self.line.setData([], [])
        self.lead.hide()
        plot = self.getPlotItem()
        plot.getAxis("bottom").setTicks(None)
        plot.setXRange(0, 6, padding=0)
        plot.setYRange(-6, 0, padding=0)


class LensView(LookDock):
    """The full lens (`draw`), else the step's live lens; `shown` says which: a LensGrid, a LiveLens, or None."""

    KIND, HEADING, READING = "lens", "Logit lens", "Reading each layer at this step…"

    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__(playground, QPushButton("Full lens", toolTip="Recompute this step's position from the run's "
                         "tokens and read every layer through the model's final norm and head: its top tokens over "
                         "the whole vocabulary"), parent)
        self.setObjectName("logit_lens")
        self.full = self.ask
        self.live = QCheckBox("Live lens in new runs", toolTip=LIVE_TIP, checked=playground.live_lens > 0)
        self.note.setText(f"Approximation: {APPROXIMATION.removeprefix('an approximation: ')}.")
        self.table, self.curve = LensTable(), LensCurve()
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.table)
        split.addWidget(self.curve)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 1)
        split.setSizes([680, 320])
        self.live.toggled.connect(lambda on: setattr(playground, "live_lens", LIVE_K if on else 0))
        self._finish((self.live,), (self.note, self.status), split)

    def draw_unlooked(self, trace: StepTrace) -> None:
        """No full lens made at this step: its live lens if recorded, else nothing yet."""
        if trace.sample.lens is not None:
            self.show_live(trace)
        else:
            self._clear("No live lens was recorded for this step: press Full lens (or turn on the live lens for new "
                        "runs).")

    def draw(self, g: LensGrid) -> None:
        """The full lens."""
        self.table.show_grid(g)
        token = html.escape(visible(g.token_text))
        self.curve.show_values(g.layer_names, g.token_probs, g.appears, "p(drawn)")
        lead = ("never leads" if g.appears is None else
                f"first leads at layer {g.layer_names[g.appears]}")
        self.status.setText(f"Full lens at position {g.position}: top {g.top_ids.shape[1]} tokens per layer over the "
                            f"whole vocabulary; <code>{token}</code> {lead}.")
        self.shown.emit(g)

    def show_live(self, trace: StepTrace) -> None:
        lens = trace.sample.lens
        assert lens is not None
        texts = [self._text(int(t), trace) for t in lens.ids]
        self.table.show_live(lens, texts, trace.token_id)
        ids = lens.ids.tolist()
        shares = lens.shares()
        if trace.token_id in ids:
            j = ids.index(trace.token_id)
            lead = np.flatnonzero(lens.leaders() == j)
            self.curve.show_values([str(i) for i in range(lens.layers)], shares[:, j],
                                   int(lead[0]) if lead.size else None, "share of the drawn, live")
        else:
            self.curve.clear_values()
        outside = "" if trace.token_id in ids else " The drawn token is not among them: no line."
        self.status.setText(f"Live lens: each layer's share among the step's top {len(ids)} candidates only (recorded "
                            "while it decoded). Full lens: every layer's top tokens over the whole vocabulary."
                            + outside)
        self.shown.emit(lens)

    def _text(self, token: int, trace: StepTrace) -> str:
        """A candidate's display text: the step's record's, else the tokenizer's."""
        ids = trace.sample.top_ids[: len(trace.top_texts)].tolist()
        if token in ids:
            return trace.top_texts[ids.index(token)]
        tok = self.playground.tokenizer
        return tok.token_text(token) if tok is not None else f"#{token}"

    def blank(self) -> None:
        self.table.setRowCount(0)
        self.table.setColumnCount(0)
        self.curve.clear_values()
