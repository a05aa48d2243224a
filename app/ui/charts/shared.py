"""What the pyqtgraph charts share: their colours, a plot that follows the palette, tooltips that follow the pointer.

The charts themselves: the selected step's distribution stage by stage (app/ui/charts/step_chart.py) and the run's
timeline (app/ui/charts/timeline.py). Plot items are created once and updated in place (`setOpts` / `setData`), never
rebuilt per token. Values are checked before drawing: pyqtgraph blanks on NaN, so a non-finite value is shown as 0 and
flagged. The window holds the charts through app/ui/charts/chart_host.py, which imports them (and pyqtgraph) after the
first paint.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QColor, QCursor, QPalette
from PySide6.QtWidgets import QToolTip, QWidget

from app.core import stage_table

pg.setConfigOptions(antialias=False, useNumba=False)  # where pyqtgraph is first imported

RAW = QColor(100, 149, 237)  # cornflower: what the model proposed
FINAL = QColor(255, 140, 0)  # orange: what the sampler drew from
DRAWN = QColor(220, 20, 60)  # crimson outline: the drawn token
UNCERTAIN = QColor(148, 103, 189, 200)  # purple: a step among the most uncertain
CUT = QColor(150, 150, 150, 110)
THINK = QColor(123, 104, 238)  # medium slate blue: a thinking model's think span (its band, the budget's cut)


def _faded(c: QColor, alpha: int = 110) -> QColor:
    c = QColor(c)
    c.setAlpha(alpha)
    return c


@dataclass(frozen=True)
class StageStyle:
    """How the charts show a sampler stage: its label (the stage table's), its colour (a candidate it cut is faded in
    it) and, for a stage that cuts at a probability of its input (its record's threshold), the style of that line."""

    label: str
    color: QColor
    line: Qt.PenStyle | None = None


# A colour per stage the record can name (and the style of its threshold line, if it has one); its label is the
# stage table's. A stage missing here is shown in grey.
_LOOKS: dict[str, tuple[QColor, Qt.PenStyle | None]] = {
    "greedy": (CUT, None),
    "top_k": (QColor(0, 139, 139), Qt.PenStyle.DashDotLine),
    "top_p": (QColor(46, 139, 87), None),  # a mass, not a probability: its running mass and line
    "min_p": (QColor(138, 43, 226), Qt.PenStyle.DotLine),
    "top_n_sigma": (QColor(199, 21, 133), Qt.PenStyle.DashLine),
    "epsilon_cutoff": (QColor(184, 134, 11), Qt.PenStyle.DotLine),
    "eta_cutoff": (QColor(139, 69, 19), Qt.PenStyle.DashDotLine),
    "xtc": (QColor(220, 20, 120), Qt.PenStyle.DashDotDotLine),  # cuts the tokens above its line
    "typical_p": (QColor(70, 130, 180), None),  # its threshold is a mass: no line
    "logit_bias": (QColor(112, 128, 144), None),
    "mirostat": (QColor(0, 128, 128), Qt.PenStyle.DashDotDotLine),  # its line: 2^-μ
    "dynatemp": (CUT, None),  # its record's threshold is the temperature it applied
    "dry": (QColor(205, 92, 92), None),  # subtracts penalties: cuts nothing, no line
    "think_budget": (QColor(123, 104, 238), None),  # raises the closing marker: cuts nothing, no line
    "grammar": (QColor(106, 76, 147), None),  # a constraint's mask: cuts what cannot come next, no threshold
    "steering": (QColor(218, 112, 214), None),  # a vector in the forward: moves the logits, cuts nothing
}
STAGES = {name: StageStyle(stage_table.label(name), color, line) for name, (color, line) in _LOOKS.items()}


def stage_style(name: str) -> StageStyle:
    return STAGES.get(name) or StageStyle(stage_table.label(name), CUT)


def _show_tip(widget: QWidget, tip: str) -> None:
    """A tooltip that follows the pointer from item to item within one widget (Qt shows a widget's tooltip
    only after the pointer rests, and keeps the old text while it moves)."""
    if tip != widget.toolTip():
        widget.setToolTip(tip)
        if QToolTip.isVisible():
            QToolTip.showText(QCursor.pos(), tip, widget)


def fit_legend(legend: pg.LegendItem, room: float) -> None:
    """Lay `legend` out in the most columns whose rows fit in `room` px, and make it as large as its grid (pyqtgraph
    sizes it by a sum that leaves out the grid's spacing, and the grid then stretches the labels past it)."""
    legend.setColumnCount(_legend_columns(legend, room))
    size = legend.layout.effectiveSizeHint(Qt.SizeHint.PreferredSize)
    legend.setGeometry(0, 0, size.width(), size.height())


def _legend_columns(legend: pg.LegendItem, room: float) -> int:
    """As the legend's grid lays entries out: filling rows left to right (column j holds entries j, j+c, …), each
    column as wide as its widest sample and label, the grid's spacing between every sample, label and column."""
    grid = legend.layout
    gap = grid.horizontalSpacing()
    left, _top, right, _bottom = grid.getContentsMargins()
    widths = [sample.width() + gap + label.minimumWidth() for sample, label in legend.items]
    for c in range(len(widths), 1, -1):
        if sum(max(widths[j::c]) for j in range(c)) + gap * (c - 1) + left + right <= room:
            return c
    return 1


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
