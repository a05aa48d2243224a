"""The generated text, each token's background shaded by the probability it was drawn with; and the prompt
shaded by its surprisal (how unlikely the model found each of its tokens).

Tokens are inserted at an end cursor once per frame with a cached character format per shade, so appending
costs the same at token 10,000 as at token 10 (no relayout of the whole text, no per-token selections).
Hovering a token shows its probability, rank and the alternatives; clicking selects its step. `TokenSpans`
(spans, hit-testing, hover tooltips) is shared with the prompt editor's token boundaries and surprisal view.
Both views draw the records they are given (`StepTrace`, `PromptScore`) and compute no probability themselves.
"""

from __future__ import annotations

import bisect
import html
import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QContextMenuEvent,
    QLinearGradient,
    QMouseEvent,
    QPainter,
    QTextCharFormat,
    QTextCursor,
)
from PySide6.QtWidgets import QHBoxLayout, QLabel, QMenu, QSizePolicy, QTextEdit, QToolTip, QVBoxLayout, QWidget

from app.core.events import Step
from app.core.export import SHADES, shade, shade_rgba
from app.core.surprisal import PromptScore
from app.core.trace import model_id

if TYPE_CHECKING:
    from app.ui.playground import Playground

ALTERNATIVES = 5  # tokens offered by the output's branch menu
DIVERGED = QColor(200, 60, 40)  # the mark of the first token a branch drew differently from its parent
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


def format_prob(p: float) -> str:
    """A probability as people read it: 0.412, 0.0035, 3.1e-06."""
    return f"{p:.3f}" if p >= 0.01 else f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def format_logprob(logprob: float) -> str:
    return f"{logprob:.2f}".replace("-", "−")


def shown_piece(text: str) -> str:
    """A prompt token as the surprisal view lays it out: line breaks get a visible ↵ to carry their shade."""
    return text.replace("\n", "↵\n") or "∅"


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


class TokenText(TokenSpans):
    step_clicked = Signal(int)
    fork_requested = Signal(int, int)  # step, token: continue with this token from there
    regenerate_requested = Signal(int)  # step: draw again from there, with a new seed

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setPlaceholderText("Generated tokens appear here, shaded by probability. Press Ctrl+Enter.")
        self._formats = [self._format(i) for i in range(SHADES)]
        self._plain = QTextCharFormat()
        self._end_format = QTextCharFormat()
        self._end_format.setForeground(QColor(128, 128, 128))
        self._end_format.setFontItalic(True)
        self.clear_run()

    def _format(self, level: int) -> QTextCharFormat:
        """A token's look at one of the shades the exports use too (red, unlikely, to green, likely)."""
        f = QTextCharFormat()
        f.setBackground(QColor(*shade_rgba(level)))
        return f

    def clear_run(self) -> None:
        self.clear_spans()
        self._step_of: list[int] = []  # the step index of each shown token
        self._traces: dict[int, object] = {}
        self._selected: int | None = None
        self._branch: int | None = None  # the step where this run left its parent: the steps before are its
        self.shaded_by: set[str] = set()  # which probabilities shade the tokens: "sampled", "model" (drawn_prob)

    def set_branch(self, step: int | None) -> None:
        """Steps before `step` were taken over from the parent: they are drawn muted (None: a root run)."""
        self._branch = step

    def _branch_format(self, fmt: QTextCharFormat, step: int, token: int) -> QTextCharFormat:
        if step < self._branch:
            fmt = QTextCharFormat(fmt)
            fmt.setForeground(QColor(128, 128, 128))
        return fmt

    def mark_divergence(self, step: int) -> None:
        """A wave underline under the first token that differs from the parent's (or, when that token shows no
        text of its own, under the first one after it that does)."""
        i = bisect.bisect_left(self._step_of, step)
        if i >= len(self._step_of):
            return
        cur = QTextCursor(self.document())
        cur.setPosition(self._starts[i])
        cur.setPosition(self.span_end(i), QTextCursor.MoveMode.KeepAnchor)
        fmt = QTextCharFormat()
        fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.WaveUnderline)
        fmt.setUnderlineColor(DIVERGED)
        cur.mergeCharFormat(fmt)

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
            p, kind = s.trace.drawn_prob if s.trace is not None else (None, None)  # a server's: under the model
            level = shade(p)
            fmt = self._formats[level] if level is not None else self._plain  # no probability reported
            if kind is not None:
                self.shaded_by.add(kind)
            if self._branch is not None:
                fmt = self._branch_format(fmt, s.step, s.token_id)
            self.insert_span(cursor, s.text, fmt)
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
        s = t.sample
        if t.prob is None and t.raw_prob is not None:  # a server's record: it sampled by itself, unobserved
            p = (f"p under the model = <b>{format_prob(t.raw_prob)}</b> "
                 "<span style='color:gray'>(the server's sampling not observed)</span>")
        else:
            p = f"p = <b>{_prob(t.prob)}</b> (model: {_prob(t.raw_prob)})"
        rank = "not reported" if s.rank is None else f"{s.rank}"
        entropy = "not reported" if s.entropy is None else f"{s.entropy:.2f} nats"
        named = f"token {t.token_id} " if model_id(t.token_id) is not None else "token "
        rows = [f"<b>step {step}</b> · {named}<code>{html.escape(visible(t.text))}</code>", p,
                f"rank {rank} · entropy {entropy}", "<i>alternatives (model probability):</i>"]
        for i, rp in enumerate(t.raw_top_probs(6)):
            mark = "▶ " if int(s.top_ids[i]) == t.token_id else ""
            cut = t.cut_by(i)
            rows.append(f"{mark}<code>{html.escape(visible(t.top_texts[i]))}</code> {format_prob(rp)}"
                        + (f" <span style='color:gray'>cut by {cut}</span>" if cut else ""))
        rows.append("<i>Right-click to continue with another token from here</i>")
        return "<br>".join(rows)

    def branch_menu(self, step: int, menu: QMenu) -> None:
        """Add the branch actions for `step` to `menu`: its top alternatives, then "Regenerate from here"."""
        t = self._traces.get(step)
        if t is None:
            return
        for i, rp in enumerate(t.raw_top_probs(ALTERNATIVES + 1)):
            token = int(t.sample.top_ids[i])
            if token != t.token_id:
                label = f"Continue with “{visible(t.top_texts[i])}” from here  ({format_prob(rp)})"
                menu.addAction(label, lambda token=token: self.fork_requested.emit(step, token))
        menu.addAction("Regenerate from here (new seed)", lambda: self.regenerate_requested.emit(step))

    def contextMenuEvent(self, e: QContextMenuEvent) -> None:  # noqa: N802 - Qt override
        menu = self.createStandardContextMenu(e.pos())
        step = self.step_at(e.pos())
        if step is not None and step in self._traces:
            first = menu.actions()[0] if menu.actions() else None
            branch = QMenu(self)
            self.branch_menu(step, branch)
            for a in branch.actions():
                menu.insertAction(first, a)
            menu.insertSeparator(first)
        menu.exec(e.globalPos())

    def mousePressEvent(self, e: QMouseEvent) -> None:  # noqa: N802 - Qt override
        step = self.step_at(e.position().toPoint())
        if step is not None and e.button() == Qt.MouseButton.LeftButton:
            self.step_clicked.emit(step)
        super().mousePressEvent(e)


