"""The side-by-side columns once started (or reopened), drawn from their runs in the session: the output aligned by step
(`AlignedTable`), filled as steps arrive; the first divergence marked and said (`side_by_side.first_divergence`); a
column whose model failed says why in its column; one step cursor for all, whose step of the columns that share a
model the charts overlay (`ModelCharts`). It reads the session and draws; starting the columns is the view's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QComboBox, QLabel

from app.core.compare.side_by_side import MAX_COLUMNS, first_divergence, model_groups, overlay, step_keys
from app.ui.charts.overlay_chart import NAMES
from app.ui.tools.side_by_side.aligned_table import AlignedTable
from app.ui.tools.side_by_side.column_model import short_name
from app.ui.tools.side_by_side.model_charts import ModelCharts

if TYPE_CHECKING:
    from app.core.compare.side_by_side import Divergence
    from app.core.models.sources import ModelSpec
    from app.core.session.run_group import RunGroup
    from app.core.session.store import Run
    from app.ui.viewmodel.playground import Playground

EMPTY = "Set each column's settings (and model), then Run side by side: one run per column, streaming together"
DISTRIBUTIONS = {"sampled from": "final", "model (raw)": "raw"}


@dataclass(frozen=True)
class Column:
    """A column once started (or reopened): its run, its label, and its model (None: the window's)."""

    run_id: int
    label: str
    model: ModelSpec | None = None


class ColumnRuns(QObject):
    """The `table`, the `charts`, the `status` line and the chart's `distribution` choice, drawn from `columns`."""

    def __init__(self, playground: Playground, running: Callable[[], bool], parent: QObject | None = None) -> None:
        """`running`: whether the view's columns are running now (the status names the columns still going)."""
        super().__init__(parent)
        self.pg, self._running = playground, running
        self.columns: list[Column] = []
        self.step: int | None = None  # the step cursor (None: the first divergence, else the latest step)
        self.distribution = QComboBox(toolTip="The chart's distribution: what each column sampled from, or the "
                                      "model's own")
        self.distribution.addItems(list(DISTRIBUTIONS))
        self.distribution.currentTextChanged.connect(lambda _t: self.draw_chart())
        self.status = QLabel(EMPTY, wordWrap=True)
        self.table = AlignedTable()
        self.charts = ModelCharts()
        self.table.currentCellChanged.connect(lambda row, _c, _r, _pc: self.select_step(row if row >= 0 else None))

    def show_group(self, group: RunGroup) -> None:
        """Draw `group`'s columns (at most `MAX_COLUMNS`) from their runs' steps so far."""
        self.columns = [Column(c.run_id, c.label, c.model) for c in group.columns[:MAX_COLUMNS]]
        self.step = None
        models = [self.model(c) for c in range(len(self.columns))]
        self.show_models(models, [f"{col.label}\nmodel: {m.label}" for col, m in zip(self.columns, models,
                                                                                     strict=True)])
        self.sync()

    def clear(self) -> None:
        self.columns, self.step = [], None
        self.status.setText(EMPTY)

    def run(self, col: int) -> Run | None:
        return self.pg.session.get(self.columns[col].run_id) if col < len(self.columns) else None

    def model(self, col: int) -> ModelSpec:
        run = self.run(col)
        return run.request.model if run is not None else self.pg.editing.model

    def runs(self) -> list[Run | None]:
        """Each column's run (None: deleted from the session since)."""
        return [self.run(c) for c in range(len(self.columns))]

    def show_models(self, models: list[ModelSpec], tips: list[str] | None = None) -> None:
        """Headers (each column's model named where they differ) and one chart per model."""
        several = len(set(models)) > 1
        self.table.reset([f"{NAMES[c]} · {short_name(m)}" if several else NAMES[c] for c, m in enumerate(models)],
                         tips or [])
        groups = model_groups(models)
        self.charts.set_groups(groups, [short_name(models[g[0]]) if several else "" for g in groups])

    def sync(self) -> None:
        """Append the steps that arrived since the last call (every column), then mark, say and chart."""
        runs = self.runs()
        if not self.columns or any(r is None for r in runs):
            return
        self.table.append([r.steps for r in runs])
        failed = [c for c, r in enumerate(runs) if _failed(r)]
        for c in failed:
            self.table.show_failure(c, runs[c].finished.message)
        compared = [c for c in range(len(runs)) if c not in failed]
        keys = step_keys([runs[c].steps for c in compared], len({self.model(c) for c in compared}) <= 1)
        d = first_divergence(keys, [not runs[c].running for c in compared])
        if d is not None and compared != list(range(len(runs))):  # back to every column, a failed one: None
            tokens = dict(zip(compared, d.tokens, strict=True))
            d = replace(d, tokens=tuple(tokens.get(c) for c in range(len(runs))))
        self.table.mark(d, [not r.running for r in runs])
        self._status(runs, failed)
        self.draw_chart()

    def select_step(self, step: int | None) -> None:
        """Move the one step cursor: the charts show step `step` of every column."""
        if step != self.step:
            self.step = step
            self.draw_chart()

    @property
    def divergence(self) -> Divergence | None:
        """The first divergence marked (None: the columns agree so far)."""
        return self.table.divergence

    def shown_step(self) -> int | None:
        """The step the charts show: the cursor, else the first divergence, else the latest step."""
        if self.step is not None:
            return self.step
        if self.divergence is not None:
            return self.divergence.step
        rows = max(self.table.filled, default=0)
        return rows - 1 if rows else None

    def draw_chart(self) -> None:
        k, runs = self.shown_step(), self.runs()
        if k is None or not self.columns or any(r is None for r in runs):
            self.charts.draw([None] * len(self.charts.groups))
            return
        steps = [r.steps[k] if k < len(r.steps) else None for r in runs]
        how = DISTRIBUTIONS[self.distribution.currentText()]
        self.charts.draw([overlay([steps[c] for c in g], k, how) for g in self.charts.groups])

    def _status(self, runs: list[Run], failed: list[int]) -> None:
        d = self.divergence
        where = "the columns agree so far" if d is None else (
            f"first divergence{'' if d.settled else ' so far'} at step {d.step}: "
            + " · ".join(f"{NAMES[c]} {self._token_text(c, d.step)}" for c in range(len(runs)) if c not in failed))
        running = [NAMES[c] for c, r in enumerate(runs) if r.running]
        more = f" — running {', '.join(running)}" if running and self._running() else ""
        fails = "".join(f" {NAMES[c]} failed: {runs[c].finished.message}." for c in failed)
        self.status.setText(f"{where}{more}.{fails} Click a row for that step's distributions; double-click a cell "
                            "to open its run in the window.")

    def _token_text(self, col: int, step: int) -> str:
        run = self.run(col)
        if run is not None and step < len(run.steps):
            return repr(run.steps[step].text)
        return "(ended)" if run is not None and not run.running else "(not yet)"


def _failed(run: Run) -> bool:
    """A column whose model failed before its first step."""
    return run.finished is not None and run.finished.reason == "error" and not run.steps
