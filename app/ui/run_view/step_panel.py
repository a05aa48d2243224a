"""The step panel: a header naming the step shown, a strip of what each stage kept, and the step chart under it,
bound to the view-model.

It draws the step the view-model says is shown (`step_shown`) and previews under other settings
(`preview_changed`); header, strip and chart always come from the same record. No maths of its own.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QMenu, QSizePolicy, QToolButton, QVBoxLayout, QWidget

from app.core.remote.server_constraint import NOT_OBSERVED
from app.ui.charts.chart_host import ChartHost
from app.ui.formatting import EMPTY, format_prob, stage_strip, visible

if TYPE_CHECKING:
    from app.core.record.trace import Sample, StepTrace
    from app.core.sampler.step_view import Preview, StageKept
    from app.ui.viewmodel.playground import Playground

IDLE = "<b>Next-token distribution</b>"
GRAMMAR_COLOUR = "#6a4c93"
BEFORE_STEPS = 12  # how many steps' text a grammar cut is said to follow
INSIDE = (("lens", "Logit lens", "Each layer's top tokens at this step, through the model's final norm and head"),
          ("attention", "Attention", "Where this step looked: each layer's and head's weights over the context"))


def _visible(text: str) -> str:
    return html.escape(visible(text))


def _stages_kept(s: Sample) -> list[StageKept]:
    from app.core.sampler import step_view  # numpy's import: not before the window's first paint (a step comes after)

    return step_view.stages_kept(s)


def _token(trace: StepTrace, token: int) -> str:
    """A token of the step as the record names it: its text where it is the drawn one or among the recorded
    candidates, else its id."""
    ids = trace.sample.top_ids[: len(trace.top_texts)].tolist()
    if token == trace.token_id:
        return f"<code>{_visible(trace.text)}</code>"
    return f"<code>{_visible(trace.top_texts[ids.index(token)])}</code>" if token in ids else f"token #{token}"


def grammar_line(trace: StepTrace, constrained: bool = False) -> str:
    """What the constraint's grammar did at the step, from its record (`Sample.grammar`): the legal count, the mass
    it removed, the model's favourite and its fate, the best legal token and the log-probability margin, forced.
    `constrained`: the run had a constraint but the step no grammar record (a server applied it, unobserved)."""
    g = trace.sample.grammar
    if g is None:
        return f"grammar: {NOT_OBSERVED}" if constrained else ""
    if g.forced:
        return f"grammar: forced, {_token(trace, g.best)} the only legal token"
    parts = [f"grammar{' (on reject)' if g.place == 'on_reject' else ''}: {g.legal:,} legal"]
    if g.removed is not None:
        parts.append(f"removed {format_prob(g.removed)} of the probability")
    if g.favourite_kept:
        parts.append(f"the favourite {_token(trace, g.favourite)} allowed")
    else:
        parts.append(f"the favourite {_token(trace, g.favourite)} cut; best legal {_token(trace, g.best)}, "
                     f"log-prob margin {g.margin:.2f}")
    if g.place == "on_reject":
        parts.append(f"drew {_token(trace, g.rejected)}, refused: redrawn under the grammar" if g.rejected is not None
                     else "the draw was legal: no mask applied")
    return " · ".join(parts)


def _approximate(p: Preview) -> str:
    """What of a preview the unrecorded tail would change, in a line."""
    if not p.approximate:
        return "exact: the recorded logits hold all of the model's probability"  # (a small vocabulary)
    rows = ", ".join(r.replace("_", "-") for r in p.approximate)  # RAW_ROW reads as it is
    return (f"≈ approximate: {rows} (from the {len(p.sample.top_ids)} recorded logits, "
            f"{format_prob(p.recorded_mass)} of the mass)")


class StepPanel(QWidget):
    fork_requested = Signal(int, int)  # step, token: a bar was clicked, "Continue with ⟨token⟩ from here"
    regenerate_requested = Signal(int)  # step
    inside_requested = Signal(str)  # "lens" or "attention": look inside the model at the step shown (the tools')
    look_ahead_requested = Signal(int)  # step: the multiverse from there (the tool's)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.trace: StepTrace | None = None  # the step shown (a preview shows the same step's candidates)
        self.title = QLabel(IDLE)
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # cut, not widened
        self.log = QCheckBox("log scale", checked=True, toolTip="Probabilities on a log axis, so the tail and the "
                             "cut lines of top-k and min-p read; off: a linear 0–1 axis")
        self.strip = QLabel("", wordWrap=True, textFormat=Qt.TextFormat.PlainText,
                            toolTip="Each stage in order: how many tokens of the vocabulary it kept and the share of "
                            "its input's probability they hold (where all of them are among the recorded candidates)")
        self.strip.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.strip.setStyleSheet("color: gray")
        small = self.strip.font()
        small.setPointSizeF(max(6.0, small.pointSizeF() * 0.85))
        self.strip.setFont(small)
        self.grammar = QLabel("", wordWrap=True, visible=False, toolTip="What the constraint's grammar did at this "
                              "step: how many tokens it allowed, the probability it removed, the model's favourite "
                              "and its fate, the best legal token and how much less likely it was (log-prob margin)")
        self.grammar.setObjectName("grammar_line")
        self.grammar.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.grammar.setFont(small)
        self.grammar.setStyleSheet(f"color: {GRAMMAR_COLOUR}")
        self._pg: Playground | None = None
        self.chart = ChartHost("StepChart")  # a step_chart.StepChart, built after the window's first paint
        self.chart.built.connect(self._chart_built)
        self.log.toggled.connect(lambda on: self.chart.chart.set_log(on) if self.chart.is_built else None)
        head = QHBoxLayout()
        head.addWidget(self.title, 1)
        for kind, text, tip in INSIDE:
            button = QToolButton(text=text, toolTip=tip, autoRaise=True)
            button.clicked.connect(lambda _=False, k=kind: self.inside_requested.emit(k))
            head.addWidget(button)
        head.addWidget(self.log)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(1)
        box.addLayout(head)
        box.addWidget(self.strip)
        box.addWidget(self.grammar)
        box.addWidget(self.chart, 1)

    def _chart_built(self, chart: QWidget) -> None:
        chart.scene().sigMouseClicked.connect(self._clicked)
        chart.hint = "Click a candidate's bars to continue the run with it from this step"
        chart.set_log(self.log.isChecked())

    def bind(self, pg: Playground) -> None:
        self._pg = pg
        pg.run_started.connect(lambda _request: self.clear())
        pg.cleared.connect(lambda: self.clear(EMPTY))
        pg.step_shown.connect(self.show_step)
        pg.preview_changed.connect(self.preview)

    def clear(self, note: str = "waiting for the first token…") -> None:
        self.chart.chart.clear_step(note)
        self.title.setText(IDLE)
        self.strip.setText("")
        self.grammar.hide()
        self.trace = None

    def bar_menu(self, i: int) -> QMenu | None:
        """The menu for candidate i of the step shown: continue with it from here, or regenerate from here."""
        t = self.trace
        if t is None or i >= min(t.top_n, len(t.top_texts)):
            return None
        menu = QMenu(self)
        token = int(t.sample.top_ids[i])
        label = f"Continue with “{visible(t.top_texts[i])}” from step {t.step}"
        go = menu.addAction(label, lambda: self.fork_requested.emit(t.step, token))
        go.setEnabled(token != t.token_id)
        menu.addAction(f"Regenerate from step {t.step} (new seed)", lambda: self.regenerate_requested.emit(t.step))
        menu.addAction(f"Look ahead from step {t.step} (multiverse)…", lambda: self.look_ahead_requested.emit(t.step))
        menu.addSeparator()
        for kind, text, _tip in INSIDE:
            menu.addAction(f"{text} at step {t.step}…", lambda k=kind: self.inside_requested.emit(k))
        return menu

    def _clicked(self, ev: object) -> None:
        if self.trace is None or ev.button() != Qt.MouseButton.LeftButton:
            return
        x = self.chart.chart.getPlotItem().vb.mapSceneToView(ev.scenePos()).x()
        i = round(x) if math.isfinite(x) else -1
        if i >= 0 and (menu := self.bar_menu(i)) is not None:
            menu.popup(ev.screenPos().toPoint())

    def show_step(self, _i: int, trace: StepTrace) -> None:
        self.trace = trace
        s = trace.sample
        self.chart.chart.show_sample(s, trace.top_texts, drawn_text=trace.text, before=self._before(trace))
        line = grammar_line(trace, self._constrained())
        self.grammar.setText(line)
        self.grammar.setVisible(bool(line))
        self.strip.setText(stage_strip(_stages_kept(s)) if not s.is_partial else "")
        drew = f"<b>Step {trace.step}</b> — drew <code>{_visible(trace.text)}</code>"
        p, kind = trace.drawn_prob
        rank = "" if s.rank is None else f", rank {s.rank}"
        if s.is_taken:  # a beam run's step: the token the beam took, with its probability under the model
            self.strip.setText("beam search: the model's distribution, no sampler stage ran")
            self.title.setText(f"<b>Step {trace.step}</b> — the beam took <code>{_visible(trace.text)}</code> "
                               f"with p under the model = {format_prob(p)}{rank}")
            return
        if kind == "model":  # a server's record: the model's probability; the server's sampling not observed
            self.title.setText(f"{drew} with p under the model = {format_prob(p)}{rank} "
                               "<span style='color:gray'>(the server's sampling not observed)</span>")
            return
        model = "not reported" if trace.raw_prob is None else f"{format_prob(trace.raw_prob)}{rank}"
        self.title.setText(f"{drew} with p = {'?' if p is None else format_prob(p)} (model: {model})")

    def _constrained(self) -> bool:
        """The run shown was asked for a constraint (whether or not its steps could record the grammar)."""
        run = self._pg.shown if self._pg is not None else None
        return run is not None and run.request.settings.constraint is not None

    def _before(self, trace: StepTrace) -> str:
        """The recorded text the run had generated before the step (what the grammar's cut follows)."""
        steps = self._pg.steps if self._pg is not None else []
        return "".join(st.text for st in steps[max(0, trace.step - BEFORE_STEPS): trace.step])

    def preview(self, preview: Preview | None, trace: StepTrace) -> None:
        """Step `trace` re-sampled under the panel's settings (`preview`; None: the same as recorded)."""
        if preview is None:
            self.show_step(trace.step, trace)
            return
        sample = preview.sample
        ids = sample.top_ids[: len(trace.top_texts)].tolist()
        text = trace.top_texts[ids.index(sample.token)] if sample.token in ids else f"token {sample.token}"
        self.chart.chart.show_sample(sample, trace.top_texts, drawn_text=text)
        self.strip.setText(f"{stage_strip(_stages_kept(sample), preview.approximate)}\n{_approximate(preview)}")
        self.title.setText(f"<b>Step {trace.step}, re-sampled with the panel's settings</b> — would draw "
                           f"<code>{_visible(text)}</code> with p = {format_prob(sample.prob)}")
