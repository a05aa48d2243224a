"""The step chart: the selected step's distribution stage by stage, drawn from its record and nothing else.

Probabilities on a log axis by default (the tail and the cut lines readable) or a linear one (`set_log`); top-p's
running mass on its own linear axis at the right. The legend sits in a row above the plot, never on the bars
(`StepLegend`, app/ui/charts/step_legend.py); at a small width fewer candidates are drawn, each label still readable.
Drawn with the charts' shared pieces (app/ui/charts/shared.py); imported, with pyqtgraph, after the first paint
(app/ui/charts/chart_host.py).
"""

from __future__ import annotations

import html
import math
import re

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QWidget

from app.core import stage_table
from app.core.record.trace import Sample
from app.core.sampler.step_view import DrawnOutside, drawn_outside
from app.ui.charts.shared import (
    CUT,
    DRAWN,
    FINAL,
    RAW,
    STAGES,
    ThemedPlot,
    _faded,
    _show_tip,
    finite,
    stage_style,
)
from app.ui.charts.step_legend import LEFT_AXIS_PX, StepLegend
from app.ui.charts.step_scale import Scale
from app.ui.formatting import EMPTY, format_prob, visible

MAX_LABEL = 7
BEFORE_CHARS = 24  # of the text before a step, in a grammar cut's tooltip
CHAR_PX = 7  # about one character of the tick font: labels are cut to what fits under a bar
MIN_BAR_PX = 30  # a candidate's room at least: a narrower chart draws fewer candidates, each label readable
MIN_BARS = 8
BRUSH = {True: pg.mkBrush(RAW), False: pg.mkBrush(CUT)}  # made once: charts update many times a second
PEN = {True: pg.mkPen(DRAWN, width=2), False: pg.mkPen(None)}
TOP_P = STAGES["top_p"].color


def _label(text: str, limit: int = MAX_LABEL) -> str:
    t = visible(text)
    return t if len(t) <= limit else t[: max(1, limit - 1)] + "…"


def _p(probs: np.ndarray | None, i: int) -> str:
    return "?" if probs is None else format_prob(float(probs[i]))


def _why(s: Sample, stage: str) -> str:
    """Why `stage` cut a candidate, in the stage's own terms (the stage table's), with the threshold the record
    holds."""
    i = s.stage_index(stage)
    v = float(s.thresholds[i]) if i is not None else math.nan
    return stage_table.why(stage, v, format_prob(v))


class StageLine:
    """A stage that cuts at a probability (top-k, min-p): its threshold line and, under it, the probabilities the
    stage received (a short dash per candidate), so the line is read against the values it cut."""

    def __init__(self, chart: StepChart, label: str, color: QColor, style: Qt.PenStyle) -> None:
        self.label = label
        self.threshold = math.nan  # the recorded value the line is drawn at
        self.marks = pg.PlotDataItem(pen=pg.mkPen(color, width=2))
        self.line = pg.InfiniteLine(angle=0, pen=pg.mkPen(color, style=style))
        chart.addItem(self.marks)
        chart.addItem(self.line)

    def legend(self) -> str:
        """Its legend entry, which also gives the line's value (a label on the line would sit on the bars)."""
        return f"{self.label}'s input · cut at {format_prob(self.threshold)}"

    def show(self, probs_in: np.ndarray | None, threshold: float, scale: Scale) -> bool:
        """Draw the stage's input (N,) and its line; hide both when the stage did not run. True if shown."""
        shown = probs_in is not None and math.isfinite(threshold) and threshold > 0  # a line at 0 cuts nothing
        if shown:
            x = np.repeat(np.arange(len(probs_in), dtype=float), 2) + np.tile([-0.42, 0.42], len(probs_in))
            self.marks.setData(x, np.repeat(scale.y(probs_in), 2), connect="pairs")
            self.line.setValue(float(scale.y(threshold)))
            self.threshold = threshold
        self.marks.setVisible(shown)
        self.line.setVisible(shown)
        return shown


