"""Read-only text made of token spans (`TokenSpans`: where each span starts, hit-testing, a tooltip per span) and
the gradient `Legend` of a shading. The output view, the surprisal view and the prompt's token boundaries are all
built on these; they draw what they are given and compute nothing.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from PySide6.QtCore import QPoint
from PySide6.QtGui import QColor, QLinearGradient, QMouseEvent, QPainter, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextEdit, QToolTip, QWidget


class TokenSpans(QTextEdit):
    """Read-only text made of token spans: where each span starts, which span the mouse is over, and a tooltip
    per span (`span_tooltip`, given by the subclass). Undo is off: spans are only ever appended."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)
        self.setMouseTracking(True)
        self._starts: list[int] = []  # document position where each span starts
        self._last_end = 0  # where the last span ends (text appended after it, an end mark, is no span)

    def clear_spans(self) -> None:
        self.clear()
        self._starts, self._last_end = [], 0

    def insert_span(self, cursor: QTextCursor, text: str, fmt: QTextCharFormat) -> None:
        self._starts.append(cursor.position())
        cursor.insertText(text, fmt)
        self._last_end = cursor.position()

    def span_end(self, i: int) -> int:
        return self._starts[i + 1] if i + 1 < len(self._starts) else self._last_end

    def span_at(self, pos: QPoint) -> int | None:
        """The span under `pos` (viewport coordinates), or None off the text."""
        cursor = self.cursorForPosition(pos)
        rect = self.cursorRect(cursor)
        if not self._starts or abs(rect.center().y() - pos.y()) > rect.height():
            return None
        i = bisect.bisect_right(self._starts, cursor.position()) - 1
        return i if i >= 0 else None

    def span_tooltip(self, i: int) -> str:
        return ""

    def span_count(self) -> int:
        return len(self._starts)

    def span_text(self, i: int) -> str:
        cur = QTextCursor(self.document())
        cur.setPosition(self._starts[i])
        cur.setPosition(self.span_end(i), QTextCursor.MoveMode.KeepAnchor)
        return cur.selectedText().replace("\u2029", "\n")  # Qt's paragraph separator

    def span_format(self, i: int) -> QTextCharFormat:
        """The character format a span is drawn with (what a test holds to the record)."""
        cur = QTextCursor(self.document())
        cur.setPosition(self._starts[i] + 1)  # the format of the character before the cursor
        return cur.charFormat()

    def mouseMoveEvent(self, e: QMouseEvent) -> None:  # noqa: N802 - Qt override
        i = self.span_at(e.position().toPoint())
        tip = self.span_tooltip(i) if i is not None else ""
        if tip:
            QToolTip.showText(e.globalPosition().toPoint(), tip, self)
        else:
            QToolTip.hideText()
        super().mouseMoveEvent(e)


class Legend(QWidget):
    """A gradient bar: the shade each value gets. `color(x)` for x in 0..1, drawn over the text's background
    so translucent shades look as they do behind the text."""

    def __init__(self, color: Callable[[float], QColor], tip: str, width: int = 140,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._color = color
        self.setFixedSize(width, 12)
        self.setToolTip(tip)

    def paintEvent(self, _event: object) -> None:  # noqa: N802 - Qt override
        g = QLinearGradient(0, 0, self.width(), 0)
        for i in range(11):
            g.setColorAt(i / 10, self._color(i / 10))
        painter = QPainter(self)
        painter.fillRect(self.rect(), self.palette().base())
        painter.fillRect(self.rect(), g)
        painter.setPen(self.palette().mid().color())
        painter.drawRect(self.rect().adjusted(0, 0, -1, -1))


SHADING = {  # what shades the output's tokens (TokenText.shaded_by): the legend's label and tooltip
    frozenset({"sampled"}): ("p = 0", "Background shade = probability of the drawn token in the final distribution"),
    frozenset({"model"}): ("p under the model = 0", "Background shade = the drawn token's probability under the "
                           "model, as the server reported it: the server samples by itself, and the distribution "
                           "it drew from was not observed"),
    frozenset({"sampled", "model"}): ("p (or under the model) = 0", "Background shade = probability of the drawn "
                                      "token in the final distribution; under the model for the steps a server "
                                      "drew, whose sampling was not observed"),
}
