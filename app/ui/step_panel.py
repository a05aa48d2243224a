"""The step panel: a header naming the step shown and the step chart under it, bound to the view-model.

It draws the step the view-model says is shown (`step_shown`) and previews under other settings
(`preview_changed`); header and chart always come from the same record. No maths of its own.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QMenu, QSizePolicy, QVBoxLayout, QWidget

from app.ui.chart_host import ChartHost
from app.ui.formatting import EMPTY, format_prob, visible

if TYPE_CHECKING:
    from app.core.sampling import Sample
    from app.core.trace import StepTrace
    from app.ui.playground import Playground

IDLE = "<b>Next-token distribution</b>"


def _visible(text: str) -> str:
    return html.escape(visible(text))


class StepPanel(QWidget):
    fork_requested = Signal(int, int)  # step, token: a bar was clicked, "Continue with ⟨token⟩ from here"
    regenerate_requested = Signal(int)  # step

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.trace: StepTrace | None = None  # the step shown (a preview shows the same step's candidates)
        self.title = QLabel(IDLE)
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # cut, not widened
        self.chart = ChartHost("StepChart")  # a step_chart.StepChart, built after the window's first paint
        self.chart.built.connect(self._chart_built)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.title)
        box.addWidget(self.chart, 1)

    def _chart_built(self, chart: QWidget) -> None:
        chart.scene().sigMouseClicked.connect(self._clicked)
        chart.hint = "Click a candidate's bars to continue the run with it from this step"

    def bind(self, pg: Playground) -> None:
        pg.run_started.connect(lambda _request: self.clear())
        pg.cleared.connect(lambda: self.clear(EMPTY))
        pg.step_shown.connect(self.show_step)
        pg.preview_changed.connect(self.preview)

    def clear(self, note: str = "waiting for the first token…") -> None:
        self.chart.chart.clear_step(note)
        self.title.setText(IDLE)
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
        self.chart.chart.show_sample(s, trace.top_texts)
        drew = f"<b>Step {trace.step}</b> — drew <code>{_visible(trace.text)}</code>"
        p, kind = trace.drawn_prob
        if kind == "model":  # a server's record: the model's probability; the server's sampling not observed
            rank = "" if s.rank is None else f", rank {s.rank}"
            self.title.setText(f"{drew} with p under the model = {format_prob(p)}{rank} "
                               "<span style='color:gray'>(the server's sampling not observed)</span>")
            return
        model = "not reported" if trace.raw_prob is None else f"{trace.raw_prob:.3f}, rank {s.rank}"
        self.title.setText(f"{drew} with p = {'?' if p is None else f'{p:.3f}'} (model: {model})")

    def preview(self, sample: Sample | None, trace: StepTrace) -> None:
        """Step `trace` re-sampled under the panel's settings (`sample`; None: the same as recorded)."""
        if sample is None:
            self.show_step(trace.step, trace)
            return
        self.chart.chart.show_sample(sample, trace.top_texts)
        ids = sample.top_ids[: len(trace.top_texts)].tolist()
        text = _visible(trace.top_texts[ids.index(sample.token)]) if sample.token in ids else f"token {sample.token}"
        self.title.setText(f"<b>Step {trace.step}, re-sampled with the panel's settings</b> — would draw "
                           f"<code>{text}</code> with p = {sample.prob:.3f}")
