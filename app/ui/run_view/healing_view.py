"""Token healing in the surprisal view: a notice when the prompt's last token is a boundary the model rarely saw (the
core's `healing.Boundary`, read from the prompt's surprisal record), a Heal button, and once a healed run and its
unhealed twin have made their first step, those two steps' distributions side by side. It draws the records it is
given (each candidate's recorded probability, the drawn token, what the grammar left) and computes none.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPalette
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from app.ui.formatting import format_prob, visible

if TYPE_CHECKING:
    from app.core.decoding.healing import Boundary
    from app.core.record.trace import StepTrace

ROWS = 4  # candidates a side shows
BAR, KEPT, DRAWN = QColor(150, 150, 150), QColor(106, 76, 147), QColor(200, 60, 40)


def _code(text: str) -> str:
    return f"<code>{html.escape(visible(text))}</code>"


class HealNotice(QWidget):
    """One line and a button: the prompt ends where the model expected a longer token."""

    heal_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = QLabel(wordWrap=True, textFormat=Qt.TextFormat.RichText)
        self.label.setObjectName("heal_notice")
        self.label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.button = QPushButton("Heal", toolTip="Back off the prompt's last token and run with the text made to "
                                  "start with it (its first token then covers the boundary); the run as typed runs "
                                  "beside it, and their first steps show side by side")
        self.button.clicked.connect(self.heal_requested)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.label, 1)
        row.addWidget(self.button)
        self.hide()

    def show_boundary(self, b: Boundary | None, healable: bool) -> None:
        """Shown for a rare boundary (`healable`: a completion prompt, where healing can run)."""
        if b is None or not b.rare:
            self.hide()
            return
        best = max(b.extensions, key=lambda e: e[2])
        self.label.setText(f"⚠ The prompt ends in {_code(b.text)} (p {format_prob(math.exp(b.logprob))}), where the "
                           f"model expected a longer token: {_code(best[1])} {format_prob(best[2])}"
                           f"{' and others' if len(b.extensions) > 1 else ''}. It rarely saw this boundary.")
        self.button.setEnabled(healable)
        self.button.setToolTip(self.button.toolTip() if healable else "Healing works on a completion prompt")
        self.show()


class Bars(QWidget):
    """A column of candidates: text, a bar for its recorded probability, the number, each in the colour given."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: list[tuple[str, float, QColor]] = []
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def show_rows(self, rows: list[tuple[str, float, QColor]]) -> None:
        self.rows = rows
        self.setFixedHeight(self.sizeHint().height())
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return QSize(160, self.fontMetrics().lineSpacing() * max(1, len(self.rows)) + 4)

    def paintEvent(self, _event: object) -> None:  # noqa: N802 - Qt's name
        p = QPainter(self)
        fm, line = self.fontMetrics(), self.fontMetrics().lineSpacing()
        text_w, num_w = fm.horizontalAdvance("M" * 7), fm.horizontalAdvance("0.0000")
        bar_w = max(10, self.width() - text_w - num_w - 12)
        ink = self.palette().color(QPalette.ColorRole.WindowText)
        for i, (text, prob, colour) in enumerate(self.rows):
            y = 2 + i * line
            p.setPen(ink)
            p.drawText(QRectF(0, y, text_w, line), Qt.AlignmentFlag.AlignVCenter, fm.elidedText(
                visible(text), Qt.TextElideMode.ElideRight, text_w - 4))
            p.fillRect(QRectF(text_w, y + 3, max(1.0, bar_w * prob), line - 6), colour)
            p.drawText(QRectF(text_w + bar_w + 6, y, num_w + 6, line), Qt.AlignmentFlag.AlignVCenter,
                       format_prob(prob))
        p.end()


def _rows(st: StepTrace, colour: QColor) -> list[tuple[str, float, QColor]]:
    """The step's likeliest ROWS candidates in the distribution it drew from (as recorded), the drawn one in red."""
    s = st.sample
    probs = s.final_probs if s.final_probs is not None else s.probs[0]
    n = min(len(st.top_texts), len(probs))
    order = sorted((i for i in range(n) if probs[i] > 0), key=lambda i: -float(probs[i]))[:ROWS]
    return [(st.top_texts[i], float(probs[i]), DRAWN if int(s.top_ids[i]) == s.token else colour) for i in order]


class HealComparison(QWidget):
    """The first step as typed beside the first step healed: the distribution each drew from (recorded), the drawn
    token in red; on the healed side, only tokens that start with the backed-off text are left."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.before, self.after = QLabel(wordWrap=True), QLabel(wordWrap=True)
        self.before_bars, self.after_bars = Bars(), Bars()
        grid = QHBoxLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        for title, bars in ((self.before, self.before_bars), (self.after, self.after_bars)):
            title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            column = QVBoxLayout()
            column.addWidget(title)
            column.addWidget(bars)
            column.addStretch(1)
            grid.addLayout(column, 1)
        self.hide()

    def show_steps(self, before: StepTrace, after: StepTrace, text: str) -> None:
        """`before`: the unhealed run's first step; `after`: the healed run's, which had to start with `text`."""
        self.before.setText(f"<b>As typed</b>: drew {_code(before.text)}")
        self.after.setText(f"<b>Healed</b>: {_code(text)} backed off, drew {_code(after.text)}")
        self.before_bars.show_rows(_rows(before, BAR))
        self.after_bars.show_rows(_rows(after, KEPT))
        self.setToolTip("The first step's likeliest candidates in the distribution each run drew from, as typed "
                        "(grey) and healed (purple: each starts with the backed-off text); red: the token drawn")
        self.show()