SHADING = {  # what shades the output's tokens (TokenText.shaded_by): the legend's label and tooltip
    frozenset({"sampled"}): ("p = 0", "Background shade = probability of the drawn token in the final distribution"),
    frozenset({"model"}): ("p under the model = 0", "Background shade = the drawn token's probability under the "
                           "model, as the server reported it: the server samples by itself, and the distribution "
                           "it drew from was not observed"),
    frozenset({"sampled", "model"}): ("p (or under the model) = 0", "Background shade = probability of the drawn "
                                      "token in the final distribution; under the model for the steps a server "
                                      "drew, whose sampling was not observed"),
}


class Legend(QWidget):
    """A gradient bar: the shade each value gets. `color(x)` for x in 0..1, drawn over the text's background
    so translucent shades look as they do behind the text."""

    def __init__(self, color: Callable[[float], QColor] = lambda x: QColor(*shade_rgba(shade(x))[:3]),
                 tip: str = SHADING[frozenset({"sampled"})][1],
                 width: int = 140, parent: QWidget | None = None) -> None:
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


class TokenView(QWidget):
    """The token text with its legend above."""

    fork_requested = Signal(int, int)  # step, token
    regenerate_requested = Signal(int)  # step

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text = TokenText()
        legend = QHBoxLayout()
        legend.addWidget(QLabel("<b>Output</b>"))
        self.branch_note = QLabel(styleSheet="color: gray")
        self.branch_note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # cut, not widened
        legend.addWidget(self.branch_note, 1)
        self.scale = QLabel()  # what the shading is: "p = 0", or under the model (a server's run)
        self.legend = Legend()
        self._shading: frozenset[str] = frozenset()
        self._name_shading()
        for w in (self.scale, self.legend, QLabel("1")):
            legend.addWidget(w)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addLayout(legend)
        box.addWidget(self.text)

    def bind(self, pg: Playground) -> None:
        """The shown run's text as it streams, its end, the token of the step shown; a click selects a step.
        While the latest step streams by, no token is selected: it moves too fast to follow."""
        t = self.text
        pg.run_started.connect(lambda request: (t.clear_run(), t.set_branch(pg.branch_step), self._note(request),
                                                self._name_shading()))
        pg.cleared.connect(lambda: (t.clear_run(), t.set_branch(None), self.branch_note.setText(""),
                                    self._name_shading()))
        pg.diverged.connect(t.mark_divergence)
        t.fork_requested.connect(self.fork_requested)
        t.regenerate_requested.connect(self.regenerate_requested)
        pg.steps_appended.connect(self.append_steps)
        pg.finished.connect(lambda ev: t.mark_end(ev.reason))
        pg.step_shown.connect(lambda _i, trace: t.select(None if pg.following else trace.step))
        pg.preview_changed.connect(lambda _s, trace: t.select(trace.step))
        t.step_clicked.connect(pg.select_step)

    def append_steps(self, steps: list[Step]) -> None:
        self.text.append_steps(steps)
        self._name_shading()

    def _name_shading(self) -> None:
        """The legend says which probability shades the tokens (a server's run: the model's); set on a change."""
        shading = frozenset(self.text.shaded_by) or frozenset({"sampled"})
        if shading != self._shading:
            self._shading = shading
            label, tip = SHADING[shading]
            self.scale.setText(label)
            for w in (self.scale, self.legend):
                w.setToolTip(tip)

    def _note(self, request: object) -> None:
        """Where the shown branch left its parent, and what the marks mean."""
        k = request.parent[1] if request.parent is not None else None
        kind = request.branch or "branch"
        self.branch_note.setText("" if k is None else f"{kind} from step {k}: grey text is its parent's, a wavy "
                                 "underline the first token that differs")
        self.branch_note.setToolTip(self.branch_note.text())


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
    What it is waiting for (a model, a prompt) is the empty text's placeholder."""

    EMPTY = "Each prompt token, shaded by how surprising the model finds it."

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


def _prob(x: float | None) -> str:
    """A recorded probability, or a dash where the backend could not observe it (a server's partial trace)."""
    return "—" if x is None else format_prob(x)
