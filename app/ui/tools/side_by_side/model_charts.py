"""The side-by-side charts: one `OverlayChart` per model, stacked, each overlaying the step of the columns on that
model (in their colours), under a title naming the model and its columns.

Why one chart per model and not one for all: a token id is a model's own (two models' vocabularies need not
agree, and even where they do, "the same candidate" across two models' distributions is a comparison of models,
not of settings); overlaying bars by id across models would pair unrelated tokens. One model's columns share their
candidates, so their bars stand side by side per token, as the issue asks. Draws what it is given.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.core.compare.side_by_side import MAX_COLUMNS, Overlay
from app.ui.charts.overlay_chart import NAMES, OverlayChart


class ModelCharts(QWidget):
    """Up to one chart per column (one per model in use); `chart_of(c)` is column c's."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.charts = [OverlayChart() for _ in range(MAX_COLUMNS)]
        self.titles = [QLabel() for _ in range(MAX_COLUMNS)]
        self.groups: list[tuple[int, ...]] = [(0, 1)]
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(2)
        for title, chart in zip(self.titles, self.charts, strict=True):
            title.setStyleSheet("font-weight: bold")
            box.addWidget(title)
            box.addWidget(chart, 1)
        self.set_groups([tuple(range(2))], [""])

    def set_groups(self, groups: Sequence[tuple[int, ...]], names: Sequence[str]) -> None:
        """The columns by model (`side_by_side.model_groups`) and each model's name ("": no title, one model)."""
        self.groups = list(groups)
        for g, (title, chart) in enumerate(zip(self.titles, self.charts, strict=True)):
            shown = g < len(self.groups)
            chart.setVisible(shown)
            title.setVisible(shown and bool(names[g] if shown else ""))
            if shown:
                cols = self.groups[g]
                title.setText(f"{names[g]} — column{'s' * (len(cols) > 1)} {', '.join(NAMES[c] for c in cols)}")
                chart.show_overlay(None, self.groups[g])

    def draw(self, overlays: Sequence[Overlay | None]) -> None:
        """Draw group g's overlay (None: empty axes) in chart g."""
        for g, o in enumerate(overlays):
            self.charts[g].show_overlay(o, self.groups[g])

    def chart_of(self, column: int) -> OverlayChart:
        return self.charts[next(g for g, cols in enumerate(self.groups) if column in cols)]
