"""The answer-over-thinking chart: each answer's probability (the user's list, renormalized; else the likeliest first
answer tokens) at each probe, against the think tokens before it; the chance that the model closes the span there
itself, dashed; a line where the leading answer changed and one where it settled. A click on a probe's point asks
to open that probe as a run. It draws the probes' records (`decoding.probes.ThinkProbe`) and computes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QWidget

from app.core.decoding.probes import ThinkProbe
from app.ui.charts.shared import THINK, ThemedPlot, _faded, _show_tip
from app.ui.formatting import format_prob, visible

COLORS = [QColor(c) for c in ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                              "#17becf")]
MOST_TOKENS = 5  # first-token curves drawn without a list of answers: the likeliest at any probe


def tracked(probes: Sequence[ThinkProbe], most: int = MOST_TOKENS) -> list[int]:
    """The first answer tokens worth a curve: those most probable at any probe, the likeliest first."""
    best: dict[int, float] = {}
    for p in probes:
        for t, lp in zip(p.top_ids[:3].tolist(), p.top_logprobs[:3].tolist(), strict=True):
            best[t] = max(best.get(t, -math.inf), lp)
    return sorted(best, key=lambda t: -best[t])[:most]


class ProbeChart(ThemedPlot):
    probe_clicked = Signal(int)  # the step of the probe whose point was clicked

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        plot = self.getPlotItem()
        plot.setLabel("left", "p(answer)")
        plot.setLabel("bottom", "think tokens before the span was closed")
        plot.setYRange(0, 1.05, padding=0)
        plot.setXRange(0, 16, padding=0.04)  # think tokens, not a unitless axis, before the first probe
        plot.showGrid(y=True, alpha=0.2)
        base = _faded(self.palette().color(QPalette.ColorRole.Base), 215)  # (over the curves: they show through)
        self.legend = plot.addLegend(offset=(-10, -30), brush=pg.mkBrush(base))  # bottom right
        self.curves: list[pg.PlotDataItem] = []
        self.close = pg.PlotDataItem(pen=pg.mkPen(THINK, width=1, style=Qt.PenStyle.DashLine))
        self.addItem(self.close)
        self.lines: list[pg.InfiniteLine] = []
        self.probes: list[ThinkProbe] = []
        self.names: list[str] = []  # each curve's answer, as its legend says
        self.scene().sigMouseMoved.connect(self._hover)

    def show_probes(self, probes: Sequence[ThinkProbe], text: Callable[[int], str],
                    changed: Sequence[int] = (), settled: int | None = None) -> None:
        """Draw `probes` (in step order); `text` names a token id; `changed`, `settled`: steps (the core's)."""
        self.probes = list(probes)
        x = np.array([p.think_tokens for p in probes], dtype=float)
        series = self._series(probes, text)
        self.names = [name for name, _ in series]
        self.legend.clear()
        for i, (name, y) in enumerate(series):
            curve = self._curve(i)
            curve.setData(x, y, connect="finite")
            curve.setVisible(True)
            self.legend.addItem(curve, name)
        for curve in self.curves[len(series):]:
            curve.setVisible(False)
        self.close.setData(x, np.array([math.exp(p.close_logprob) for p in probes]))
        self.legend.addItem(self.close, "closes here")
        at = {p.step: p.think_tokens for p in probes}
        marks = [(at[s], "changed", Qt.PenStyle.DotLine) for s in changed if s in at and s != settled]
        if settled is not None and settled in at:
            marks.append((at[settled], "settled", Qt.PenStyle.SolidLine))
        self._lines(marks)
        plot = self.getPlotItem()
        plot.setXRange(0, max(float(x.max()) if x.size else 1.0, 1.0), padding=0.04)

    def _series(self, probes: Sequence[ThinkProbe], text: Callable[[int], str]) -> list[tuple[str, np.ndarray]]:
        """(name, probability at each probe): each answer of the list, else each tracked first token (NaN where it
        was not among a probe's kept candidates)."""
        if probes and probes[0].answers:
            probs = np.array([p.answer_probs for p in probes])  # (P, J)
            return [(a, probs[:, j]) for j, a in enumerate(probes[0].answers)]
        out = []
        for t in tracked(probes):
            y = np.array([math.nan if (v := p.first_prob(t)) is None else v for p in probes])
            out.append((visible(text(t)), y))
        return out

    def _curve(self, i: int) -> pg.PlotDataItem:
        if i == len(self.curves):
            color = COLORS[i % len(COLORS)]
            curve = pg.PlotDataItem(pen=pg.mkPen(color, width=2), symbol="o", symbolSize=7,
                                    symbolBrush=pg.mkBrush(color), symbolPen=pg.mkPen(color))
            curve.sigPointsClicked.connect(lambda _c, points, _ev: self._clicked(points))
            self.addItem(curve)
            self.curves.append(curve)
        return self.curves[i]

    def _lines(self, marks: list[tuple[float, str, Qt.PenStyle]]) -> None:
        for line in self.lines:
            self.removeItem(line)
        self.lines = []
        for x, label, style in marks:
            line = pg.InfiniteLine(x, angle=90, pen=pg.mkPen(THINK.darker(120), width=1, style=style), label=label,
                                   labelOpts={"position": 0.95, "color": THINK.darker(140)})
            self.addItem(line)
            self.lines.append(line)

    def _clicked(self, points: Sequence[object]) -> None:
        if points:
            x = points[0].pos().x()
            step = next((p.step for p in self.probes if p.think_tokens == round(x)), None)
            if step is not None:
                self.probe_clicked.emit(step)

    def point_tip(self, think_tokens: int) -> str:
        p = next((p for p in self.probes if p.think_tokens == think_tokens), None)
        if p is None:
            return ""
        lines = [f"after {p.think_tokens} think tokens (step {p.step}) · closes here itself "
                 f"{format_prob(math.exp(p.close_logprob))}"]
        if p.answers:
            lines += [f"{a}: {format_prob(float(v))}" for a, v in zip(p.answers, p.answer_probs, strict=True)]
        return "\n".join(lines) + "\nclick a point to open this probe as a run"

    def _hover(self, pos: object) -> None:
        x = self.getPlotItem().vb.mapSceneToView(pos).x()
        _show_tip(self, self.point_tip(round(x)) if math.isfinite(x) else "")
