"""Hosts that stand in for the pyqtgraph charts (app/ui/charts.py) until they are built: just after the window's
first paint, or at their first use if that comes sooner. Importing pyqtgraph costs 0.15–0.4 s of CPU (its Qt shim
makes PySide6 build every lazy class), which the window's first paint no longer waits for.

Until built, a host is a plain area of the charts' background colour; `host.chart` is the chart (reading it
builds it). Connections made before the chart exists go to the host: its `bind` and its forwarded signals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QPaintEvent, QPalette
from PySide6.QtWidgets import QVBoxLayout, QWidget

if TYPE_CHECKING:
    from app.ui.playground import Playground


SERIES = {"both": "p + entropy", "prob": "p(drawn)", "entropy": "entropy"}  # what the timeline draws


class ChartHost(QWidget):
    """Holds the chart `charts.<chart_class>(**kwargs)`, made on demand."""

    built = Signal(QWidget)  # the chart, just made

    def __init__(self, chart_class: str, parent: QWidget | None = None, **kwargs: object) -> None:
        super().__init__(parent)
        self._chart: QWidget | None = None
        self._recipe = (chart_class, kwargs)
        self._scheduled = False
        self.setAutoFillBackground(True)
        self.setBackgroundRole(QPalette.ColorRole.Base)  # the charts' own background (charts._themed)
        QVBoxLayout(self).setContentsMargins(0, 0, 0, 0)

    @property
    def is_built(self) -> bool:
        return self._chart is not None

    @property
    def chart(self) -> QWidget:
        """The chart; made now if it was not yet."""
        if self._chart is None:
            from app.ui import charts  # pyqtgraph's import: here, after the first paint or at the first use

            name, kwargs = self._recipe
            self._chart = getattr(charts, name)(**kwargs)
            self.layout().addWidget(self._chart)
            self.built.emit(self._chart)
        return self._chart

    def paintEvent(self, e: QPaintEvent) -> None:  # noqa: N802 - Qt override
        """The first paint is the window's: build right after it (a zero timer runs once the paint is done)."""
        super().paintEvent(e)
        if self._chart is None and not self._scheduled:
            self._scheduled = True
            QTimer.singleShot(0, self, self._build)

    def _build(self) -> None:
        self.chart  # noqa: B018 - the property builds it


class TimelineHost(ChartHost):
    """The run timeline (`charts.TimelineChart`): bound to the view-model from the start, so a run shown before the
    chart is built builds it and is drawn."""

    step_clicked = Signal(int)
    uncertain_clicked = Signal(int)  # step

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("TimelineChart", parent)
        self._series = "both"
        self.built.connect(self._forward)

    def set_uncertain_above(self, nats: float | None) -> None:
        """`charts.TimelineChart.set_uncertain_above` (builds the chart)."""
        self.chart.set_uncertain_above(nats)

    def show_series(self, which: str) -> None:
        """`charts.TimelineChart.show_series`, kept until the chart is built (choosing it builds nothing)."""
        self._series = which
        if self.is_built:
            self.chart.show_series(which)

    def _forward(self, chart: QWidget) -> None:
        chart.step_clicked.connect(self.step_clicked)
        chart.uncertain_clicked.connect(self.uncertain_clicked)
        chart.show_series(self._series)

    def bind(self, playground: Playground) -> None:
        """The shown run's steps, redrawn with the cursor whenever the view-model shows a step (at most 10 times
        a second while streaming); a click selects a step."""
        playground.run_started.connect(lambda _request: self.chart.clear_run())
        playground.cleared.connect(lambda: self.chart.clear_run())
        playground.steps_appended.connect(lambda steps: self.chart.append_steps(steps))
        playground.step_shown.connect(lambda i, trace: self.chart.show_step(i, trace, playground.streaming))
        playground.preview_changed.connect(lambda _s, trace: self.chart.set_cursor(trace.step))
        playground.diverged.connect(lambda step: self.chart.mark_divergence(step))
        self.step_clicked.connect(playground.select_step)
