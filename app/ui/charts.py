"""pyqtgraph charts: the selected step's distribution stage by stage, and the run's timeline.

Plot items are created once and updated in place (`setOpts` / `setData`), never rebuilt per token. Values are
checked before drawing: pyqtgraph blanks on NaN, so a non-finite value is shown as 0 and flagged.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Signal
from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QWidget

from app.core.sampling import Sample
from app.core.settings import SamplerSettings, StageOrder
from app.ui.token_view import visible

RAW = QColor(100, 149, 237)  # cornflower: what the model proposed
FINAL = QColor(255, 140, 0)  # orange: what the sampler drew from
DRAWN = QColor(220, 20, 60)  # crimson outline: the drawn token
CUT = QColor(150, 150, 150, 110)
MAX_LABEL = 7
BRUSH = {True: pg.mkBrush(RAW), False: pg.mkBrush(CUT)}  # made once: charts update many times a second
PEN = {True: pg.mkPen(DRAWN, width=2), False: pg.mkPen(None)}


def _label(text: str) -> str:
    t = visible(text)
    return t if len(t) <= MAX_LABEL else t[: MAX_LABEL - 1] + "…"


def _themed(plot: pg.PlotWidget) -> None:
    pal = plot.palette()
    plot.setBackground(pal.color(QPalette.ColorRole.Base))
    fg = pal.color(QPalette.ColorRole.Text)
    for name in ("left", "bottom", "right"):
        ax = plot.getPlotItem().getAxis(name)
        ax.setPen(fg)
        ax.setTextPen(fg)


def finite(a: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(a), a, 0.0)


class ThemedPlot(pg.PlotWidget):
    """A plot that follows the application palette, also when the system switches light/dark."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        _themed(self)
        self.setMenuEnabled(False)
        self.hideButtons()

    def changeEvent(self, e: QEvent) -> None:  # noqa: N802 - Qt override
        if e.type() == QEvent.Type.PaletteChange and self.getPlotItem() is not None:
            _themed(self)
        super().changeEvent(e)


class StepChart(ThemedPlot):
    """Top-N candidates of one step: raw and final probability side by side, cuts labelled, drawn marked."""

    def __init__(self, parent: QWidget | None = None, max_n: int = 32) -> None:
        super().__init__(parent)
        self.setMouseEnabled(x=False, y=False)
        pi = self.getPlotItem()
        pi.setLabel("left", "probability")
        pi.showGrid(y=True, alpha=0.2)
        pi.addLegend(offset=(-10, 5), labelTextColor=self.palette().color(QPalette.ColorRole.Text))
        self.raw = pg.BarGraphItem(x=[0], height=[0], width=0.38, brush=RAW, pen=None, name="model (raw)")
        self.final = pg.BarGraphItem(x=[0], height=[0], width=0.38, brush=FINAL, pen=None, name="sampled from")
        self.cumulative = pg.PlotDataItem(pen=pg.mkPen(QColor(120, 120, 120), width=1), symbol="o", symbolSize=4,
                                          name="cumulative p")
        for item in (self.raw, self.final, self.cumulative):
            self.addItem(item)
        self.top_p_line = pg.InfiniteLine(angle=0, pen=pg.mkPen(QColor(46, 139, 87), style=pg.QtCore.Qt.DashLine),
                                          label="top-p {value:.2f}", labelOpts={"position": 0.55})
        self.min_p_line = pg.InfiniteLine(angle=0, pen=pg.mkPen(QColor(138, 43, 226), style=pg.QtCore.Qt.DotLine),
                                          label="min-p cut {value:.3f}", labelOpts={"position": 0.35})
        self.addItem(self.top_p_line)
        self.addItem(self.min_p_line)
        self.cut_labels = [pg.TextItem(anchor=(0, 0.5), angle=90, color=QColor(128, 128, 128)) for _ in range(max_n)]
        for t in self.cut_labels:
            self.addItem(t)
        small = QFont(self.font())
        small.setPointSizeF(max(6.0, small.pointSizeF() * 0.85))
        pi.getAxis("bottom").setStyle(tickFont=small)
        self.title = pg.TextItem(anchor=(0, 0), color=self.palette().color(QPalette.ColorRole.Text))
        self.addItem(self.title)
        self.setYRange(0, 1.05, padding=0)
        self.shown: tuple[Sample, tuple[str, ...]] | None = None
        self._ticks: list = []

    def show_sample(self, s: Sample, texts: tuple[str, ...], settings: SamplerSettings, heading: str = "") -> None:
        n = min(len(texts), len(self.cut_labels))
        x = np.arange(n, dtype=float)
        raw = finite(np.exp(s.top_logits[:n].astype(np.float64) - s.raw_lse))
        final = finite(s.final_probs[:n].astype(np.float64))
        kept = s.kept[:, :n].all(axis=0) if s.kept.size else np.ones(n, bool)
        drawn = s.top_ids[:n] == s.token
        self.raw.setOpts(x=x - 0.2, height=raw, width=0.38, brushes=[BRUSH[bool(k)] for k in kept])
        self.final.setOpts(x=x + 0.2, height=final, width=0.38, brush=FINAL, pens=[PEN[bool(d)] for d in drawn])
        self.cumulative.setData(x, np.cumsum(self._as_filters_saw(s, settings, n)))
        self._thresholds(s, settings, raw)
        for i, label in enumerate(self.cut_labels):
            stage = s.cut_by(i) if i < n else None
            text = f"cut by {stage}" if stage else ""
            if label.toPlainText() != text:
                label.setText(text)
            if text:
                label.setPos(i - 0.2, min(raw[i] + 0.03, 0.6))
        ticks = [[(i, _label(texts[i])) for i in range(n)]]
        if ticks != self._ticks:
            self.getPlotItem().getAxis("bottom").setTicks(ticks)
            self._ticks = ticks
        self.setXRange(-0.7, n - 0.3, padding=0)
        self.title.setText(heading)
        self.title.setPos(-0.6, 1.04)
        self.shown = (s, texts)

    def _as_filters_saw(self, s: Sample, settings: SamplerSettings, n: int) -> np.ndarray:
        """The probabilities top-p looked at: after temperature when it runs first (over the recorded top-k)."""
        logits = s.top_logits.astype(np.float64)
        t = settings.temperature
        if settings.order == StageOrder.TEMPERATURE_FIRST and t not in (0, 1):
            z = logits / t
            p = np.exp(z - z.max())
            return finite(p / p.sum())[:n]
        return finite(np.exp(logits - s.raw_lse))[:n]

    def _thresholds(self, s: Sample, settings: SamplerSettings, raw: np.ndarray) -> None:
        self.top_p_line.setVisible(settings.top_p < 1)
        self.top_p_line.setValue(settings.top_p)
        self.min_p_line.setVisible(settings.min_p > 0)
        self.min_p_line.setValue(settings.min_p * (raw.max() if raw.size else 0))


