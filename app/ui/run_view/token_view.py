"""The generated text, each token's background shaded by the probability it was drawn with.

Tokens are inserted at an end cursor once per frame with a cached character format per shade, so appending
costs the same at token 10,000 as at token 10 (no relayout of the whole text, no per-token selections).
Hovering a token shows its probability, rank and the alternatives; clicking selects its step; right-click
branches from it; Edit (or a double-click) makes the output editable and Ctrl+Enter continues from the edited text
(app/ui/run_view/output_edit.py). It draws the `StepTrace` records it is given and computes no probability itself.
"""

from __future__ import annotations

import bisect
import html
from typing import TYPE_CHECKING

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QColor, QContextMenuEvent, QFont, QMouseEvent, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMenu,
    QSizePolicy,
    QStackedWidget,
    QTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.events import Step
from app.core.record.export import SHADES, shade, shade_rgba
from app.core.session.edits import EDIT
from app.ui.formatting import DIVERGED, INHERITED, format_prob, recorded_prob, visible
from app.ui.run_view.output_edit import OutputEdit
from app.ui.run_view.output_editor import typed_format
from app.ui.run_view.think_fold import ThinkFold, fold_format, fold_text, folded_span, half_shade, think_format
from app.ui.run_view.token_spans import SHADING, Legend, TokenSpans

if TYPE_CHECKING:
    from app.ui.viewmodel.playground import Playground

ALTERNATIVES = 5  # tokens offered by the output's branch menu


