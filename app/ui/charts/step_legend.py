"""The step chart's legend: a row of its own above the plot (the title's row), never on the bars, naming only what is
drawn, in as many columns as fit the plot's width. A chart too small for it (a 900x600 window with the branch tree
open) keeps its bars: the legend folds into the chart's tooltip instead of taking the plot's height.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtWidgets import QWidget

from app.ui.charts.shared import fit_legend

LEFT_AXIS_PX = 55
LEGEND_SHARE = 0.3  # the most of the chart's height its legend may take; past it, it folds into a tooltip
Entry = tuple[object, str]  # (a drawn item, its name)


class StepLegend(pg.LegendItem):
    def __init__(self, chart: QWidget, plot: pg.PlotItem, size_pt: float) -> None:
        """`chart`: the widget whose width it fits and whose tooltip it folds into; `plot`: its plot item."""
        super().__init__(labelTextSize=f"{size_pt:.1f}pt", horSpacing=12, verSpacing=-4)
        self._chart, self._plot = chart, plot
        self.entries: list[Entry] = []
        self.setParentItem(plot)
        self.layout.setContentsMargins(9, 3, 9, 0)  # about as tall as its rows: the plot keeps its height
        self.anchor(itemPos=(0, 0), parentPos=(0, 0), offset=(LEFT_AXIS_PX, 0))
        plot.titleLabel.setVisible(False)

    def show_entries(self, entries: list[Entry]) -> None:
        """Name only what is drawn: entries are rebuilt when the items drawn change, relabelled in place when
        only a value in a name does."""
        if [item for item, _ in entries] == [item for item, _ in self.entries]:
            for (item, name), (_, old) in zip(entries, self.entries, strict=True):
                if name != old:
                    self.getLabel(item).setText(name)
        else:
            self.clear()
            for item, name in entries:
                self.addItem(item, name)
        self.entries = entries
        self.lay_out()

    def lay_out(self) -> None:
        """As many columns as fit the plot's width; the title row above the plot made as tall as the legend."""
        if not self.items:
            self.setVisible(False)
            self._plot.layout.setRowFixedHeight(0, 4)
            return
        chart = self._chart
        fit_legend(self, chart.width() - LEFT_AXIS_PX - 20)
        folded = self.boundingRect().height() > LEGEND_SHARE * chart.height()
        self.setVisible(not folded)
        chart.setToolTip("Legend: " + "; ".join(name for _, name in self.entries) if folded else "")
        self._plot.layout.setRowFixedHeight(0, 4 if folded else self.boundingRect().height() + 2)
