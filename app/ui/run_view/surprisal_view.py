"""The prompt shaded by its surprisal: each token's background says how unlikely the model found it, given the
tokens before it (the `PromptScore` record's log-probabilities, on a log scale), with a tooltip per token and a
header that gives the perplexity. It draws the record it is given and computes no probability itself.
"""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.core.record.export import SHADES

if TYPE_CHECKING:
    from app.core.decoding.healing import Boundary
    from app.core.decoding.surprisal import PromptScore
    from app.core.record.trace import StepTrace
from app.ui.formatting import format_logprob, format_prob, shown_piece, visible
from app.ui.run_view.healing_view import HealComparison, HealNotice
from app.ui.run_view.token_spans import Legend, TokenSpans

SURPRISE_DECADES = 4  # the surprisal scale runs from p = 1 (clear) to p <= 1e-4 (full colour), log-spaced
# Yellow-orange-red (ColorBrewer YlOrRd), translucent so text stays readable; clear where the model expected it.
SURPRISE_STOPS = ((0.0, (255, 237, 160, 0)), (0.33, (254, 178, 76, 110)), (0.66, (240, 59, 32, 150)),
                  (1.0, (189, 0, 38, 185)))


def surprise_level(logprob: float) -> float:
    """0 for a certain token (p = 1) .. 1 at p <= 1e-4, linear in log p; NaN (no probability) stays NaN."""
    if math.isnan(logprob):
        return math.nan
    return min(max(-logprob / (SURPRISE_DECADES * math.log(10)), 0.0), 1.0)


def surprise_shade(logprob: float) -> int | None:
    """The shade (0 .. SHADES - 1) a prompt token with this log-probability is drawn with; None: unshaded."""
    level = surprise_level(logprob)
    return None if math.isnan(level) else round(level * (SHADES - 1))


def surprise_color(level: float) -> QColor:
    """The colour at `level` (0..1) of the surprisal scale."""
    for (a, ca), (b, cb) in itertools.pairwise(SURPRISE_STOPS):
        if level <= b:
            f = (level - a) / (b - a)
            return QColor(*(round(x + (y - x) * f) for x, y in zip(ca, cb, strict=True)))
    return QColor(*SURPRISE_STOPS[-1][1])


