"""The multiverse as an icicle: a column per depth, the prefix (or the node zoomed into) on the left, each node a block
as tall as its path probability, inside its parent's span; what no node holds stays the column's grey. Token text
in the blocks it fits, a tooltip on every block; in the model's space a child the sampler would cut is hatched, in the
sampler's space the children it cut stand hatched in a narrow lane at the column's right, as tall as the share the
model gave them. Click zooms into a node (renormalized: it spans the height), right-click zooms out, double-click
asks to fork the node's path. It lays out the record's `blocks` and `cut_blocks`, and computes no probability.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QPoint, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QFontMetricsF, QMouseEvent, QPainter, QPen, QResizeEvent
from PySide6.QtWidgets import (
    QApplication,
    QGraphicsRectItem,
    QGraphicsScene,
    QGraphicsSimpleTextItem,
    QGraphicsView,
    QWidget,
)

from app.core.record.multiverse import ROOT, Block, Multiverse, Space
from app.ui.formatting import format_prob, visible

PALETTE = [QColor(c) for c in ("#8fb8e8", "#f2b880", "#9fd4a3", "#e8a0b4", "#c6b0e8", "#f0dc82", "#8fd6d0",
                                "#d8b89a")]
REST = QColor(222, 222, 222)  # the column's grey: what no node of the column holds
PREFIX = QColor(70, 70, 70)
LANE = 0.26  # the sampler's space: the share of a column's width its cut lane takes
MARGIN = 4  # px around the drawing
PAD = 2  # px between a block's edge and its text
EDGED = 3  # px: a block at least this tall gets a white edge (a thinner one would be all edge)


@dataclass(frozen=True)
class Drawn:
    """One block as drawn, read back from the scene: its node, kind ("node", "cut", "prefix") and rectangle."""

    node: int
    kind: str
    rect: QRectF
    text: str  # what it shows ("" where the text does not fit)
    hatched: bool


class BlockItem(QGraphicsRectItem):
    def __init__(self, rect: QRectF, node: int, kind: str) -> None:
        super().__init__(rect)
        self.node, self.kind = node, kind
        self.label = ""


class Icicle(QGraphicsView):
    hovered = Signal(int)  # the node under the pointer (-1: none)
    zoomed = Signal(int)  # the node now spanning the height (ROOT: none zoomed into)
    fork_requested = Signal(int)  # a node was double-clicked

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setScene(QGraphicsScene(self))
        self.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setMouseTracking(True)
        self.setMinimumSize(240, 160)
        self.tree: Multiverse | None = None
        self.space: Space = "model"
        self.focus = ROOT
        self.empty_note = ""
        self._click = QTimer(self, singleShot=True, interval=QApplication.doubleClickInterval())
        self._click.timeout.connect(self._zoom_clicked)
        self._pending = -1
        self._hover = -1

    # what it shows --------------------------------------------------------------------------------------------
    def show_tree(self, tree: Multiverse | None, note: str = "") -> None:
        """Draw `tree` (None: the empty note); the zoom stays where the node zoomed into is still there."""
        self.tree = tree
        if note:
            self.empty_note = note
        if tree is None or self.focus >= len(tree.nodes):
            self.focus = ROOT
        self.redraw()

    def set_space(self, space: Space) -> None:
        if space != self.space:
            self.space = space
            if self.tree is not None and self.tree.node(self.focus).path_prob(space) <= 0:
                self.focus = ROOT  # (a node the sampler cut has no height in its space)
            self.redraw()

    def zoom(self, node: int) -> None:
        """Let `node` span the height (ROOT: the whole tree); a node without height here is not zoomed into."""
        if self.tree is None or not 0 <= node < len(self.tree.nodes):
            return
        if self.tree.node(node).path_prob(self.space) <= 0 or node == self.focus:
            return
        self.focus = node
        self.redraw()
        self.zoomed.emit(node)

    def zoom_out(self) -> None:
        if self.tree is not None and self.focus != ROOT:
            self.zoom(self.tree.node(self.focus).parent)

    # drawing --------------------------------------------------------------------------------------------------
    def redraw(self) -> None:
        scene = self.scene()
        scene.clear()
        w, h = max(1, self.viewport().width()), max(1, self.viewport().height())
        scene.setSceneRect(0, 0, w, h)
        tree = self.tree
        if tree is None:
            scene.addSimpleText(self.empty_note).setPos(MARGIN * 3, MARGIN * 3)
            return
        columns = max(1, tree.depth - tree.node(self.focus).depth)
        col_w, span = (w - 2 * MARGIN) / (columns + 1), h - 2 * MARGIN
        for c in range(1, columns + 1):  # the grey under every column: the remainder where no block covers it
            rest = scene.addRect(QRectF(MARGIN + c * col_w, MARGIN, col_w - 1, span), QPen(Qt.PenStyle.NoPen),
                                 QBrush(REST))
            rest.setToolTip(self._rest_tip(c))
        lane = LANE * col_w if self.space == "sampled" and any(n.cut_by for n in tree.nodes) else 0.0
        for i, b in enumerate(tree.blocks(self.space, self.focus)):
            self._block(b, "prefix" if b.column == 0 else "node", MARGIN + b.column * col_w,
                        col_w - 1 - (lane if b.column else 0), span, i)
        if lane:
            for b in tree.cut_blocks(self.focus):
                self._block(b, "cut", MARGIN + (b.column + 1) * col_w - lane - 1, lane, span, 0)

    def _block(self, b: Block, kind: str, x: float, width: float, span: float, i: int) -> None:
        node = self.tree.node(b.node)  # type: ignore[union-attr]
        item = BlockItem(QRectF(x, MARGIN + b.top * span, max(width, 1.0), b.height * span), b.node, kind)
        hatched = kind == "cut" or (kind == "node" and node.cut_by is not None)
        color = PREFIX if kind == "prefix" else PALETTE[(i + node.depth) % len(PALETTE)]
        item.setBrush(QBrush(color.darker(115), Qt.BrushStyle.BDiagPattern) if hatched else QBrush(color))
        item.setPen(QPen(QColor(255, 255, 255), 0.5) if item.rect().height() >= EDGED else QPen(Qt.PenStyle.NoPen))
        item.setToolTip(self._tip(b.node, kind))
        self.scene().addItem(item)
        text = self._prefix_text() if kind == "prefix" else visible(node.text)
        self._label(item, text, QColor("white") if kind == "prefix" else QColor(30, 30, 30))

    def _label(self, item: BlockItem, text: str, color: QColor) -> None:
        """The text where the block is tall enough for a line, cut to its width."""
        rect = item.rect()
        label = QGraphicsSimpleTextItem(item)
        metrics = QFontMetricsF(label.font())
        if rect.height() < metrics.height() + PAD or rect.width() < 3 * PAD + metrics.averageCharWidth():
            label.setParentItem(None)
            return
        shown = metrics.elidedText(text, Qt.TextElideMode.ElideRight, rect.width() - 2 * PAD)
        label.setText(shown)
        label.setBrush(color)
        label.setPos(rect.x() + PAD, rect.y() + (rect.height() - metrics.height()) / 2)
        item.label = shown

    def _prefix_text(self) -> str:
        tree = self.tree
        assert tree is not None
        if self.focus == ROOT:
            return "…" + visible(tree.prefix_text[-40:]) if tree.prefix_text else "(prompt)"
        return visible(tree.path_text(self.focus))

    # what a block says ----------------------------------------------------------------------------------------
    def path_info(self, node: int) -> str:
        """A node's path and its probability in both spaces (and the stage that cut it), as a line."""
        tree = self.tree
        if tree is None or node < 0:
            return ""
        n = tree.node(node)
        if node == ROOT:
            return f"the prefix: {len(tree.prompt_ids) + len(tree.start)} tokens"
        cut = f"; cut by {n.cut_by}" if n.cut_by else ""
        end = "; ends the text" if n.end else ""
        return (f"“{visible(tree.path_text(node))}”: p = {format_prob(n.path)} under the model, "
                f"{format_prob(n.sampled_path)} after your sampler (this token: {format_prob(n.prob)} / "
                f"{format_prob(n.sampled)}{cut}{end})")

    def _tip(self, node: int, kind: str) -> str:
        if kind == "cut":
            n = self.tree.node(node)  # type: ignore[union-attr]
            return (f"{self.path_info(node)}\nCut by {n.cut_by}: the model gave this token {format_prob(n.prob)} "
                    "of its parent; your sampler gives it 0")
        return self.path_info(node) + ("\nClick: zoom in · double-click: fork this path into a run"
                                       if kind == "node" else "\nRight-click: zoom out")

    def _rest_tip(self, column: int) -> str:
        tree = self.tree
        assert tree is not None
        cols = tree.columns(self.space, self.focus)
        c = cols[column - 1] if column <= len(cols) else None
        return "" if c is None else (f"depth {tree.node(self.focus).depth + column}: the nodes here hold "
                                     f"{format_prob(c.explored)}; unexplored (or cut, or ended): "
                                     f"{format_prob(max(c.remainder, 0.0))}")

    def drawn(self) -> list[Drawn]:
        """Every block in the scene, in drawing order (for tests and for the window's status)."""
        return [Drawn(i.node, i.kind, i.rect(), i.label, i.brush().style() == Qt.BrushStyle.BDiagPattern)
                for i in reversed(self.scene().items()) if isinstance(i, BlockItem)]

    # the pointer ----------------------------------------------------------------------------------------------
    def node_at(self, pos: QPoint) -> int:
        for item in self.items(pos):
            if isinstance(item, BlockItem):
                return item.node
            if isinstance(item.parentItem(), BlockItem):
                return item.parentItem().node
        return -1

    def mouseMoveEvent(self, e: QMouseEvent) -> None:  # noqa: N802 - Qt override
        node = self.node_at(e.position().toPoint())
        if node != self._hover:
            self._hover = node
            self.hovered.emit(node)
        super().mouseMoveEvent(e)

    def mousePressEvent(self, e: QMouseEvent) -> None:  # noqa: N802 - Qt override
        if e.button() == Qt.MouseButton.RightButton:
            self.zoom_out()
        elif e.button() == Qt.MouseButton.LeftButton:
            self._pending = self.node_at(e.position().toPoint())
            self._click.start()  # a single click, unless a double-click follows

    def mouseDoubleClickEvent(self, e: QMouseEvent) -> None:  # noqa: N802 - Qt override
        self._click.stop()
        node = self.node_at(e.position().toPoint())
        if e.button() == Qt.MouseButton.LeftButton and node > ROOT:
            self.fork_requested.emit(node)

    def _zoom_clicked(self) -> None:
        if self._pending == self.focus:
            self.zoom_out()  # the left column: back out
        elif self._pending >= 0:
            self.zoom(self._pending)

    def resizeEvent(self, e: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(e)
        self.redraw()