class StepChart(ThemedPlot):
    """Top-N candidates of one step, drawn from its record and nothing else: the raw and the final probabilities
    side by side, what each stage cut (in its colour), the drawn token outlined (after a gap when it is not among
    the candidates drawn), top-p's running mass and line, and the lines of the stages that cut at a probability
    over the probabilities those stages received. A partial record (a server's) shows only what it reported."""

    shown: tuple[Sample, tuple[str, ...]] | None = None  # the record drawn and its candidates' texts

    def __init__(self, parent: QWidget | None = None, max_n: int = 32) -> None:
        super().__init__(parent)
        self.setMouseEnabled(x=False, y=False)
        self.scale = Scale(log=True)
        self.max_n = max_n
        self.drawn_text = ""
        self.before = ""  # the text generated before the step shown
        self.outside: DrawnOutside | None = None  # the drawn token, shown after a gap
        self.n = 0  # candidates drawn
        pi = self.getPlotItem()
        pi.setLabel("left", "probability")
        small = QFont(self.font())
        small.setPointSizeF(max(6.0, small.pointSizeF() * 0.85))
        self.mass_view, self.cumulative, self.top_p_line = _mass_axis(pi)
        self.legend = StepLegend(self, pi, small.pointSizeF())
        # plain lines: the axis's own grid spans the view as part of the axis and cost ~15 ms of every repaint
        self.grid = [pg.InfiniteLine(pos=0, angle=0) for _ in range(9)]
        for line in self.grid:
            line.setZValue(-10)
            self.addItem(line)
        self.cut_samples = {name: pg.BarGraphItem(x=[], height=[], width=0.5, brush=_faded(stage_style(name).color),
                                                  pen=None) for name in STAGES}  # legend entries only
        self.raw = pg.BarGraphItem(x=[0], height=[0], width=0.38, brush=RAW, pen=None)
        self.final = pg.BarGraphItem(x=[0], height=[0], width=0.38, brush=FINAL, pen=None)
        self.outside_bars = pg.BarGraphItem(x=[], height=[], width=0.38, pen=PEN[True])
        for item in (self.raw, self.final, self.outside_bars):
            self.addItem(item)
        self.stage_lines = {name: StageLine(self, st.label, st.color, st.line)
                            for name, st in STAGES.items() if st.line is not None}
        pi.getAxis("bottom").setStyle(tickFont=small)
        self.note = pg.TextItem(anchor=(0, 0), color=QColor(128, 128, 128))
        self.note.setParentItem(pi.vb)  # fixed on the screen: the plot's top left corner
        self.note.setPos(4, 0)
        self.hint = ""  # said under a bar's tooltip, and alone elsewhere (the step panel's: click to fork)
        self.scene().sigMouseMoved.connect(self._hover)
        self._ticks: list = []
        self._theme()
        self.clear_step(EMPTY)  # an empty state, not an empty axis with a stray line

    def changeEvent(self, e: QEvent) -> None:  # noqa: N802 - Qt override
        super().changeEvent(e)
        if e.type() == QEvent.Type.PaletteChange and hasattr(self, "legend"):
            self._theme()

    def _theme(self) -> None:
        grid = self.palette().color(QPalette.ColorRole.Text)
        grid.setAlpha(51)
        for line in self.grid:
            line.setPen(pg.mkPen(grid))
        self.legend.setLabelTextColor(self.palette().color(QPalette.ColorRole.Text))
        self.note.fill = pg.mkBrush(_faded(self.palette().color(QPalette.ColorRole.Base), 215))

    def set_log(self, log: bool) -> None:
        """Probabilities on a log axis (True) or a linear one; the record shown is drawn again."""
        self.scale.log = log
        if self.shown is not None:
            self.show_sample(*self.shown, drawn_text=self.drawn_text, before=self.before)
        else:
            self._set_axis()

    def show_sample(self, s: Sample, texts: tuple[str, ...], drawn_text: str = "", before: str = "") -> None:
        """Draw record `s` (its candidates' texts `texts`; `drawn_text`: the drawn token's, for when it is not
        among the candidates drawn; `before`: the text generated before the step, which a grammar's cut follows)."""
        self.shown, self.drawn_text, self.before = (s, texts), drawn_text, before
        n = min(len(texts), self.max_n, s.top_n, self._room())
        self.n = n
        self.outside = drawn_outside(s, n)
        x = np.arange(n, dtype=float)
        self.scale.fit([s.probs[:, :n], s.thresholds[[i for i, name in enumerate(s.stage_names)
                                                      if name in self.stage_lines]]])
        pens = [PEN[bool(d)] for d in s.top_ids[:n] == s.token]
        show = self._show_reported if s.is_partial else self._show_taken if s.is_taken else self._show_stages
        self.legend.show_entries(show(s, x, pens))
        self._show_outside()
        self._set_ticks(texts[:n])
        self._set_axis()
        self.setXRange(-0.7, n - 0.3 + (1.5 if self.outside else 0), padding=0)

    def _room(self) -> int:
        """How many candidates fit at this width, each with room for a readable label."""
        return max(MIN_BARS, int((self.width() - 2 * LEFT_AXIS_PX) / MIN_BAR_PX))

    def clear_step(self, note: str = "") -> None:
        """Nothing drawn (a new run before its first token), with an optional note."""
        for bars in (self.raw, self.final, self.outside_bars):
            bars.setOpts(x=[], height=[])
        self.shown, self.outside, self.n = None, None, 0
        self._hide_stages(note)
        self.legend.show_entries([])
        self.getPlotItem().getAxis("bottom").setTicks([[]])
        self._ticks = [[]]
        self._set_axis()
        self.setXRange(-0.7, 19.7, padding=0)

    def _set_axis(self) -> None:
        sc = self.scale
        self.getPlotItem().getAxis("left").setTicks([sc.ticks()])
        self.getPlotItem().setLabel("left", "probability (log)" if sc.log else "probability")
        for line, y in zip(self.grid, sc.grid() + [math.nan] * len(self.grid), strict=False):
            line.setVisible(math.isfinite(y))
            if math.isfinite(y):
                line.setValue(y)
        self.setYRange(sc.base, sc.top + 0.05 * (sc.top - sc.base), padding=0)

    def _hide_stages(self, note: str) -> None:
        """No running mass, no lines; `note` in their place."""
        self.cumulative.setData([], [])
        self.top_p_line.setVisible(False)
        self.getPlotItem().showAxis("right", False)
        for stage in self.stage_lines.values():
            stage.show(None, math.nan, self.scale)
        self.note.setText(note)
        self.note.setVisible(bool(note))
        self._fit_note()

    def _bars(self, bars: pg.BarGraphItem, x: np.ndarray, probs: np.ndarray, **opts: object) -> None:
        base = self.scale.base
        bars.setOpts(x=x, y0=base, height=self.scale.y(probs) - base, **opts)

    def _show_stages(self, s: Sample, x: np.ndarray, pens: list) -> list[tuple[object, str]]:
        n = len(x)
        probs = s.probs[:, :n]  # (S+1, N): row 0 raw, the last row sampled from
        cut = [s.cut_by(i) for i in range(n)]
        brushes = [BRUSH[True] if c is None else pg.mkBrush(_faded(stage_style(c).color)) for c in cut]
        self._bars(self.raw, x - 0.2, probs[0], width=0.38, brushes=brushes, pens=None)
        self._bars(self.final, x + 0.2, probs[-1], width=0.38, brushes=None, pens=pens)
        legend = [(self.raw, "model (raw)"), (self.final, "sampled from")]
        top_p = s.stage_index("top_p")
        self.top_p_line.setVisible(top_p is not None)  # first: a hidden line's label ignores a new value
        self.getPlotItem().showAxis("right", top_p is not None)
        if top_p is not None:
            self.cumulative.setData(x, finite(s.top_p_cumulative[:n].astype(np.float64)))
            self.top_p_line.setValue(float(s.thresholds[top_p]))
            legend.append((self.cumulative, "top-p's running mass (right)"))
        else:
            self.cumulative.setData([], [])
        for name, stage in self.stage_lines.items():
            i = s.stage_index(name)
            if stage.show(None if i is None else probs[i], math.nan if i is None else float(s.thresholds[i]),
                          self.scale):
                legend.append((stage.marks, stage.legend()))
        named = list(dict.fromkeys(c for c in cut if c is not None))
        legend += [(self._cut_sample(c), f"cut by {stage_style(c).label}") for c in named]
        self.note.setText("")
        self.note.setVisible(False)
        return legend

    def _cut_sample(self, name: str) -> pg.BarGraphItem:
        if name not in self.cut_samples:  # a stage the table does not name: grey, under its own name
            self.cut_samples[name] = pg.BarGraphItem(x=[], height=[], width=0.5, brush=CUT, pen=None)
        return self.cut_samples[name]

    def _show_reported(self, s: Sample, x: np.ndarray, pens: list) -> list[tuple[object, str]]:
        """A server's partial record: one set of bars, the distribution it reported; no stages, no lines."""
        bars, other = (self.final, self.raw) if s.reported == "final" else (self.raw, self.final)
        self._bars(bars, x, s.probs[0, : len(x)], width=0.6, brushes=None, pens=pens)
        other.setOpts(x=[], height=[])
        which = "the sampled distribution" if s.reported == "final" else "the model's raw distribution"
        self._hide_stages(f"stages not observed: the server reported its top {s.top_n} of {which}")
        return [(bars, "sampled from" if s.reported == "final" else "model (raw)")]

    def _show_taken(self, s: Sample, x: np.ndarray, pens: list) -> list[tuple[object, str]]:
        """A step a beam search took: the model's distribution, the token taken outlined; no stage ran, no draw."""
        self._bars(self.raw, x, s.probs[0, : len(x)], width=0.6, brushes=None, pens=pens)
        self.final.setOpts(x=[], height=[])
        self._hide_stages("the beam search took the outlined token")
        return [(self.raw, "model (raw)")]

    def _show_outside(self) -> None:
        """The drawn token after a gap when it is not among the candidates drawn: its raw and final bars, outlined."""
        o = self.outside
        if o is None:
            self.outside_bars.setOpts(x=[], height=[])
            return
        x = float(self.n + 1)
        taken = self.shown is not None and self.shown[0].is_taken  # (one distribution: the model's)
        known = [(x, o.raw, RAW)] if taken else [(x - 0.2, o.raw, RAW), (x + 0.2, o.final, FINAL)]
        known = [(at, p, c) for at, p, c in known if p is not None]
        self._bars(self.outside_bars, np.array([at for at, _, _ in known]), np.array([p for _, p, _ in known]),
                   width=0.38, brushes=[pg.mkBrush(c) for *_, c in known], pens=[PEN[True]] * len(known))

    def _set_ticks(self, texts: tuple[str, ...]) -> None:
        """Each candidate's text under its bars, cut to what fits at the chart's width; the drawn token's, after
        the gap, with its rank."""
        fits = int((self.width() - 2 * LEFT_AXIS_PX) / max(1, len(texts) + (2 if self.outside else 0)) / CHAR_PX)
        ticks = [(i, _label(t, min(MAX_LABEL, fits))) for i, t in enumerate(texts)]
        if self.outside is not None:
            rank = "?" if self.outside.rank is None else self.outside.rank
            ticks.append((self.n + 1, f"#{rank} " + _label(self.drawn_text, min(MAX_LABEL, 2 * fits))))  # and the gap
        if [ticks] != self._ticks:
            self.getPlotItem().getAxis("bottom").setTicks([ticks])
            self._ticks = [ticks]

    def _fit_note(self) -> None:
        if hasattr(self, "note") and self.getPlotItem() is not None:  # (a resize while being made or closed)
            self.note.setTextWidth(max(120.0, self.getPlotItem().vb.width() - 8))

    def resizeEvent(self, e: object) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(e)
        if not hasattr(self, "note") or self.getPlotItem() is None:  # being made, or closed
            return
        self._fit_note()
        self.legend.lay_out()
        if self.shown is not None:
            self.show_sample(*self.shown, drawn_text=self.drawn_text, before=self.before)

    def _hover(self, pos: object) -> None:
        x = self.getPlotItem().vb.mapSceneToView(pos).x()
        tip = self.bar_tip(round(x)) if math.isfinite(x) else ""
        _show_tip(self, "<br>".join(t for t in (tip, self.hint and f"<i>{self.hint}</i>") if t))

    def bar_tip(self, i: int) -> str:
        """What candidate i's bars say, from the record: its probabilities and, if a stage cut it, which and why."""
        if self.shown is None:
            return ""
        if self.outside is not None and i == self.n + 1:
            return _outside_tip(self.outside, self.drawn_text, self.n, self.shown[0].is_taken)
        if not 0 <= i < self.n:
            return ""
        s, texts = self.shown
        drawn = " · <b>taken by the beam</b>" if s.is_taken else " · <b>drawn</b>"
        rows = [f"<code>{html.escape(visible(texts[i]))}</code> · rank {i} by the model"
                + (drawn if int(s.top_ids[i]) == s.token else ""), _probs_tip(s, i)]
        if (stage := s.cut_by(i)) == "grammar":
            rows.append(_grammar_tip(texts[i], self.before))
        elif stage is not None:
            rows.append(f"<b>cut by {stage_style(stage).label}</b>: {_why(s, stage)}")
        elif s.grammar is not None and not s.grammar.legal_top[i]:  # on reject, no mask applied: the draw was legal
            rows.append(f"<i>{_grammar_tip(texts[i], self.before)} (not applied: the token drawn was legal)</i>")
        return "<br>".join(rows)


