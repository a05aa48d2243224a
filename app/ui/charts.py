"""pyqtgraph charts: the selected step's distribution stage by stage, and the run's timeline.

Plot items are created once and updated in place (`setOpts` / `setData`), never rebuilt per token. Values are
checked before drawing: pyqtgraph blanks on NaN, so a non-finite value is shown as 0 and flagged. The window
holds these charts through app/ui/chart_host.py, which imports this module (and pyqtgraph) after the first paint.
"""

from __future__ import annotations

import html
import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QCursor, QFont, QPalette
from PySide6.QtWidgets import QToolTip, QWidget

from app.core.branches import uncertain_steps
from app.core.events import Step
from app.core.trace import Sample, StepTrace
from app.ui.formatting import DIVERGED, EMPTY, format_prob, visible

pg.setConfigOptions(antialias=False, useNumba=False)  # where pyqtgraph is first imported

RAW = QColor(100, 149, 237)  # cornflower: what the model proposed
FINAL = QColor(255, 140, 0)  # orange: what the sampler drew from
DRAWN = QColor(220, 20, 60)  # crimson outline: the drawn token
UNCERTAIN = QColor(148, 103, 189, 200)  # purple: a step among the most uncertain
CUT = QColor(150, 150, 150, 110)
MAX_LABEL = 7
CHAR_PX = 7  # about one character of the tick font: labels are cut to what fits under a bar
BRUSH = {True: pg.mkBrush(RAW), False: pg.mkBrush(CUT)}  # made once: charts update many times a second
PEN = {True: pg.mkPen(DRAWN, width=2), False: pg.mkPen(None)}
GRID = (0.2, 0.4, 0.6, 0.8, 1.0)  # the step chart's probability grid
SPREAD_MS = 50  # while streaming the timeline redraws this long after the step chart (which does every 100 ms)


def _label(text: str, limit: int = MAX_LABEL) -> str:
    t = visible(text)
    return t if len(t) <= limit else t[: max(1, limit - 1)] + "…"


def _p(probs: np.ndarray | None, i: int) -> str:
    v = float(probs[i]) if probs is not None else math.nan
    return "?" if math.isnan(v) else format_prob(v)


def _why(s: Sample, stage: str) -> str:
    """Why `stage` cut a candidate, in the stage's own terms, with the threshold the record holds."""
    i = s.stage_index(stage)
    t = float(s.thresholds[i]) if i is not None else math.nan
    return {"greedy": "greedy (temperature 0) keeps only the most probable candidate",
            "top_k": f"its probability is below the k-th candidate's ({t:.3g})",
            "top_p": f"the candidates before it already hold top-p's {t:.2f} of the probability",
            "min_p": f"its probability is below min-p's line ({t:.3g}: min-p × the top probability)",
            }.get(stage, "")


def _show_tip(widget: QWidget, tip: str) -> None:
    """A tooltip that follows the pointer from item to item within one widget (Qt shows a widget's tooltip
    only after the pointer rests, and keeps the old text while it moves)."""
    if tip != widget.toolTip():
        widget.setToolTip(tip)
        if QToolTip.isVisible():
            QToolTip.showText(QCursor.pos(), tip, widget)


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


class StageLine:
    """A stage that cuts at a probability (top-k, min-p): its threshold line and, under it, the probabilities the
    stage received (a short dash per candidate), so the line is read against the values it cut."""

    def __init__(self, chart: StepChart, label: str, color: QColor, style: Qt.PenStyle) -> None:
        self.label = label
        self.marks = pg.PlotDataItem(pen=pg.mkPen(color, width=2))
        self.line = pg.InfiniteLine(angle=0, pen=pg.mkPen(color, style=style))
        chart.addItem(self.marks)
        chart.addItem(self.line)

    def legend(self) -> str:
        """Its legend entry, which also gives the line's value (a label on the line would sit on the bars)."""
        v = self.line.value()
        return f"{self.label}'s input · cut at " + (f"{v:.3f}" if v >= 0.001 else f"{v:.1e}")

    def show(self, probs_in: np.ndarray | None, threshold: float) -> bool:
        """Draw the stage's input (N,) and its line; hide both when the stage did not run. True if shown."""
        shown = probs_in is not None and math.isfinite(threshold) and threshold > 0  # a line at 0 cuts nothing
        if shown:
            x = np.repeat(np.arange(len(probs_in), dtype=float), 2) + np.tile([-0.42, 0.42], len(probs_in))
            self.marks.setData(x, np.repeat(finite(probs_in.astype(np.float64)), 2), connect="pairs")
            self.line.setValue(threshold)
        self.marks.setVisible(shown)
        self.line.setVisible(shown)
        return shown


