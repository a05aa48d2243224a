"""The generated text, each token's background shaded by the probability it was drawn with.

Tokens are inserted at an end cursor once per frame with a cached character format per shade, so appending
costs the same at token 10,000 as at token 10 (no relayout of the whole text, no per-token selections).
Hovering a token shows its probability, rank and the alternatives; clicking selects its step. `TokenSpans`
(spans, hit-testing, hover tooltips) is shared with the prompt editor's token boundaries.
"""

from __future__ import annotations

import bisect
import html

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QColor, QLinearGradient, QMouseEvent, QPainter, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QHBoxLayout, QLabel, QTextEdit, QToolTip, QVBoxLayout, QWidget

from app.core.events import Step

SHADES = 20


def prob_color(p: float, alpha: int = 120) -> QColor:
    """Red (unlikely) through amber to green (likely), translucent so text stays readable in any palette."""
    p = min(max(p, 0.0), 1.0)
    hue = int(120 * p)  # 0 red .. 120 green
    c = QColor.fromHsv(hue, 200, 235)
    c.setAlpha(alpha)
    return c


def visible(text: str) -> str:
    return text.replace("\n", "↵").replace("\t", "⇥").replace(" ", "·") or "∅"


class TokenSpans(QTextEdit):
    """Read-only text made of token spans: where each span starts, which span the mouse is over, and a tooltip
    per span (`span_tooltip`, given by the subclass). Undo is off: spans are only ever appended."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)
        self.setMouseTracking(True)
        self._starts: list[int] = []  # document position where each span starts

    def clear_spans(self) -> None:
        self.clear()
        self._starts = []

    def insert_span(self, cursor: QTextCursor, text: str, fmt: QTextCharFormat) -> None:
        self._starts.append(cursor.position())
        cursor.insertText(text, fmt)

    def span_end(self, i: int) -> int:
        return self._starts[i + 1] if i + 1 < len(self._starts) else self.document().characterCount() - 1

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

    def mouseMoveEvent(self, e: QMouseEvent) -> None:  # noqa: N802 - Qt override
        i = self.span_at(e.position().toPoint())
        tip = self.span_tooltip(i) if i is not None else ""
        if tip:
            QToolTip.showText(e.globalPosition().toPoint(), tip, self)
        else:
            QToolTip.hideText()
        super().mouseMoveEvent(e)


class TokenText(TokenSpans):
    step_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setPlaceholderText("Generated tokens appear here, shaded by probability. Press Ctrl+Enter.")
        self._formats = [self._format(i / (SHADES - 1)) for i in range(SHADES)]
        self._end_format = QTextCharFormat()
        self._end_format.setForeground(QColor(128, 128, 128))
        self._end_format.setFontItalic(True)
        self.clear_run()

    def _format(self, p: float) -> QTextCharFormat:
        f = QTextCharFormat()
        f.setBackground(prob_color(p))
        return f

    def clear_run(self) -> None:
        self.clear_spans()
        self._step_of: list[int] = []  # the step index of each shown token
        self._traces: dict[int, object] = {}
        self._selected: int | None = None

    def append_steps(self, steps: list[Step]) -> None:
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.beginEditBlock()
        for s in steps:
            if s.trace is not None:
                self._traces[s.step] = s.trace
            if not s.text:
                continue
            self._step_of.append(s.step)
            p = s.trace.prob if s.trace is not None else 1.0
            self.insert_span(cursor, s.text, self._formats[round(p * (SHADES - 1))])
        cursor.endEditBlock()
        if at_bottom:
            bar.setValue(bar.maximum())

    def mark_end(self, reason: str) -> None:
        label = {"eos": " [end of text]", "stop": " [stop string]", "length": " [max tokens]",
                 "cancelled": " [stopped]"}.get(reason, "")
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(label, self._end_format)

    def step_at(self, pos: QPoint) -> int | None:
        i = self.span_at(pos)
        return self._step_of[i] if i is not None else None

    def select(self, step: int | None) -> None:
        self._selected = step
        sels = []
        i = bisect.bisect_left(self._step_of, step) if step is not None else -1
        if 0 <= i < len(self._step_of) and self._step_of[i] == step:
            cur = QTextCursor(self.document())
            cur.setPosition(self._starts[i])
            cur.setPosition(self.span_end(i), QTextCursor.MoveMode.KeepAnchor)
            sel = QTextEdit.ExtraSelection()
            sel.cursor = cur
            sel.format.setFontUnderline(True)
            sel.format.setUnderlineColor(self.palette().highlight().color())
            sel.format.setUnderlineStyle(QTextCharFormat.UnderlineStyle.SingleUnderline)
            sel.format.setFontWeight(700)
            sels.append(sel)
        self.setExtraSelections(sels)

    def span_tooltip(self, i: int) -> str:
        return self.tooltip_for(self._step_of[i])

    def tooltip_for(self, step: int) -> str:
        t = self._traces.get(step)
        if t is None:
            return ""
        rows = [f"<b>step {step}</b> · token {t.token_id} <code>{html.escape(visible(t.text))}</code>",
                f"p = {t.prob:.3f} (model: {t.raw_prob:.3f}) · rank {t.sample.rank} · "
                f"entropy {t.sample.entropy:.2f} nats", "<i>alternatives (model probability):</i>"]
        for i, rp in enumerate(t.raw_top_probs(6)):
            mark = "▶ " if int(t.sample.top_ids[i]) == t.token_id else ""
            cut = t.cut_by(i)
            rows.append(f"{mark}<code>{html.escape(visible(t.top_texts[i]))}</code> {rp:.3f}"
                        + (f" <span style='color:gray'>cut by {cut}</span>" if cut else ""))
        return "<br>".join(rows)

    def mousePressEvent(self, e: QMouseEvent) -> None:  # noqa: N802 - Qt override
        step = self.step_at(e.position().toPoint())
        if step is not None and e.button() == Qt.MouseButton.LeftButton:
            self.step_clicked.emit(step)
        super().mousePressEvent(e)


class Legend(QWidget):
    """A gradient bar: the shade each probability gets."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFixedSize(140, 12)
        self.setToolTip("Background shade = probability of the drawn token in the final distribution")

    def paintEvent(self, _event: object) -> None:  # noqa: N802 - Qt override
        g = QLinearGradient(0, 0, self.width(), 0)
        for i in range(11):
            g.setColorAt(i / 10, prob_color(i / 10, 255))
        QPainter(self).fillRect(self.rect(), g)


class TokenView(QWidget):
    """The token text with its legend above."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text = TokenText()
        legend = QHBoxLayout()
        legend.addWidget(QLabel("<b>Output</b>"))
        legend.addStretch(1)
        legend.addWidget(QLabel("p = 0"))
        legend.addWidget(Legend())
        legend.addWidget(QLabel("1"))
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addLayout(legend)
        box.addWidget(self.text)
