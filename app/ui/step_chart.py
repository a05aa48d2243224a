"""The step chart: the selected step's distribution stage by stage, drawn from its record and nothing else.

Drawn with the charts' shared pieces (app/ui/charts.py); imported, with pyqtgraph, after the first paint
(app/ui/chart_host.py).
"""

from __future__ import annotations

import html
import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QWidget

from app.core.trace import Sample
from app.ui.charts import CUT, DRAWN, FINAL, RAW, ThemedPlot, _faded, _show_tip, finite
from app.ui.formatting import EMPTY, format_prob, visible

MAX_LABEL = 7
CHAR_PX = 7  # about one character of the tick font: labels are cut to what fits under a bar
BRUSH = {True: pg.mkBrush(RAW), False: pg.mkBrush(CUT)}  # made once: charts update many times a second
PEN = {True: pg.mkPen(DRAWN, width=2), False: pg.mkPen(None)}
GRID = (0.2, 0.4, 0.6, 0.8, 1.0)  # the step chart's probability grid


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