class TokenText(TokenSpans):
    step_clicked = Signal(int)
    fork_requested = Signal(int, int)  # step, token: continue with this token from there
    regenerate_requested = Signal(int)  # step: draw again from there, with a new seed
    edit_requested = Signal(int)  # a double-click: edit the output, the cursor at this document position

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setPlaceholderText("Generated tokens appear here, shaded by probability. Press Ctrl+Enter.")
        self._formats = [self._format(i) for i in range(SHADES)]
        self._plain = QTextCharFormat()
        self._end_format = QTextCharFormat()
        self._end_format.setForeground(QColor(128, 128, 128))
        self._end_format.setFontItalic(True)
        self.think = ThinkFold()
        self._fold_format = fold_format()
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
        self._prefix = 0  # characters before the first token: an edit's text, which its prompt holds
        self.shaded_by: set[str] = set()  # which probabilities shade the tokens: "sampled", "model" (drawn_prob)
        self._steps: list[Step] = []  # what was appended, drawn again when the think span folds or unfolds
        self._end: str | None = None
        self._diverged: int | None = None
        self.think.reset()

    def set_branch(self, step: int | None) -> None:
        """Steps before `step` were taken over from the parent: they are drawn muted (None: a root run)."""
        self._branch = step

    def _branch_format(self, fmt: QTextCharFormat, step: int) -> QTextCharFormat:
        if step < self._branch:  # dark grey on its shade faded: read apart from the run's own, and still read
            fmt = QTextCharFormat(fmt)
            fmt.setForeground(INHERITED)
            if fmt.hasProperty(QTextCharFormat.Property.BackgroundBrush):
                fmt.setBackground(half_shade(fmt.background().color()))
        return fmt

    def show_edit(self, text: str, kept: int) -> None:
        """Put an edit's text before the tokens (its prompt after its parent's): its first `kept` characters, the
        parent's tokens it kept, in the inherited grey, the rest in the typed look."""
        plain = QTextCharFormat()
        plain.setForeground(INHERITED)
        cur = QTextCursor(self.document())
        cur.insertText(text[:kept], plain)
        cur.insertText(text[kept:], typed_format())
        n = cur.position()
        self._prefix += n
        self._starts = [s + n for s in self._starts]
        self._last_end += n

    def output_range(self) -> tuple[int, int]:
        """Where the run's own tokens are in the document: after an edit's text, before the end mark."""
        return self._prefix, max(self._prefix, self._last_end)

    def mark_divergence(self, step: int) -> None:
        """The first token that differs from the parent's (or, when that token shows no text of its own, the first
        one after it that does) in bold red with a wave underline, carried on to the next token while it is only
        white space."""
        self._diverged = step
        i = bisect.bisect_left(self._step_of, step)
        if i >= len(self._step_of):
            return
        end = i
        while end + 1 < len(self._step_of) and not self.span_text(end).strip():  # a space alone: a 4-px tick
            end += 1
        cur = QTextCursor(self.document())
        cur.setPosition(self._starts[i])
        cur.setPosition(self.span_end(end), QTextCursor.MoveMode.KeepAnchor)
        fmt = QTextCharFormat()
        fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.WaveUnderline)
        fmt.setUnderlineColor(DIVERGED)
        fmt.setForeground(DIVERGED)
        fmt.setFontWeight(QFont.Weight.Bold)
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
            self._steps.append(s)
            self._insert(cursor, s)
        cursor.endEditBlock()
        if at_bottom:
            bar.setValue(bar.maximum())

    def _insert(self, cursor: QTextCursor, s: Step) -> None:
        """One step's token at `cursor`: shaded by its probability; in the think span italic and muted, or folded
        into the span's one line."""
        span = s.trace.span if s.trace is not None else ""
        place = self.think.place(span)
        if place == "fold":
            self._step_of.append(s.step)  # the folded line stands for the span: its first step
            self.insert_span(cursor, fold_text(*folded_span(self._steps, s.step, self._end is not None)),
                             self._fold_format)
        if place != "show" or not s.text:
            return
        self._step_of.append(s.step)
        p, kind = s.trace.drawn_prob if s.trace is not None else (None, None)  # a server's: under the model
        level = shade(p)
        fmt = self._formats[level] if level is not None else self._plain  # no probability reported
        if kind is not None:
            self.shaded_by.add(kind)
        if self._branch is not None:
            fmt = self._branch_format(fmt, s.step)
        self.insert_span(cursor, s.text, think_format(fmt) if span == "think" else fmt)

    def redraw_steps(self) -> None:
        """The run's tokens drawn again (the think span folded or unfolded; its edit text, end mark, divergence and
        selection kept)."""
        cur = QTextCursor(self.document())
        cur.setPosition(self._prefix)
        cur.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cur.removeSelectedText()
        self._starts, self._step_of, self._last_end = [], [], self._prefix
        self.think.inside = False
        cur.beginEditBlock()
        for s in self._steps:
            self._insert(cur, s)
        cur.endEditBlock()
        if self._end is not None:
            self.mark_end(self._end, again=True)
        if self._diverged is not None:
            self.mark_divergence(self._diverged)
        self.select(self._selected)

    def mark_end(self, reason: str, again: bool = False) -> None:
        self._end = reason
        if self.think.folded and self.think.seen and not again:  # the folded line now says how long the span was
            self.redraw_steps()
            return
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
        from app.core.record.record import model_id  # (numpy's: not before the window's first paint)

        t = self._traces.get(step)
        if t is None:
            return ""
        s = t.sample
        if t.prob is None and t.raw_prob is not None:  # a server's record: it sampled by itself, unobserved
            p = (f"p under the model = <b>{format_prob(t.raw_prob)}</b> "
                 "<span style='color:gray'>(the server's sampling not observed)</span>")
        else:
            p = f"p = <b>{recorded_prob(t.prob)}</b> (model: {recorded_prob(t.raw_prob)})"
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

    def mouseDoubleClickEvent(self, e: QMouseEvent) -> None:  # noqa: N802 - Qt override
        if e.button() == Qt.MouseButton.LeftButton:
            self.edit_requested.emit(self.cursorForPosition(e.position().toPoint()).position())

    def mousePressEvent(self, e: QMouseEvent) -> None:  # noqa: N802 - Qt override
        step = self.step_at(e.position().toPoint())
        if step is not None and e.button() == Qt.MouseButton.LeftButton:
            self.step_clicked.emit(step)
        super().mousePressEvent(e)