# Stages whose threshold is a probability, drawn over their own input: label, colour, line style.
STAGE_LINES = {"top_k": ("top-k", QColor(0, 139, 139), Qt.PenStyle.DashDotLine),
               "min_p": ("min-p", QColor(138, 43, 226), Qt.PenStyle.DotLine)}
TOP_P = QColor(46, 139, 87)  # green: top-p's line and running mass


def _faded(c: QColor, alpha: int = 110) -> QColor:
    c = QColor(c)
    c.setAlpha(alpha)
    return c


# A cut candidate's model bar takes the colour of the stage that cut it, faded; the legend names each once.
CUT_BY = {"greedy": CUT, "top_k": _faded(STAGE_LINES["top_k"][1]), "top_p": _faded(TOP_P),
          "min_p": _faded(STAGE_LINES["min_p"][1])}
CUT_BRUSH = {name: pg.mkBrush(c) for name, c in CUT_BY.items()}


class StepChart(ThemedPlot):
    """Top-N candidates of one step, drawn from its record and nothing else: the raw and the final probabilities
    side by side, what each stage cut (in its colour), the drawn token outlined, top-p's running mass and line, and
    the top-k / min-p lines over the probabilities those stages received. A partial record (a server's) shows
    only the probabilities it reported."""

    shown: tuple[Sample, tuple[str, ...]] | None = None  # the record drawn and its candidates' texts

    def __init__(self, parent: QWidget | None = None, max_n: int = 32) -> None:
        super().__init__(parent)
        self.setMouseEnabled(x=False, y=False)
        pi = self.getPlotItem()
        pi.setLabel("left", "probability")
        # plain lines: the axis's own grid spans the view as part of the axis and cost ~15 ms of every repaint
        self.grid = [pg.InfiniteLine(pos=y, angle=0) for y in GRID]
        for line in self.grid:
            line.setZValue(-10)
            self.addItem(line)
        small = QFont(self.font())
        small.setPointSizeF(max(6.0, small.pointSizeF() * 0.85))
        self.legend = pi.addLegend(labelTextSize=f"{small.pointSizeF():.1f}pt")
        # bottom right, above the tail's bars and stage marks: top-p's running mass and line run along the top,
        # the large bars stand at the left
        self.legend.anchor(itemPos=(1, 1), parentPos=(1, 0.86), offset=(-10, 0))
        self.cut_samples = {name: pg.BarGraphItem(x=[], height=[], width=0.5, brush=CUT_BRUSH[name], pen=None)
                            for name in CUT_BRUSH}  # legend entries only: "cut by top-k" and so on
        self._theme_legend()
        self.raw = pg.BarGraphItem(x=[0], height=[0], width=0.38, brush=RAW, pen=None)
        self.final = pg.BarGraphItem(x=[0], height=[0], width=0.38, brush=FINAL, pen=None)
        self.cumulative = pg.PlotDataItem(pen=pg.mkPen(QColor(120, 120, 120), width=1), symbol="o", symbolSize=4)
        for item in (self.raw, self.final, self.cumulative):
            self.addItem(item)
        self.top_p_line = pg.InfiniteLine(angle=0, pen=pg.mkPen(TOP_P, style=Qt.PenStyle.DashLine),
                                          label="top-p {value:.2f}", labelOpts={"position": 0.55, "color": TOP_P})
        self.addItem(self.top_p_line)
        self.stage_lines = {name: StageLine(self, *opts) for name, opts in STAGE_LINES.items()}
        self.max_n = max_n
        pi.getAxis("bottom").setStyle(tickFont=small)
        self.title = pg.TextItem(anchor=(0, 0), color=self.palette().color(QPalette.ColorRole.Text))
        self.note = pg.TextItem(anchor=(0, 0), color=QColor(128, 128, 128))
        self.addItem(self.title)
        self.addItem(self.note)
        self.setYRange(0, 1.05, padding=0)
        self.hint = ""  # said under a bar's tooltip, and alone elsewhere (the step panel's: click to fork)
        self.scene().sigMouseMoved.connect(self._hover)
        self._ticks: list = []
        self._legend: list[tuple[object, str]] = []
        self.clear_step(EMPTY)  # an empty state, not an empty axis with a stray line

    def changeEvent(self, e: QEvent) -> None:  # noqa: N802 - Qt override
        super().changeEvent(e)
        if e.type() == QEvent.Type.PaletteChange and hasattr(self, "legend"):
            self._theme_legend()

    def _theme_legend(self) -> None:
        grid = self.palette().color(QPalette.ColorRole.Text)
        grid.setAlpha(51)
        for line in self.grid:
            line.setPen(pg.mkPen(grid))
        base = self.palette().color(QPalette.ColorRole.Base)
        base.setAlpha(215)  # over the bars and the curve, and still readable
        self.legend.setBrush(pg.mkBrush(base))
        self.legend.setLabelTextColor(self.palette().color(QPalette.ColorRole.Text))

    def show_sample(self, s: Sample, texts: tuple[str, ...], heading: str = "") -> None:
        n = min(len(texts), self.max_n, s.top_n)
        x = np.arange(n, dtype=float)
        pens = [PEN[bool(d)] for d in s.top_ids[:n] == s.token]
        self._set_legend(self._show_reported(s, x, pens) if s.is_partial else self._show_stages(s, x, pens))
        self._set_ticks(texts[:n])
        self.setXRange(-0.7, n - 0.3, padding=0)
        self.title.setText(heading)
        self.title.setPos(-0.6, 1.04)
        self.shown = (s, texts)

    def clear_step(self, note: str = "") -> None:
        """Nothing drawn (a new run before its first token), with an optional note."""
        for bars in (self.raw, self.final):
            bars.setOpts(x=[], height=[])
        self._hide_stages(note)
        self._set_legend([])
        self.getPlotItem().getAxis("bottom").setTicks([[]])
        self._ticks = [[]]
        self.title.setText("")
        self.shown = None

    def _hide_stages(self, note: str) -> None:
        """No running mass, no lines; `note` in their place."""
        self.cumulative.setData([], [])
        self.top_p_line.setVisible(False)
        for stage in self.stage_lines.values():
            stage.show(None, math.nan)
        self.note.setText(note)
        self._fit_note()
        self.note.setPos(-0.6, 0.97)
        if self.shown is None:
            self.setXRange(-0.7, 19.7, padding=0)

    def _show_stages(self, s: Sample, x: np.ndarray, pens: list) -> list[tuple[object, str]]:
        n = len(x)
        probs = finite(s.probs[:, :n].astype(np.float64))  # (S+1, N): row 0 raw, the last row sampled from
        cut = [s.cut_by(i) for i in range(n)]
        brushes = [BRUSH[True] if c is None else CUT_BRUSH.get(c, BRUSH[False]) for c in cut]
        self.raw.setOpts(x=x - 0.2, height=probs[0], width=0.38, brushes=brushes, pens=None)
        self.final.setOpts(x=x + 0.2, height=probs[-1], width=0.38, brushes=None, pens=pens)
        legend = [(self.raw, "model (raw)"), (self.final, "sampled from")]
        top_p = s.stage_index("top_p")
        self.top_p_line.setVisible(top_p is not None)  # first: a hidden line's label ignores a new value
        if top_p is not None:
            self.cumulative.setData(x, finite(s.top_p_cumulative[:n].astype(np.float64)))
            self.top_p_line.setValue(float(s.thresholds[top_p]))
            legend.append((self.cumulative, "top-p's running mass"))
        else:
            self.cumulative.setData([], [])
        for name, stage in self.stage_lines.items():
            i = s.stage_index(name)
            if stage.show(None if i is None else s.probs[i, :n], math.nan if i is None else float(s.thresholds[i])):
                legend.append((stage.marks, stage.legend()))
        legend += [(self.cut_samples[c], f"cut by {c.replace('_', '-')}") for c in CUT_BY if c in cut]
        self.note.setText("")
        return legend

    def _show_reported(self, s: Sample, x: np.ndarray, pens: list) -> list[tuple[object, str]]:
        """A server's partial record: one set of bars, the distribution it reported; no stages, no lines."""
        bars, other = (self.final, self.raw) if s.reported == "final" else (self.raw, self.final)
        bars.setOpts(x=x, height=finite(s.probs[0, : len(x)].astype(np.float64)), width=0.6, brushes=None, pens=pens)
        other.setOpts(x=[], height=[])
        which = "the sampled distribution" if s.reported == "final" else "the model's raw distribution"
        self._hide_stages(f"stages not observed: the server reported its top {s.top_n} of {which}")
        return [(bars, "sampled from" if s.reported == "final" else "model (raw)")]

    def _set_ticks(self, texts: tuple[str, ...]) -> None:
        """Each candidate's text under its bars, cut to what fits at the chart's width."""
        fits = int((self.width() - 50) / max(1, len(texts)) / CHAR_PX)  # 50: about the left axis
        ticks = [[(i, _label(t, min(MAX_LABEL, fits))) for i, t in enumerate(texts)]]
        if ticks != self._ticks:
            self.getPlotItem().getAxis("bottom").setTicks(ticks)
            self._ticks = ticks

    def _fit_note(self) -> None:
        """The note wraps before the legend (top right) rather than running under it."""
        if not hasattr(self, "note"):  # a resize while being made
            return
        legend = self.legend.boundingRect().width() if self._legend else 0.0
        self.note.setTextWidth(max(120.0, self.width() - legend - 90))  # 90: the left axis and margins

    def resizeEvent(self, e: object) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(e)
        self._fit_note()
        if self.shown is not None:
            self._set_ticks(self.shown[1][: len(self._ticks[0]) if self._ticks else 0])

    def _hover(self, pos: object) -> None:
        x = self.getPlotItem().vb.mapSceneToView(pos).x()
        tip = self.bar_tip(round(x)) if math.isfinite(x) else ""
        _show_tip(self, "<br>".join(t for t in (tip, self.hint and f"<i>{self.hint}</i>") if t))

    def bar_tip(self, i: int) -> str:
        """What candidate i's bars say, from the record: its probabilities and, if a stage cut it, which and why."""
        if self.shown is None or not 0 <= i < min(len(self.shown[1]), self.max_n, self.shown[0].top_n):
            return ""
        s, texts = self.shown
        raw, final = s.raw_probs, s.final_probs
        rows = [f"<code>{html.escape(visible(texts[i]))}</code> · rank {i} by the model"
                + (" · <b>drawn</b>" if int(s.top_ids[i]) == s.token else ""),
                f"model (raw) {_p(raw, i)} → sampled from {_p(final, i)}" if not s.is_partial else
                f"{'sampled from' if s.reported == 'final' else 'model (raw)'} {_p(s.probs[0], i)}, as the server "
                "reported it"]
        if (stage := s.cut_by(i)) is not None:
            rows.append(f"<b>cut by {stage.replace('_', '-')}</b>: {_why(s, stage)}")
        return "<br>".join(rows)

    def _set_legend(self, entries: list[tuple[object, str]]) -> None:
        """Name only what is drawn: entries are rebuilt when the items drawn change, relabelled in place when
        only a value in a name does."""
        if [item for item, _ in entries] == [item for item, _ in self._legend]:
            for (item, name), (_, old) in zip(entries, self._legend, strict=True):
                if name != old:
                    self.legend.getLabel(item).setText(name)
        else:
            for item, _ in self._legend:
                self.legend.removeItem(item)
            for item, name in entries:
                self.legend.addItem(item, name)
        self._legend = entries
        self.legend.setVisible(bool(entries))  # an empty legend is still a small box
        self._fit_note()


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
    (`chart_host.SERIES`); click to select a step. The most uncertain steps (`uncertain_steps`) carry a mark:
    clicking one asks to fork there with the runner-up.
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
        pi.setYRange(0, 1.02, padding=0)
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
        pi.vb.sigResized.connect(self._sync_views)
        for item in (self.prob, self.entropy):
            item.setClipToView(True)
            item.setDownsampling(auto=True, method="peak")
        self.cursor = pg.InfiniteLine(angle=90, pen=pg.mkPen(DRAWN, width=1))
        self.addItem(self.cursor)
        self.uncertain_above: float | None = None  # entropy (nats) that marks a step; None: the top 5 %
        self.marks = pg.ScatterPlotItem(symbol="t1", size=11, pen=None, brush=pg.mkBrush(UNCERTAIN), hoverable=True,
                                        tip=lambda x, y, data: f"step {x:.0f}: entropy {y:.2f} nats — click to "
                                        "continue with the runner-up token here")
        self.marks.sigClicked.connect(lambda _item, points, _ev: self.uncertain_clicked.emit(
            round(points[0].pos().x())))
        self.vb2.addItem(self.marks)
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
        marks stay: they sit at their entropy, on the right axis's scale."""
        prob, entropy = which in ("both", "prob"), which in ("both", "entropy")
        pi = self.getPlotItem()
        self.prob.setVisible(prob)
        pi.showAxis("left", prob)
        self.entropy.setVisible(entropy)
        pi.showAxis("right", entropy)
        self._series = which
        self._say()

    def clear_run(self) -> None:
        self._later.stop()
        self._p = np.zeros(1024)
        self._h = np.zeros(1024)
        self._model = np.zeros(1024, dtype=bool)  # step i's p is under the model (its sampled p not observed)
        self.n = 0
        self.prob.setData([], [])
        self.entropy.setData([], [])
        self.cursor.setValue(0)
        self.cursor.setVisible(False)  # no run, no step to point at
        self.marks.setData([], [])
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
            self._p, self._h, self._model = (np.resize(a, size) for a in (self._p, self._h, self._model))
        self._p[self.n : self.n + k] = probs
        self._h[self.n : self.n + k] = entropies
        self._model[self.n : self.n + k] = False if under_model is None else under_model
        self.n += k

    def redraw(self) -> None:
        x = np.arange(self.n)
        symbol = "o" if self.n <= 60 else None  # a short run is a few dots, a long one a line
        for item in (self.prob, self.entropy):
            if item.opts["symbol"] != symbol:
                item.setSymbol(symbol)
                item.setSymbolSize(4)
        p, h = self._p[: self.n], self._h[: self.n]
        for item, v in ((self.prob, p), (self.entropy, h)):
            _set_known(item, x, v)
        h = finite(h)
        marked = uncertain_steps(self._h[: self.n], above=self.uncertain_above)
        self.marks.setData(marked, h[marked] if marked else [])
        self.vb2.setYRange(0, max(1.0, float(h.max()) * 1.05 if self.n else 1.0), padding=0)
        self.getPlotItem().setXRange(0, max(self.n - 1, 10), padding=0.02)
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
        known = [(s.trace.drawn_prob, s.trace.sample.entropy) for s in steps if s.trace is not None]
        nan = math.nan
        self.append([nan if p is None else p for (p, _), _h in known],
                    [nan if h is None else h for _p, h in known],
                    [kind == "model" for (_, kind), _h in known])

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
