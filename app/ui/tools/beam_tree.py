"""The beam tree as it grows: a column per step holding the extensions the cut ranked (the step's shortlist, best
first), each a box with its token and cumulative log-probability, joined to the live beam it extends.

Kept beams are solid blue, finished hypotheses green (with their length-normalized score), pruned extensions grey
and faded with a dashed edge. Every number is the recorded `BeamStep`'s; this view only lays the boxes out. A step
adds one column of items (no redraw of the others); `drawn()` reads back what the boxes say, for tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QMouseEvent, QPainter, QPen
from PySide6.QtWidgets import QGraphicsItem, QGraphicsRectItem, QGraphicsScene, QGraphicsView, QWidget

from app.core.decoding.beam import BeamStep, Candidate
from app.ui.formatting import format_logprob, visible

COL_W, ROW_H, BOX_W, BOX_H = 132, 26, 116, 21
FILL = {"kept": QColor(47, 111, 191), "finished": QColor(46, 157, 90), "pruned": QColor(160, 160, 160)}
TEXT = {"kept": QColor("white"), "finished": QColor("white"), "pruned": QColor(90, 90, 90)}


@dataclass(frozen=True)
class Drawn:
    """What one box shows: the step, its token's text, its label and its fate (read back from the scene)."""

    step: int
    beam: int
    token: int
    label: str
    fate: str


def label(c: Candidate, text: str) -> str:
    """A box's text: the token, then the cumulative log-probability (and a finished one's score)."""
    tail = f" ⇒{format_logprob(c.score)}" if c.fate == "finished" and c.score is not None else ""
    return f"{visible(text)[:8]} {format_logprob(c.cumulative)}{tail}"


class BeamTree(QGraphicsView):
    step_clicked = Signal(int)  # a box of this step was clicked

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setScene(QGraphicsScene(self))
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self._font = QFont(self.font())
        self._font.setPointSizeF(max(7.0, self._font.pointSizeF() * 0.85))
        self.clear()

    def clear(self, prompt: str = "") -> None:
        """An empty tree: only the prompt's node."""
        self.scene().clear()
        self._mark: QGraphicsRectItem | None = None
        self.marked: int | None = None
        self._boxes: list[tuple[Drawn, QGraphicsItem]] = []
        self._rows: dict[int, QPointF] = {0: QPointF(BOX_W, BOX_H / 2)}  # live beam -> its box's right edge
        root = self._box(QRectF(0, 0, BOX_W, BOX_H), QColor(230, 230, 230), QColor(40, 40, 40),
                         visible(prompt[-12:]) if prompt else "prompt", dashed=False)
        root.setToolTip(prompt)
        self.scene().setSceneRect(QRectF(0, 0, COL_W, ROW_H))

    def add_step(self, step: BeamStep, texts: dict[int, str]) -> None:
        """One column: the step's shortlist, joined to the boxes of the beams they extend."""
        x = (step.step + 1) * COL_W
        rows: dict[int, QPointF] = {}
        for i, c in enumerate(step.candidates[: step.shortlist]):
            rect = QRectF(x, i * ROW_H, BOX_W, BOX_H)
            self._edge(self._rows.get(c.beam), QPointF(x, rect.center().y()), c.fate)
            item = self._box(rect, FILL[c.fate], TEXT[c.fate], label(c, texts.get(c.token, "")),
                             dashed=c.fate == "pruned")
            item.setToolTip(_tooltip(c, texts.get(c.token, "")))
            self._boxes.append((Drawn(step.step, c.beam, c.token, label(c, texts.get(c.token, "")), c.fate), item))
            if c.fate == "kept" and c.row is not None:
                rows[c.row] = QPointF(rect.right(), rect.center().y())
        self._rows = rows
        self.scene().setSceneRect(self.scene().itemsBoundingRect().adjusted(-4, -4, 8, 8))
        self.ensureVisible(QRectF(x, 0, BOX_W, BOX_H), 8, 8)

    def mousePressEvent(self, e: QMouseEvent) -> None:  # noqa: N802 - Qt override
        x = self.mapToScene(e.position().toPoint()).x()
        if x >= COL_W:
            self.step_clicked.emit(int(x // COL_W) - 1)
        super().mousePressEvent(e)

    def mark_step(self, i: int) -> None:
        """Shade the column of step i (the step whose candidates are listed beside the tree)."""
        if self._mark is None:
            self._mark = self.scene().addRect(QRectF(), QPen(Qt.PenStyle.NoPen), QBrush(QColor(255, 200, 60, 70)))
            self._mark.setZValue(-2)
        top = self.scene().sceneRect()
        self._mark.setRect(QRectF((i + 1) * COL_W - 6, top.top(), BOX_W + 12, top.height()))
        self.marked = i

    def drawn(self) -> list[Drawn]:
        return [d for d, _ in self._boxes]

    def fill_of(self, i: int) -> QColor:
        return self._boxes[i][1].brush().color()

    def _box(self, rect: QRectF, fill: QColor, ink: QColor, text: str, dashed: bool) -> QGraphicsItem:
        pen = QPen(fill.darker(130), 1, Qt.PenStyle.DashLine if dashed else Qt.PenStyle.SolidLine)
        box = self.scene().addRect(rect, pen, QBrush(fill.lighter(150) if dashed else fill))
        if dashed:
            box.setOpacity(0.7)
        words = self.scene().addSimpleText(text, self._font)
        words.setBrush(QBrush(ink))
        words.setParentItem(box)
        words.setPos(rect.x() + 4, rect.y() + (rect.height() - words.boundingRect().height()) / 2)
        return box

    def _edge(self, start: QPointF | None, end: QPointF, fate: str) -> None:
        if start is None:
            return
        pen = QPen(FILL[fate].darker(120), 1.4 if fate != "pruned" else 1,
                   Qt.PenStyle.DashLine if fate == "pruned" else Qt.PenStyle.SolidLine)
        line = self.scene().addLine(start.x(), start.y(), end.x(), end.y(), pen)
        line.setZValue(-1)
        if fate == "pruned":
            line.setOpacity(0.5)


def _tooltip(c: Candidate, text: str) -> str:
    lines = [f"{visible(text)!s}  (token {c.token}) extends beam {c.beam}",
             f"log p(token) {format_logprob(c.logprob)}, cumulative {format_logprob(c.cumulative)}", c.fate]
    if c.score is not None:
        lines[-1] += f": score {format_logprob(c.score)} (cumulative / length^penalty)"
    elif c.row is not None:
        lines[-1] += f": beam {c.row} next step"
    return "\n".join(lines)
