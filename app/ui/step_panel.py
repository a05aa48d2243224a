"""The step panel: a header naming the step shown and the step chart under it, bound to the view-model.

It draws the step the view-model says is shown (`step_shown`) and previews under other settings
(`preview_changed`); header and chart always come from the same record. No maths of its own.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.core.sampling import Sample
from app.core.trace import StepTrace
from app.ui.charts import StepChart
from app.ui.token_view import visible

if TYPE_CHECKING:
    from app.ui.playground import Playground

IDLE = "<b>Next-token distribution</b>"


def _visible(text: str) -> str:
    return html.escape(visible(text))


class StepPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel(IDLE)
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # cut, not widened
        self.chart = StepChart()
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.title)
        box.addWidget(self.chart, 1)

    def bind(self, pg: Playground) -> None:
        pg.run_started.connect(lambda _request: self.clear())
        pg.step_shown.connect(self.show_step)
        pg.preview_changed.connect(self.preview)

    def clear(self) -> None:
        self.chart.clear_step("waiting for the first token…")
        self.title.setText(IDLE)

    def show_step(self, _i: int, trace: StepTrace) -> None:
        s = trace.sample
        self.chart.show_sample(s, trace.top_texts)
        p = "?" if s.prob is None else f"{s.prob:.3f}"
        model = "not reported" if trace.raw_prob is None else f"{trace.raw_prob:.3f}, rank {s.rank}"
        self.title.setText(f"<b>Step {trace.step}</b> — drew <code>{_visible(trace.text)}</code> "
                           f"with p = {p} (model: {model})")

    def preview(self, sample: Sample | None, trace: StepTrace) -> None:
        """Step `trace` re-sampled under the panel's settings (`sample`; None: the same as recorded)."""
        if sample is None:
            self.show_step(trace.step, trace)
            return
        self.chart.show_sample(sample, trace.top_texts)
        ids = sample.top_ids[: len(trace.top_texts)].tolist()
        text = _visible(trace.top_texts[ids.index(sample.token)]) if sample.token in ids else f"token {sample.token}"
        self.title.setText(f"<b>Step {trace.step}, re-sampled with the panel's settings</b> — would draw "
                           f"<code>{text}</code> with p = {sample.prob:.3f}")