def _mass_axis(pi: pg.PlotItem) -> tuple[pg.ViewBox, pg.PlotDataItem, pg.InfiniteLine]:
    """Top-p's running mass and line on a linear 0–1 axis of their own (right), whatever the left's scale: the axis's
    view, the mass, the line."""
    view = pg.ViewBox(enableMouse=False)
    pi.scene().addItem(view)
    pi.getAxis("right").linkToView(view)
    view.setXLink(pi)
    view.setYRange(0, 1.05, padding=0)
    pi.vb.sigResized.connect(lambda: view.setGeometry(pi.vb.sceneBoundingRect()))
    pi.setLabel("right", "top-p's mass", color=TOP_P.name())
    cumulative = pg.PlotDataItem(pen=pg.mkPen(TOP_P, width=1), symbol="o", symbolSize=4, symbolBrush=TOP_P,
                                 symbolPen=None)
    line = pg.InfiniteLine(angle=0, pen=pg.mkPen(TOP_P, style=Qt.PenStyle.DashLine), label="top-p {value:.2f}",
                           labelOpts={"position": 0.55, "color": TOP_P})
    view.addItem(cumulative)
    view.addItem(line)
    return view, cumulative, line


def _grammar_tip(text: str, before: str) -> str:
    """A candidate the grammar refuses, with the recorded text it cannot follow (its last characters)."""
    tail = visible(re.sub(r"\s{4,}", lambda m: m[0][:3] + "…", before))  # (a long indent, shortened: its start)
    tail = tail if len(tail) <= BEFORE_CHARS else "…" + tail[-BEFORE_CHARS:]
    after = f"follow <code>{html.escape(tail)}</code>" if before else "come first"
    return f"<b>cut by the grammar</b>: <code>{html.escape(visible(text))}</code> cannot {after}"


def _probs_tip(s: Sample, i: int) -> str:
    if s.is_partial:
        which = "sampled from" if s.reported == "final" else "model (raw)"
        return f"{which} {_p(s.probs[0], i)}, as the server reported it"
    if s.is_taken:
        return f"model (raw) {_p(s.raw_probs, i)}"
    return f"model (raw) {_p(s.raw_probs, i)} → sampled from {_p(s.final_probs, i)}"


def _outside_tip(o: DrawnOutside, drawn_text: str, n: int, taken: bool) -> str:
    """The tooltip of the drawn token shown after the gap (`n` candidates drawn; `taken`: by a beam)."""
    rank = "" if o.rank is None else f" · rank {o.rank} by the model"
    raw = "not reported" if o.raw is None else format_prob(o.raw)
    final = "not reported" if o.final is None else format_prob(o.final)
    return (f"<code>{html.escape(visible(drawn_text))}</code>{rank} · <b>"
            f"{'taken by the beam' if taken else 'drawn'}</b>, outside the {n} candidates drawn<br>"
            f"model (raw) {raw}" + ("" if taken else f" → sampled from {final}"))
