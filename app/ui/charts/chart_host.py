"""Hosts that stand in for a widget until it is built (`LazyHost`): the pyqtgraph charts (app/ui/charts/step_chart.py,
app/ui/charts/timeline.py) just after the window's first paint, parts hidden at start (the Chat tab, the prompt's
surprisal and tokens) when first shown; either at their first use if that comes sooner. Importing pyqtgraph costs
0.15–0.4 s of CPU (its Qt shim makes PySide6 build every lazy class), which the window's first paint no longer waits
for.

Until built, a chart's host is a plain area of the charts' background colour; `host.chart` is the chart (reading
it builds it). Connections made before the chart exists go to the host: its `bind` and its forwarded signals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, QTimer, Signal
from PySide6.QtGui import QPaintEvent, QPalette, QShowEvent
from PySide6.QtWidgets import QVBoxLayout, QWidget

if TYPE_CHECKING:
    from app.ui.viewmodel.playground import Playground


SERIES = {"both": "p + entropy", "prob": "p(drawn)", "entropy": "entropy"}  # what the timeline draws


class LazyHost(QWidget):
    """Holds the widget `make()` returns, made on demand: at its first use (`host.widget`), or else when the host is
    first shown (`when="shown"`: a hidden part of the window, made as it appears, before it is painted) or just after
    its first paint (`when="painted"`: the window paints without it, and the loop builds it right after). `after`: a
    widget whose first paint also builds it right after (a hidden tab, whose size still counts in its tab widget's
    minimum size once the window is up)."""

    built = Signal(QWidget)  # the widget, just made

    def __init__(self, make: Callable[[], QWidget], parent: QWidget | None = None, when: str = "shown",
                 after: QWidget | None = None) -> None:
        super().__init__(parent)
        self._widget: QWidget | None = None
        self._make, self._when = make, when
        self._scheduled = False
        QVBoxLayout(self).setContentsMargins(0, 0, 0, 0)
        if after is not None:
            after.installEventFilter(self)

    @property
    def is_built(self) -> bool:
        return self._widget is not None

    @property
    def widget(self) -> QWidget:
        """The widget; made now if it was not yet."""
        if self._widget is None:
            self._widget = self._make()
            self.layout().addWidget(self._widget)
            if self.isHidden() and self.parentWidget() is not None:  # a hidden tab's size counts: tell the layouts
                self.parentWidget().updateGeometry()
            self.built.emit(self._widget)
        return self._widget

    def setVisible(self, visible: bool) -> None:  # noqa: N802 - Qt override
        """Shown (a tab made current, a hidden part toggled on): built first, so it appears, and paints, with it."""
        if visible and self._when == "shown":
            self._build()
        super().setVisible(visible)

    def showEvent(self, e: QShowEvent) -> None:  # noqa: N802 - Qt override
        """Shown along with its parent, never hidden itself: built now, and shown at once."""
        if self._when == "shown" and self._widget is None:
            self.widget.show()
        super().showEvent(e)

    def paintEvent(self, e: QPaintEvent) -> None:  # noqa: N802 - Qt override
        """The first paint is the window's: build right after it (a zero timer runs once the paint is done)."""
        super().paintEvent(e)
        if self._when == "painted":
            self._build_soon()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.Paint:  # `after`'s first paint
            watched.removeEventFilter(self)
            self._build_soon()
        return False

    def _build_soon(self) -> None:
        if self._widget is None and not self._scheduled:
            self._scheduled = True
            QTimer.singleShot(0, self, self._build)

    def _build(self) -> None:
        self.widget  # noqa: B018 - the property builds it


class ChartHost(LazyHost):
    """Holds the chart `<chart_class>(**kwargs)` (`step_chart.StepChart` or `timeline.TimelineChart`), made on demand
    (after the first paint, or at first use)."""

    def __init__(self, chart_class: str, parent: QWidget | None = None, **kwargs: object) -> None:
        super().__init__(lambda: _chart(chart_class, kwargs), parent, when="painted")
        self.setAutoFillBackground(True)
        self.setBackgroundRole(QPalette.ColorRole.Base)  # the charts' own background (charts._themed)

    @property
    def chart(self) -> QWidget:
        """The chart; made now if it was not yet."""
        return self.widget


def _chart(name: str, kwargs: dict[str, object]) -> QWidget:
    from app.ui.charts import (
        step_chart,
        timeline,  # pyqtgraph's import: here, after the first paint or at the first use
    )

    return getattr({"StepChart": step_chart, "TimelineChart": timeline}[name], name)(**kwargs)


class TimelineHost(ChartHost):
    """The run timeline (`timeline.TimelineChart`): bound to the view-model from the start, so a run shown before the
    chart is built builds it and is drawn."""

    step_clicked = Signal(int)
    uncertain_clicked = Signal(int)  # step

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("TimelineChart", parent)
        self._series = "both"
        self.built.connect(self._forward)

    def set_uncertain_above(self, nats: float | None) -> None:
        """`timeline.TimelineChart.set_uncertain_above` (builds the chart)."""
        self.chart.set_uncertain_above(nats)

    def show_series(self, which: str) -> None:
        """`timeline.TimelineChart.show_series`, kept until the chart is built (choosing it builds nothing)."""
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
        playground.step_shown.connect(lambda i, trace: self.chart.show_step(i, trace, playground.display.streaming))
        playground.preview_changed.connect(lambda _s, trace: self.chart.set_cursor(trace.step))
        playground.branches.diverged.connect(lambda step: self.chart.mark_divergence(step))
        self.step_clicked.connect(playground.select_step)
