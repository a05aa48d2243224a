"""How the output shows a thinking model's think span: its tokens in italics, greyed over a faded shade, and folded
into one line while "Thinking" is off. It reads each step's recorded span (`StepTrace.span`); which tokens are
thinking is the core's word, never guessed from the text here.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtGui import QColor, QTextCharFormat

from app.core.events import Step

THOUGHT = QColor(105, 100, 140)  # the think span's text: a muted slate


def half_shade(c: QColor) -> QColor:
    """A token's shade at half its opacity: the background of the inherited text and of the think span."""
    c = QColor(c)
    c.setAlpha(c.alpha() // 2)
    return c


def think_format(fmt: QTextCharFormat) -> QTextCharFormat:
    """A token's look inside the think span: italic, muted, its shade at half its opacity."""
    out = QTextCharFormat(fmt)
    out.setFontItalic(True)
    out.setForeground(THOUGHT)
    if out.hasProperty(QTextCharFormat.Property.BackgroundBrush):
        out.setBackground(half_shade(out.background().color()))
    return out


def fold_format() -> QTextCharFormat:
    f = QTextCharFormat()
    f.setFontItalic(True)
    f.setForeground(THOUGHT)
    f.setBackground(QColor(123, 104, 238, 40))
    return f


def fold_text(tokens: int | None, forced: bool = False) -> str:
    """The folded span's one line: its length once known (None: still thinking), and a budget's cut."""
    if tokens is None:
        return "[thinking…] "
    cut = ", closed by the budget" if forced else ""
    return f"[thought for {tokens} tokens{cut} — press Thinking to read it] "


def folded_span(steps: Sequence[Step], first: int, ended: bool) -> tuple[int | None, bool]:
    """The think span that starts at step `first`: its length once it has ended (None while it streams), and whether
    a think budget forced it closed."""
    after = [s for s in steps if s.step >= first]
    labels = [s.trace.span if s.trace is not None else "" for s in after]
    end = next((i for i, span in enumerate(labels) if span != "think"), None)
    cut = any(s.trace is not None and s.trace.forced == "budget" for s in after)
    return (None if end is None and not ended else len(labels) if end is None else end), cut


class ThinkFold:
    """Whether the think span is folded, and where the steps shown are in it (what `TokenText.append_steps` asks):
    `place(span)` says whether a step's token is shown, skipped, or starts the folded line."""

    def __init__(self) -> None:
        self.folded = False
        self.inside = False
        self.seen = False  # a step of a think span was shown: the output offers "Thinking"

    def reset(self) -> None:
        self.inside = False
        self.seen = False

    def place(self, span: str) -> str:
        """"show", "skip" (folded, inside the span) or "fold" (folded, the span's first step: its line goes here)."""
        think = span == "think"
        self.seen |= think
        first = think and not self.inside
        self.inside = think
        if not (think and self.folded):
            return "show"
        return "fold" if first else "skip"
