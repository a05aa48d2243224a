"""The run timeline: p(drawn), entropy and varentropy over the run, the most uncertain steps marked; a thinking model's
spans as bands, each labelled with its mean entropy, varentropy and DeepConf confidence, and a budget's cut as a line
(the figures are the core's, `record.span_stats`, read from each step's record).

Drawn with the charts' shared pieces (app/ui/charts/shared.py); imported, with pyqtgraph, after the first paint
(app/ui/charts/chart_host.py).
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QWidget

from app.core.events import Step
from app.core.record.span_stats import SpanStats, confidence, span_means, varentropy
from app.core.record.trace import StepTrace
from app.core.session.branches import uncertain_steps
from app.ui.charts.shared import DRAWN, FINAL, RAW, THINK, UNCERTAIN, ThemedPlot, _faded, _show_tip, finite
from app.ui.formatting import DIVERGED, format_prob

MARK_PX = 15  # the uncertain-step marks' size
MARK_ROW = (1.1, 1.22)  # where they sit on the left view (p 0–1 below them), and its top
SPREAD_MS = 50  # while streaming the timeline redraws this long after the step chart (which does every 100 ms)


def _set_known(item: pg.PlotDataItem, x: np.ndarray, v: np.ndarray) -> None:
    """Draw `v` over `x` where it is known: nothing when no value is, gaps where some are not (NaN, which the
    curve then skips instead of drawing a 0)."""
    known = np.isfinite(v)
    if not known.any():
        item.setData([], [])
    elif known.all():
        item.setData(x, v, connect="all", skipFiniteCheck=True)
    else:
        item.setData(x, np.where(known | np.isnan(v), v, 0.0), connect="finite", skipFiniteCheck=False)


class TimelineChart(ThemedPlot):
    """Chosen-token probability (left axis, an area) and entropy (right axis, a line) per step, both or either
    (`chart_host.SERIES`); click to select a step. The most uncertain steps (`uncertain_steps`) carry a mark in a
    row above the curves: clicking one asks to fork there with the runner-up.
    Bound to the view-model through its host (`chart_host.TimelineHost.bind`)."""

    step_clicked = Signal(int)
    uncertain_clicked = Signal(int)  # step

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        pi = self.getPlotItem()
        pi.setLabel("left", "p(drawn)", color=FINAL.name())
        pi.setLabel("bottom", "step")
        pi.showAxis("right")
        pi.setLabel("right", "entropy (nats)", color=RAW.name())
        pi.setYRange(0, MARK_ROW[1], padding=0)
        pi.getAxis("left").setTicks([[(v / 5, f"{v / 5:g}") for v in range(6)]])  # 0–1: the marks' row unlabelled
        pi.setMouseEnabled(x=True, y=False)
        # a long run is drawn as one min-max pair per pixel column (pyqtgraph's default keeps ~5 samples per pixel:
        # a 10,000-step curve cost ~8 ms a repaint); the curves' values are made finite before they are set
        thin = {"autoDownsampleFactor": 1.0, "skipFiniteCheck": True}
        # p(drawn) is an area, entropy a line: the two read apart where they cross
        self.prob = pg.PlotDataItem(pen=pg.mkPen(FINAL, width=1), fillLevel=0, brush=_faded(FINAL, 45), **thin)
        self.addItem(self.prob)
        self.vb2 = pg.ViewBox()
        pi.scene().addItem(self.vb2)
        pi.getAxis("right").linkToView(self.vb2)
        self.vb2.setXLink(pi)
        self.entropy = pg.PlotDataItem(pen=pg.mkPen(RAW, width=1), **thin)
        self.vb2.addItem(self.entropy)
        # varentropy beside entropy, on its axis (nats²): dashed, in the same colour
        self.varentropy = pg.PlotDataItem(pen=pg.mkPen(RAW.darker(140), width=1, style=Qt.PenStyle.DashLine), **thin)
        self.vb2.addItem(self.varentropy)
        self.spans = SpanBands(self)
        pi.vb.sigResized.connect(self._sync_views)
        for item in (self.prob, self.entropy, self.varentropy):
            item.setClipToView(True)
            item.setDownsampling(auto=True, method="peak")
        self.cursor = pg.InfiniteLine(angle=90, pen=pg.mkPen(DRAWN, width=1))
        self.addItem(self.cursor)
        self.uncertain_above: float | None = None  # entropy (nats) that marks a step; None: the top 5 %
        # in a row of their own above the curves (the left view's 1.04–1.2), large: seen and hit at any height
        self.marks = pg.ScatterPlotItem(symbol="t1", size=MARK_PX, pen=pg.mkPen(UNCERTAIN.darker(150), width=1),
                                        brush=pg.mkBrush(UNCERTAIN), hoverable=True, hoverSize=MARK_PX + 4,
                                        tip=lambda x, y, data: f"step {x:.0f}: entropy {data:.2f} nats — click to "
                                        "continue with the runner-up token here")
        self.marks.sigClicked.connect(lambda _item, points, _ev: self.uncertain_clicked.emit(
            round(points[0].pos().x())))
        self.marks.setZValue(10)
        self.addItem(self.marks)
        self.diverged_line = pg.InfiniteLine(angle=90, pen=pg.mkPen(DIVERGED, width=1, style=Qt.PenStyle.DashLine),
                                             label="differs", labelOpts={"position": 0.92, "color": DIVERGED})
        self.addItem(self.diverged_line)
        # what a partial record (a server's) could not say, over the plot's top left corner (fixed on the screen),
        # wrapped at the plot's width
        self.note = pg.TextItem(anchor=(0, 0), color=QColor(110, 110, 110))
        small = QFont(self.font())
        small.setPointSizeF(max(6.0, small.pointSizeF() * 0.85))
        self.note.setFont(small)
        self.note.setParentItem(pi.vb)
        self.note.setPos(2, 0)
        self.note.setZValue(20)
        pi.vb.sigResized.connect(self._fit_note)
        self._series = "both"
        self._said: tuple[bool, bool, bool, str] | None = None  # what the labels and the note say now
        self.scene().sigMouseClicked.connect(self._clicked)
        self.scene().sigMouseMoved.connect(self._hover)
        self._due = 0  # the step the next deferred redraw puts the cursor on
        self._later = QTimer(self, singleShot=True, interval=SPREAD_MS)
        self._later.timeout.connect(self._draw_due)
        self.clear_run()

    def _sync_views(self) -> None:
        self.vb2.setGeometry(self.getPlotItem().vb.sceneBoundingRect())

    def _fit_note(self) -> None:
        self.note.setTextWidth(max(120.0, self.getPlotItem().vb.width() - 8))

    def show_series(self, which: str) -> None:
        """Draw both curves ("both"), or only "prob" or only "entropy", each with its own axis. The uncertain
        marks stay, in their row above the curves."""
        prob, entropy = which in ("both", "prob"), which in ("both", "entropy")
        pi = self.getPlotItem()
        self.prob.setVisible(prob)
        pi.showAxis("left", prob)
        self.entropy.setVisible(entropy)
        self.varentropy.setVisible(entropy)
        pi.showAxis("right", entropy)
        self._series = which
        self._say()

    def clear_run(self) -> None:
        self._later.stop()
        self._p = np.zeros(1024)
        self._h = np.zeros(1024)
        self._model = np.zeros(1024, dtype=bool)  # step i's p is under the model (its sampled p not observed)
        self._v, self._c = np.zeros(1024), np.zeros(1024)  # varentropy, DeepConf confidence (the core's, per step)
        self._k: list[int] = []  # the k of each step's confidence
        self._labels: list[str] = []  # each step's span ("think", "answer", "tool"; "": no reasoning markers)
        self.forced: list[int] = []  # steps a think budget forced
        self.n = 0
        self.prob.setData([], [])
        self.entropy.setData([], [])
        self.varentropy.setData([], [])
        self.spans.clear()
        self.cursor.setValue(0)
        self.cursor.setVisible(False)  # no run, no step to point at
        self.marks.setData([], [])
        self.vb2.setYRange(0, 1.0 * MARK_ROW[1], padding=0)  # a new run's entropy axis starts afresh
        self.diverged_line.setVisible(False)
        self.getPlotItem().setXRange(0, 10, padding=0.02)  # steps, not a unitless axis around 0
        self._say()

    def mark_divergence(self, step: int) -> None:
        self.diverged_line.setValue(step)
        self.diverged_line.setVisible(True)

    def set_uncertain_above(self, nats: float | None) -> None:
        self.uncertain_above = nats
        self.redraw()

    def append(self, probs: list[float], entropies: list[float], under_model: list[bool] | None = None) -> None:
        """Steps' p(drawn) and entropy (NaN: not recorded); `under_model`: which p is the model's probability of
        the drawn token, given where the probability it was drawn with was not observed (a server's record)."""
        k = len(probs)
        if self.n + k > self._p.size:
            size = max(self._p.size * 2, self.n + k)
            self._p, self._h, self._model, self._v, self._c = (
                np.resize(a, size) for a in (self._p, self._h, self._model, self._v, self._c))
        self._p[self.n : self.n + k] = probs
        self._h[self.n : self.n + k] = entropies
        self._model[self.n : self.n + k] = False if under_model is None else under_model
        self._v[self.n : self.n + k] = math.nan
        self._c[self.n : self.n + k] = math.nan
        self._k += [0] * k
        self._labels += [""] * k
        self.n += k

    def redraw(self) -> None:
        x = np.arange(self.n)
        symbol = "o" if self.n <= 60 else None  # a short run is a few dots, a long one a line
        for item in (self.prob, self.entropy):
            if item.opts["symbol"] != symbol:
                item.setSymbol(symbol)
                item.setSymbolSize(4)
        p, h = self._p[: self.n], self._h[: self.n]
        for item, v in ((self.prob, p), (self.entropy, h), (self.varentropy, self._v[: self.n])):
            _set_known(item, x, v)
        axis = np.maximum(finite(h), finite(self._v[: self.n]))  # (the right axis holds both)
        marked = uncertain_steps(h, above=self.uncertain_above)
        self.marks.setData(marked, [MARK_ROW[0]] * len(marked), data=h[marked] if marked else [])  # the entropy
        top = max(1.0, float(axis.max()) * 1.05 if self.n else 1.0)
        self.vb2.setYRange(0, top * MARK_ROW[1], padding=0)  # the curves under the marks' row, as p's are
        self.getPlotItem().setXRange(0, max(self.n - 1, 10), padding=0.02)
        self.spans.show(self.span_stats(), self.forced, 1.0)  # (labels hang below p = 1, under the marks' row)
        for vb in (self.getPlotItem().vb, self.vb2):  # the new range applied now: applied in the paint, it moves
            vb.prepareForPaint()  # the items again and asks for a second paint of the whole chart
        self._say()

    def _say(self) -> None:
        """Name what is drawn: p(drawn) under the model where a server's sampling was not observed, and an
        entropy that was not reported, on the left axis and in the note (set only when what they say changes)."""
        n = self.n
        model = bool(self._model[:n].any())
        all_model = model and bool(self._model[:n].all())
        no_entropy = n > 0 and bool(np.isnan(self._h[:n]).any())
        said = (model, all_model, no_entropy, self._series)
        if said == self._said:
            return
        self._said = said
        # short: the axis is as tall as the plot (~80 px in a 900 x 600 window)
        left = self.getPlotItem().getAxis("left")  # the axis's own: PlotItem.setLabel would show a hidden axis
        if (label := "p (model)" if all_model else "p(drawn)") != left.labelText:
            left.setLabel(label, color=FINAL.name())
        parts = []
        if model and self._series != "entropy":
            parts.append("p under the model (server's sampling unseen)" if all_model else
                         "p under the model where the server's sampling was unseen")
        if no_entropy and self._series != "prob":
            parts.append("no entropy" + (" for some steps" if np.isfinite(self._h[:n]).any() else ""))
        self.note.setText(" · ".join(parts))
        self.note.fill = pg.mkBrush(_faded(self.palette().color(QPalette.ColorRole.Base), 215))
        self.note.setVisible(bool(parts))

    def set_cursor(self, step: int) -> None:
        self.cursor.setValue(step)
        self.cursor.setVisible(self.n > 0)

    def append_steps(self, steps: list[Step]) -> None:
        """Each step's best known p(drawn) (`StepTrace.drawn_prob`: a server's record gives the model's) and its
        entropy; what was not reported is NaN: a gap, never a number."""
        traces = [s.trace for s in steps if s.trace is not None]
        known = [(t.drawn_prob, t.sample.entropy) for t in traces]
        nan = math.nan
        start = self.n
        self.append([nan if p is None else p for (p, _), _h in known],
                    [nan if h is None else h for _p, h in known],
                    [kind == "model" for (_, kind), _h in known])
        for i, t in enumerate(traces, start):  # the span and its figures, as the core reads them from the record
            conf, v = confidence(t.sample), varentropy(t.sample)
            self._c[i], self._k[i] = conf if conf is not None else (nan, 0)
            self._v[i] = nan if v is None else v
            self._labels[i] = t.span
            if t.forced == "budget":
                self.forced.append(t.step)

    def span_stats(self) -> list[SpanStats]:
        """Each span's means (`span_stats.span_means`) over the steps drawn."""
        n = self.n
        return span_means(self._labels, self._h[:n], self._v[:n], self._c[:n], self._k) if any(self._labels) else []

    def show_step(self, _i: int, trace: StepTrace, streaming: bool = False) -> None:
        """Redraw with the cursor on `trace`'s step; while a run streams, half a chart interval later, so that this
        chart and the step chart (each ~10 ms) repaint in different frames instead of stalling one."""
        self._due = trace.step
        if streaming:
            if not self._later.isActive():
                self._later.start()
        else:
            self._later.stop()
            self._draw_due()

    def _draw_due(self) -> None:
        self.redraw()
        self.set_cursor(self._due)

    def point_tip(self, step: int) -> str:
        """Step `step`'s numbers as recorded: the drawn token's probability and the model's entropy."""
        if not 0 <= step < self.n:
            return ""
        p, h = float(self._p[step]), float(self._h[step])
        name = "p(drawn) under the model" if self._model[step] else "p(drawn)"
        tip = f"step {step} · {name} {'not reported' if math.isnan(p) else format_prob(p)}"
        if self._model[step]:
            tip += " (the server's sampling not observed)"
        tip += " · entropy " + ("not reported" if math.isnan(h) else f"{h:.2f} nats")
        if math.isfinite(v := float(self._v[step])):
            tip += f" · varentropy {v:.2f}"
        if math.isfinite(c := float(self._c[step])):
            tip += f" · confidence {c:.2f} (k {self._k[step]})"
        if self._labels[step]:
            tip += f" · {self._labels[step]}" + (" (forced by the think budget)" if step in self.forced else "")
        return tip + " — click to select"


    def _hover(self, pos: object) -> None:
        x = self.getPlotItem().vb.mapSceneToView(pos).x()
        _show_tip(self, self.point_tip(round(x)) if math.isfinite(x) else "")

    def _clicked(self, ev: object) -> None:
        if not self.n:
            return
        pos = self.getPlotItem().vb.mapSceneToView(ev.scenePos())
        step = round(pos.x())
        if 0 <= step < self.n and not math.isnan(pos.x()):
            self.step_clicked.emit(step)


class SpanBands:
    """A thinking model's spans over the timeline: the think span as a band, each span labelled with its means (entropy
    H, varentropy V, DeepConf confidence C with its k), and a line where a think budget forced the span closed. Items
    made once per span and reused; a run has a few."""

    def __init__(self, chart: pg.PlotWidget) -> None:
        self.chart = chart
        self.bands: list[pg.LinearRegionItem] = []
        self.labels: list[pg.TextItem] = []
        self.cuts: list[pg.InfiniteLine] = []
        self.said: list[str] = []  # what each span's label says (what a test reads)

    def clear(self) -> None:
        for item in (*self.bands, *self.labels, *self.cuts):
            item.setVisible(False)
        self.said = []

    def show(self, stats: list[SpanStats], forced: list[int], y: float) -> None:
        self.clear()
        for i, sp in enumerate(stats):
            band, label = self._item(i)
            band.setRegion((sp.start - 0.5, sp.end - 0.5))
            band.setVisible(sp.kind == "think")
            label.setText(words(sp))
            late = bool(stats) and sp.start > 0.6 * stats[-1].end  # (a span near the end: its label ends there)
            label.setAnchor((1, 0) if late else (0, 0))
            label.setPos((sp.end if late else sp.start) - 0.5, y - 0.14 * (i % 2))  # (next spans' rows alternate)
            label.setVisible(True)
            self.said.append(label.toPlainText())
        for i, step in enumerate(forced):
            if i == len(self.cuts):
                line = pg.InfiniteLine(angle=90, pen=pg.mkPen(THINK, width=2), label="budget",
                                       labelOpts={"position": 0.1, "color": THINK})
                self.chart.addItem(line)
                self.cuts.append(line)
            self.cuts[i].setValue(step)
            self.cuts[i].setVisible(True)

    def _item(self, i: int) -> tuple[pg.LinearRegionItem, pg.TextItem]:
        if i == len(self.bands):
            band = pg.LinearRegionItem(movable=False, brush=pg.mkBrush(_faded(THINK, 38)), pen=pg.mkPen(None))
            band.setZValue(-10)
            label = pg.TextItem(anchor=(0, 0), color=THINK.darker(130))
            for item in (band, label):
                self.chart.addItem(item)
            self.bands.append(band)
            self.labels.append(label)
        return self.bands[i], self.labels[i]


def words(sp: SpanStats) -> str:
    """A span's label: its kind and means ("think · H 2.31 · V 1.20 · C 3.05 (k 20)"); a figure not recorded is left
    out."""
    parts = [sp.kind]
    for name, value in (("H", sp.entropy), ("V", sp.varentropy), ("C", sp.confidence)):
        if value is not None:
            parts.append(f"{name} {value:.2f}")
    return " · ".join(parts) + (f" (k {sp.k})" if sp.confidence is not None else "")