class SurprisalText(TokenSpans):
    """The scored prompt as the model saw it (chat template included), each token shaded by how unlikely the
    model found it given what precedes it: the `PromptScore` record's log-probabilities, on a log scale."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._formats = [self._format(i) for i in range(SHADES)]
        self._first = QTextCharFormat()  # the first token: nothing precedes it, so it has no probability
        self._first.setForeground(QColor(128, 128, 128))
        self.score: PromptScore | None = None
        self._text_of: Callable[[int], str] = str

    def _format(self, level: int) -> QTextCharFormat:
        f = QTextCharFormat()
        f.setBackground(surprise_color(level / (SHADES - 1)))
        return f

    def show_score(self, score: PromptScore, token_text: Callable[[int], str]) -> None:
        """Lay out `score.ids` as spans (`token_text` gives each one's text), shaded by `score.logprobs`."""
        bar = self.verticalScrollBar()
        keep = bar.value()  # re-scoring while typing must not jump the view
        self.clear_spans()
        self.score, self._text_of = score, token_text
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        for tid, lp in zip(score.ids, score.logprobs.tolist(), strict=True):
            level = surprise_shade(lp)
            fmt = self._first if level is None else self._formats[level]
            self.insert_span(cursor, shown_piece(token_text(tid)), fmt)
        cursor.endEditBlock()
        bar.setValue(keep)

    def clear_score(self) -> None:
        self.clear_spans()
        self.score = None

    def span_tooltip(self, i: int) -> str:
        return surprisal_tooltip(self.score, i, self._text_of) if self.score is not None else ""


def surprisal_tooltip(score: PromptScore, i: int, token_text: Callable[[int], str]) -> str:
    """Token i of a scored prompt: its probability, rank among the model's top alternatives, and those."""
    tid = score.ids[i]
    rows = [f"<b>token {i}</b> <code>{html.escape(visible(token_text(tid)))}</code> · id {tid}"]
    lp = float(score.logprobs[i])
    if math.isnan(lp):
        rows.append("the first token: nothing precedes it, so the model gives it no probability")
        return "<br>".join(rows)
    p = math.exp(lp)
    odds = f" (1 in {1 / p:,.0f})" if 0 < p < 0.1 else ""
    rows.append(f"p = <b>{format_prob(p)}</b>{odds} · log p = {format_logprob(lp)} · "
                f"surprisal {-lp / math.log(2):.1f} bits")
    top = score.top_ids[i].tolist()
    k = len(top)
    rows.append(f"rank <b>{top.index(tid) + 1}</b> among the model's top {k}" if tid in top
                else f"<span style='color:gray'>not among the model's top {k}</span>")
    rows.append("<i>what the model expected here:</i>")
    for alt, alp in zip(top, score.top_logprobs[i].tolist(), strict=True):
        if math.isnan(alp):
            continue
        mark = "▶ " if alt == tid else ""
        rows.append(f"{mark}<code>{html.escape(visible(token_text(alt)))}</code> {format_prob(math.exp(alp))}")
    return "<br>".join(rows)


class SurprisalView(QWidget):
    """The surprisal text under a header: the title, a short status (perplexity, or "scoring…") and the legend.
    What it is waiting for (a model, a prompt) is the empty text's placeholder. Under the text, token healing: a
    notice when the prompt ends at a rare boundary (`heal_requested` when Heal is pressed), and a healed run's first
    step beside the unhealed one's."""

    EMPTY = "Each prompt token, shaded by how surprising the model finds it."
    heal_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text = SurprisalText()
        self.text.setPlaceholderText(self.EMPTY)
        self.status = QLabel()
        self.status.setObjectName("surprisal_status")
        self.status.setStyleSheet("color: gray")
        # Never widen the prompt column for a status: clip it instead.
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        tip = ("Background = how unlikely the model found each prompt token, given the tokens before it "
               "(log scale: each quarter of the bar is a factor of 10). Hover a token for its probability and "
               "the model's alternatives.")
        head = QHBoxLayout()
        head.addWidget(QLabel("<b>Surprisal</b>", toolTip=tip))
        head.addWidget(self.status, 1)
        head.addWidget(QLabel("p = 1"))
        head.addWidget(Legend(surprise_color, tip, width=96))
        head.addWidget(QLabel("10⁻⁴"))
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addLayout(head)
        box.addWidget(self.text, 1)
        self.notice, self.healed = HealNotice(), HealComparison()
        self.notice.heal_requested.connect(self.heal_requested)
        box.addWidget(self.notice)
        box.addWidget(self.healed)

    def show_boundary(self, b: Boundary | None, healable: bool) -> None:
        """The prompt's last token's boundary (None: nothing to say)."""
        self.notice.show_boundary(b, healable)

    def show_healed(self, before: StepTrace, after: StepTrace, text: str) -> None:
        self.healed.show_steps(before, after, text)

    def show_score(self, score: PromptScore, token_text: Callable[[int], str]) -> None:
        self.text.show_score(score, token_text)
        lps = [lp for lp in score.logprobs.tolist() if not math.isnan(lp)]
        if not lps:
            self.set_status("· one token: nothing before it to predict it")
            return
        mean = -sum(lps) / len(lps)  # nats per predicted token
        self.set_status(f"· perplexity {math.exp(mean):,.1f}",
                        f"Mean surprisal {mean / math.log(2):.2f} bits per token over the {len(lps)} tokens the model "
                        f"predicted: on average as unsure as a pick among {math.exp(mean):,.1f} equally likely "
                        "tokens (perplexity).")

    def set_status(self, text: str, tip: str = "") -> None:
        self.status.setText(text)
        self.status.setToolTip(tip or text)

    def scoring(self) -> None:
        """A score is on its way: the shading shown (if any) stays until it is back."""
        self.text.setPlaceholderText(self.EMPTY)
        self.set_status("· scoring…")

    def clear(self, why: str = "") -> None:
        """No shading; `why` (what it waits for) shows in its place."""
        self.text.clear_score()
        self.text.setPlaceholderText(why or self.EMPTY)
        self.set_status("")
        self.notice.hide()
