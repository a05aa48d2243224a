"""Run ▸ Attention…: a dock that draws where the step the window shows looked. "Show attention" asks the model thread
for the `AttentionMap` of that step's position (an `attention` job) and draws it: each layer's head-mean weights over
the context tokens as small multiples (one bar chart a layer, one scale for all), and the selected layer's heads as a
heads × positions map (click a layer to select it); heads that share a KV head (grouped-query attention) and sliding
windows are said. Every number drawn is the record's; the view maps weights to heights and colours only.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtWidgets import QPushButton, QSplitter, QWidget

from app.core.decoding.inside import AttentionMap
from app.ui.charts.shared import DRAWN, RAW, ThemedPlot, _show_tip
from app.ui.formatting import visible
from app.ui.tools.inside.look_dock import LookDock

if TYPE_CHECKING:
    from app.core.record.trace import StepTrace
    from app.ui.viewmodel.playground import Playground

MAX_TICKS = 24  # context tokens named under the heads map (more: every n-th)
BAR, PICKED = pg.mkBrush(RAW), pg.mkBrush(DRAWN)


def columns(layers: int) -> int:
    """Small multiples per row: about 1.5 times as wide as tall."""
    return max(1, min(layers, round(math.sqrt(layers * 1.5))))


def kv_note(a: AttentionMap) -> str:
    """Which heads share a KV head, and where a sliding window limits what a layer sees."""
    if a.group > 1:
        shared = f"{a.heads} query heads read {a.kv_heads} KV heads: heads {{0..{a.group - 1}}} share KV head 0, and " \
                 f"so on ({a.group} per KV head: grouped-query attention)"
    else:
        shared = f"{a.heads} heads, each with its own keys and values"
    windows = sorted({w for w in a.windows if w})
    if windows:
        n = sum(1 for w in a.windows if w)
        shared += f"; {n} of {a.layers} layers see only the last {', '.join(map(str, windows))} positions " \
                  "(sliding window: earlier positions drawn at 0)"
    return shared + "."


class LayerGrid(pg.GraphicsLayoutWidget):
    """One small bar chart per layer: its head-mean weight at each context position, all on one y scale."""

    layer_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setBackground(self.palette().color(self.backgroundRole()))
        self.plots: list[pg.PlotItem] = []
        self.bars: list[pg.BarGraphItem] = []
        self.amap: AttentionMap | None = None
        self.selected = 0
        self.scene().sigMouseClicked.connect(self._clicked)
        self.scene().sigMouseMoved.connect(self._hover)

    def show_map(self, a: AttentionMap, selected: int) -> None:
        self.amap = a
        if len(self.plots) != a.layers:
            self._make(a.layers)
        mean = a.head_mean()
        top = float(mean.max()) if mean.size else 1.0
        x = np.arange(mean.shape[1], dtype=float)
        for i, (plot, bars) in enumerate(zip(self.plots, self.bars, strict=True)):
            bars.setOpts(x=x, height=mean[i], width=0.85)
            plot.setXRange(-0.5, len(x) - 0.5, padding=0)
            plot.setYRange(0, top * 1.05 or 1.0, padding=0)
            window = f" · window {a.windows[i]}" if a.windows[i] else ""
            plot.setTitle(f"layer {i + 1}{window}", size="8pt")
        self.select(selected)

    def select(self, layer: int) -> None:
        self.selected = layer
        for i, bars in enumerate(self.bars):
            bars.setOpts(brush=PICKED if i == layer else BAR)

    def _make(self, layers: int) -> None:
        self.clear()
        self.plots, self.bars = [], []
        cols = columns(layers)
        for i in range(layers):
            plot = self.addPlot(row=i // cols, col=i % cols)
            plot.setMouseEnabled(False, False)
            plot.hideButtons()
            plot.setMenuEnabled(False)
            plot.getAxis("left").setStyle(showValues=False)
            plot.getAxis("bottom").setStyle(showValues=False)
            bars = pg.BarGraphItem(x=[], height=[], width=0.85, brush=BAR, pen=pg.mkPen(None))
            plot.addItem(bars)
            self.plots.append(plot)
            self.bars.append(bars)

    def layer_at(self, pos: QPointF) -> int | None:
        return next((i for i, p in enumerate(self.plots) if p.sceneBoundingRect().contains(pos)), None)

    def tip(self, layer: int, position: int) -> str:
        a = self.amap
        if a is None or not 0 <= position < a.weights.shape[2]:
            return ""
        w = float(a.head_mean()[layer, position])
        return (f"layer {layer + 1}, position {position} <code>{html.escape(visible(a.context_texts[position]))}"
                f"</code>: mean weight {w:.3f} over {a.heads} heads (click: its heads)")

    def _clicked(self, ev: object) -> None:
        layer = self.layer_at(ev.scenePos())
        if layer is not None:
            self.select(layer)
            self.layer_clicked.emit(layer)

    def _hover(self, pos: QPointF) -> None:
        layer = self.layer_at(pos)
        if layer is None:
            return
        x = self.plots[layer].vb.mapSceneToView(pos).x()
        _show_tip(self, self.tip(layer, round(x)) if math.isfinite(x) else "")


class HeadMap(ThemedPlot):
    """The selected layer's heads × context positions, coloured by weight (0 dark, the layer's largest bright)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setColorMap(pg.colormap.get("viridis"))
        self.addItem(self.image)
        plot = self.getPlotItem()
        plot.invertY(True)
        plot.setMouseEnabled(False, False)
        plot.setLabel("bottom", "context position")
        self.amap: AttentionMap | None = None
        self.layer = 0
        self.scene().sigMouseMoved.connect(self._hover)
        self.clear_layer()

    def show_layer(self, a: AttentionMap, layer: int) -> None:
        self.amap, self.layer = a, layer
        w = a.weights[layer]  # (heads, positions)
        self.image.setImage(w, levels=(0.0, float(w.max()) or 1.0), autoLevels=False)
        plot = self.getPlotItem()
        plot.setXRange(0, w.shape[1], padding=0)
        plot.setYRange(0, w.shape[0], padding=0)
        every = max(1, math.ceil(w.shape[1] / MAX_TICKS))
        ticks = [(t + 0.5, visible(a.context_texts[t])[:8]) for t in range(0, w.shape[1], every)]
        plot.getAxis("bottom").setTicks([ticks])
        kv = (lambda h: f"h{h}·kv{a.kv_head_of(h)}") if a.group > 1 else (lambda h: f"h{h}")
        plot.getAxis("left").setTicks([[(h + 0.5, kv(h)) for h in range(w.shape[0])]])
        plot.setTitle(f"layer {layer + 1}: each head", size="9pt")

    def clear_layer(self) -> None:
        """Nothing drawn: a blank map, its axes without numbers."""
        self.amap = None
        self.image.clear()
        plot = self.getPlotItem()
        plot.setTitle("the selected layer's heads", size="9pt")
        for side in ("bottom", "left"):
            plot.getAxis(side).setTicks([[]])
        plot.setXRange(0, 1, padding=0)
        plot.setYRange(0, 1, padding=0)

    def tip(self, head: int, position: int) -> str:
        a = self.amap
        if a is None or not (0 <= head < a.heads and 0 <= position < a.weights.shape[2]):
            return ""
        shared = f" (KV head {a.kv_head_of(head)}, shared with heads {list(a.sharing(head))})" if a.group > 1 else ""
        return (f"layer {self.layer + 1}, head {head}{shared}<br>position {position} "
                f"<code>{html.escape(visible(a.context_texts[position]))}</code>: weight "
                f"{float(a.weights[self.layer, head, position]):.3f}")

    def _hover(self, pos: QPointF) -> None:
        p = self.getPlotItem().vb.mapSceneToView(pos)
        if math.isfinite(p.x()) and math.isfinite(p.y()):
            _show_tip(self, self.tip(math.floor(p.y()), math.floor(p.x())))


