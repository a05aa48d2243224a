"""File → Export: the step chart and the run timeline as PNG or SVG (pyqtgraph's exporters, over the whole scene so
the timeline's second axis comes along), the shown run's output as Markdown or HTML with its probability shading,
its trace as JSON Lines or CSV (a row per step or per candidate). The texts come from the core
(app/core/record/export.py), drawn from the recorded trace; every file is written atomically; a problem is one `failed`
line.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QBuffer, QIODevice, QObject, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QMenu, QWidget

from app.core.files import write_atomic
from app.core.record import export
from app.ui.charts.chart_host import ChartHost

if TYPE_CHECKING:
    from app.core.record.trace import RunTrace
    from app.ui.viewmodel.playground import Playground

PNG_SCALE = 2  # pixels per screen pixel: a crisp picture for slides and papers


@dataclass(frozen=True)
class Kind:
    key: str
    label: str
    suffix: str
    filter: str
    chart: str | None = None  # which chart, for pictures


KINDS = (
    Kind("step_png", "Step chart as PNG…", ".png", "PNG image (*.png)", "step"),
    Kind("step_svg", "Step chart as SVG…", ".svg", "SVG image (*.svg)", "step"),
    Kind("timeline_png", "Timeline as PNG…", ".png", "PNG image (*.png)", "timeline"),
    Kind("timeline_svg", "Timeline as SVG…", ".svg", "SVG image (*.svg)", "timeline"),
    Kind("markdown", "Output as Markdown…", ".md", "Markdown (*.md)"),
    Kind("html", "Output as HTML…", ".html", "HTML page (*.html)"),
    Kind("jsonl", "Trace as JSON Lines…", ".jsonl", "Logit Lab trace (*.jsonl)"),
    Kind("steps_csv", "Trace as CSV, a row per step…", ".csv", "CSV (*.csv)"),
    Kind("candidates_csv", "Trace as CSV, a row per candidate…", ".csv", "CSV (*.csv)"),
)
KIND = {k.key: k for k in KINDS}
TEXTS: dict[str, Callable[[RunTrace], str]] = {"markdown": export.to_markdown, "html": export.to_html,
                                                "steps_csv": export.steps_csv,
                                                "candidates_csv": export.candidates_csv}


def chart_png(plot: QWidget) -> bytes:
    """A pyqtgraph chart as PNG bytes."""
    from pyqtgraph.exporters import ImageExporter  # pyqtgraph: imported on use, never before the first paint

    exporter = ImageExporter(plot.scene())
    exporter.parameters()["width"] = int(exporter.parameters()["width"] * PNG_SCALE)
    image = exporter.export(toBytes=True)
    buf = QBuffer()
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buf, "PNG")
    return bytes(buf.data())


def chart_svg(plot: QWidget) -> bytes:
    from pyqtgraph.exporters import SVGExporter

    with _closed_paths_accepted(SVGExporter):
        return SVGExporter(plot.scene()).export(toBytes=True)


@contextlib.contextmanager
def _closed_paths_accepted(exporter: type) -> Iterator[None]:
    """pyqtgraph 0.14's SVG exporter cannot parse a closed path ("... L0,0 Z", which Qt 6 writes for every view
    box: pyqtgraph issue #3495). While exporting, drop the "Z" of paths that already end where they start (the
    same drawing) before pyqtgraph rewrites their coordinates."""
    module = sys.modules[exporter.__module__]
    original = module.correctCoordinates

    def correct(node: Any, defs: Any, item: Any, options: Any) -> Any:
        for path in node.getElementsByTagName("path"):
            d = path.getAttribute("d")
            if " Z" in d:
                path.setAttribute("d", " ".join(t for t in d.split() if t != "Z"))
        return original(node, defs, item, options)

    module.correctCoordinates = correct
    try:
        yield
    finally:
        module.correctCoordinates = original


def ask_save(parent: QWidget, title: str, name: str, filters: str) -> str | None:
    return QFileDialog.getSaveFileName(parent, title, str(Path.home() / name), filters)[0] or None


class Exporter(QObject):
    """The export actions of a window: each asks for a file name, then writes what the view-model shows."""

    failed = Signal(str)
    written = Signal(str)  # the path

    def __init__(self, parent: QWidget, playground: Playground, charts: dict[str, ChartHost]) -> None:
        super().__init__(parent)
        self.playground = playground
        self.charts = charts
        # (title, suggested name, filter) -> path, None when cancelled; replaceable (tests answer it)
        self.ask_save: Callable[[str, str, str], str | None] = lambda *a: ask_save(parent, *a)
        self.actions = {k.key: QAction(k.label, self) for k in KINDS}
        for key, action in self.actions.items():
            action.triggered.connect(lambda _=False, key=key: self.ask_and_export(key))

    def add_to(self, menu: QMenu) -> None:
        """The actions in `menu` (pictures, output, trace), enabled for what there is to export."""
        for k in KINDS:
            if k.key in ("markdown", "jsonl"):  # each group after the pictures: the output, the trace
                menu.addSeparator()
            menu.addAction(self.actions[k.key])
        menu.aboutToShow.connect(self.enable)

    def enable(self) -> None:
        has_run = self.playground.trace is not None
        for k in KINDS:
            self.actions[k.key].setEnabled(bool(self.playground.steps) if k.chart else has_run)

    def ask_and_export(self, key: str) -> None:
        kind = KIND[key]
        trace = self.playground.trace
        if self._nothing(kind):
            return
        name = f"logitlab-run{trace.run_id if trace is not None else ''}{kind.suffix}"
        path = self.ask_save(kind.label.rstrip("…"), name, kind.filter)
        if path:
            self.export(key, path if path.endswith(kind.suffix) else path + kind.suffix)

    def export(self, key: str, path: str) -> bool:
        """Write export `key` to `path`; False (and one `failed` line) when there is nothing or it fails."""
        kind = KIND[key]
        trace = self.playground.trace
        if self._nothing(kind):
            return False
        try:
            self._write(kind, path, trace)
        except OSError as e:
            self.failed.emit(f"Could not write {path}: {e.strerror or e}")
            return False
        self.written.emit(path)
        return True

    def _nothing(self, kind: Kind) -> bool:
        """Nothing to export of this kind yet (then one `failed` line says so)."""
        if kind.chart is None and self.playground.trace is None:
            self.failed.emit("Nothing to export yet: the output and the trace are there once a run has finished.")
            return True
        return False

    def _write(self, kind: Kind, path: str, trace: RunTrace | None) -> None:
        if kind.chart is not None:
            plot = self.charts[kind.chart].chart
            write_atomic(path, chart_png(plot) if kind.suffix == ".png" else chart_svg(plot))
        elif kind.key == "jsonl":
            trace.save(path)
        else:
            write_atomic(path, TEXTS[kind.key](trace))