class TimelineChart(ThemedPlot):
    """Chosen-token probability (left axis) and entropy (right axis) per step; click to select a step."""

    step_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        pi = self.getPlotItem()
        pi.setLabel("left", "p(drawn)", color=FINAL.name())
        pi.setLabel("bottom", "step")
        pi.showAxis("right")
        pi.setLabel("right", "entropy (nats)", color=RAW.name())
        pi.setYRange(0, 1.02, padding=0)
        pi.setMouseEnabled(x=True, y=False)
        self.prob = pg.PlotDataItem(pen=pg.mkPen(FINAL, width=1))
        self.addItem(self.prob)
        self.vb2 = pg.ViewBox()
        pi.scene().addItem(self.vb2)
        pi.getAxis("right").linkToView(self.vb2)
        self.vb2.setXLink(pi)
        self.entropy = pg.PlotDataItem(pen=pg.mkPen(RAW, width=1))
        self.vb2.addItem(self.entropy)
        pi.vb.sigResized.connect(self._sync_views)
        for item in (self.prob, self.entropy):
            item.setClipToView(True)
            item.setDownsampling(auto=True, method="peak")
        self.cursor = pg.InfiniteLine(angle=90, pen=pg.mkPen(DRAWN, width=1))
        self.addItem(self.cursor)
        self.scene().sigMouseClicked.connect(self._clicked)
        self.clear_run()

    def _sync_views(self) -> None:
        self.vb2.setGeometry(self.getPlotItem().vb.sceneBoundingRect())

    def clear_run(self) -> None:
        self._p = np.zeros(1024)
        self._h = np.zeros(1024)
        self.n = 0
        self.prob.setData([], [])
        self.entropy.setData([], [])
        self.cursor.setValue(0)

    def append(self, probs: list[float], entropies: list[float]) -> None:
        k = len(probs)
        if self.n + k > self._p.size:
            size = max(self._p.size * 2, self.n + k)
            self._p, self._h = np.resize(self._p, size), np.resize(self._h, size)
        self._p[self.n : self.n + k] = probs
        self._h[self.n : self.n + k] = entropies
        self.n += k

    def redraw(self) -> None:
        x = np.arange(self.n)
        symbol = "o" if self.n <= 60 else None  # a short run is a few dots, a long one a line
        for item in (self.prob, self.entropy):
            if item.opts["symbol"] != symbol:
                item.setSymbol(symbol)
                item.setSymbolSize(4)
        self.prob.setData(x, finite(self._p[: self.n]))
        h = finite(self._h[: self.n])
        self.entropy.setData(x, h)
        self.vb2.setYRange(0, max(1.0, float(h.max()) * 1.05 if self.n else 1.0), padding=0)
        self.getPlotItem().setXRange(0, max(self.n - 1, 10), padding=0.02)

    def set_cursor(self, step: int) -> None:
        self.cursor.setValue(step)

    def _clicked(self, ev: object) -> None:
        if not self.n:
            return
        pos = self.getPlotItem().vb.mapSceneToView(ev.scenePos())
        step = round(pos.x())
        if 0 <= step < self.n and not math.isnan(pos.x()):
            self.step_clicked.emit(step)