class AttentionView(LookDock):
    """The layers' head means and the selected layer's heads (`draw`); `shown`: the AttentionMap, or None."""

    KIND, HEADING, DREW = "attention", "Attention", "the position that drew"
    READING = "Reading each layer's attention at this step…"

    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__(playground, QPushButton("Show attention", toolTip="Recompute this step's position from the "
                         "run's tokens with its attention weights: per layer and head, over every earlier position"),
                         parent)
        self.setObjectName("attention")
        self.run = self.ask
        self.grid, self.heads = LayerGrid(), HeadMap()
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.grid)
        split.addWidget(self.heads)
        split.setSizes([320, 220])
        self.grid.layer_clicked.connect(self.show_layer)
        self._finish((), (self.status, self.note), split)

    def draw_unlooked(self, _trace: StepTrace) -> None:
        self._clear("Press Show attention to see where this step looked.")

    def draw(self, a: AttentionMap) -> None:
        """The attention map: every layer's head means, the selected layer's heads."""
        layer = min(self.grid.selected, a.layers - 1)
        self.grid.show_map(a, layer)
        self.heads.show_layer(a, layer)
        self.note.setText(kv_note(a))
        self.status.setText(f"Position {a.position} over its {a.weights.shape[2]} context tokens: each small chart "
                            "is a layer's mean over its heads; click one for its heads.")
        self.shown.emit(a)

    def show_layer(self, layer: int) -> None:
        if self.grid.amap is not None:
            self.heads.show_layer(self.grid.amap, layer)

    def blank(self) -> None:
        self.grid.clear()
        self.grid.plots, self.grid.bars, self.grid.amap = [], [], None
        self.heads.clear_layer()
        self.note.setText("")