class TokenView(QWidget):
    """The token text with its legend above, and the same text made editable (Edit) to continue from."""

    fork_requested = Signal(int, int)  # step, token
    regenerate_requested = Signal(int)  # step

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text = TokenText()
        self.pages = QStackedWidget()  # the text, or while editing the editor (`edit`)
        self.pages.addWidget(self.text)
        self.edit = OutputEdit(self.text, self.pages, self)
        self._pg: Playground | None = None
        self._note_text = ""  # the branch note while not editing
        legend = QHBoxLayout()
        legend.addWidget(QLabel("<b>Output</b>"))
        self.branch_note = QLabel(styleSheet="color: gray")
        self.branch_note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # cut, not widened
        legend.addWidget(self.branch_note, 1)
        self.thinking = QToolButton(text="Thinking", checkable=True, checked=True, visible=False,
                                    toolTip="A thinking model's think span: shown (italic, muted) or folded into "
                                    "one line")
        self.thinking.toggled.connect(self.show_thinking)
        legend.addWidget(self.thinking)
        self.scale = QLabel()  # what the shading is: "p = 0", or under the model (a server's run)
        self.legend = Legend(lambda x: QColor(*shade_rgba(shade(x))[:3]), SHADING[frozenset({"sampled"})][1])
        self._shading: frozenset[str] = frozenset()
        self._name_shading()
        self._scale = (self.scale, self.legend, QLabel("1"))  # hidden while editing: room for the note
        for w in (*self._scale, self.edit.bar):
            legend.addWidget(w)
        self.edit.note.connect(self._edit_note)
        self.edit.editing_changed.connect(self._show_scale)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addLayout(legend)
        box.addWidget(self.pages)

    def bind(self, pg: Playground) -> None:
        """The shown run's text as it streams, its end, the token of the step shown; a click selects a step.
        While the latest step streams by, no token is selected: it moves too fast to follow."""
        t = self.text
        self._pg = pg
        pg.run_started.connect(lambda request: (self.edit.stop(), t.clear_run(),
                                                t.set_branch(pg.branches.branch_step), self._note(request),
                                                self._name_shading()))
        pg.cleared.connect(lambda: (self.edit.stop(), t.clear_run(), t.set_branch(None), self._set_note(""),
                                    self._name_shading()))
        pg.prefilled.connect(self._show_edit)
        self.edit.bind(pg)
        pg.branches.diverged.connect(t.mark_divergence)
        t.fork_requested.connect(self.fork_requested)
        t.regenerate_requested.connect(self.regenerate_requested)
        pg.steps_appended.connect(self.append_steps)
        pg.finished.connect(lambda ev: t.mark_end(ev.reason))
        pg.step_shown.connect(lambda _i, trace: t.select(None if pg.display.following else trace.step))
        pg.preview_changed.connect(lambda _s, trace: t.select(trace.step))
        t.step_clicked.connect(pg.select_step)

    def _show_edit(self, _prefilled: object) -> None:
        """An edit's run shows the text it continues before its tokens (what its prompt holds after its parent's)."""
        edit = self._pg.branches.edited
        if edit is not None:
            self.text.show_edit(*edit)

    def _edit_note(self, text: str) -> None:
        """The editor's note while editing ("": the run's own note again), whole in its tooltip."""
        self.branch_note.setText(text or self._note_text)
        self.branch_note.setToolTip(text or self._note_text)

    def _show_scale(self, editing: bool) -> None:
        for w in self._scale:
            w.setVisible(not editing)

    def append_steps(self, steps: list[Step]) -> None:
        self.text.append_steps(steps)
        self._name_shading()

    def show_thinking(self, shown: bool) -> None:
        """Unfold or fold the think span."""
        if self.text.think.folded == shown:
            self.text.think.folded = not shown
            self.text.redraw_steps()

    def _name_shading(self) -> None:
        """The legend says which probability shades the tokens (a server's run: the model's); set on a change."""
        self.thinking.setVisible(self.text.think.seen)  # (a thinking model's run: its span folds)
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
        if k is None:
            self._set_note("")
        elif kind == EDIT:
            self._set_note(f"edit of run {request.parent[0]} after {k} tokens: grey kept, blue your text (both "
                           "its prompt), shaded the continuation")
        else:
            self._set_note(f"{kind} from step {k}: grey text is its parent's, a wavy underline the first token "
                           "that differs")

    def _set_note(self, text: str) -> None:
        self._note_text = text
        self.branch_note.setText(text)
        self.branch_note.setToolTip(text)

