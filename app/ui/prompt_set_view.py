"""The prompt set window: a table of prompts (pasted, typed, or loaded from CSV / JSON Lines), each run under the
window's settings and model, and a table of the results, exported as CSV, JSON Lines or Markdown.

Prompts run one after another through the `Playground` (one request per prompt, N samples of it decoded together),
so every sample is a run of the session; Stop ends the set after the prompt in progress. Every number shown is
`app.core.compare`'s, computed once per prompt when its samples are done; the writers are `app.core.prompt_sets`'s.
The set itself is saved and opened as its own JSON Lines file (Save set… / Load…), not inside the session file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.compare import compare
from app.core.events import Message, Request
from app.core.prompt_sets import (
    PromptResult,
    export_results,
    parse_pasted,
    read_prompt_set,
    write_prompt_set,
)
from app.core.settings import SamplerSettings, SettingsError

if TYPE_CHECKING:
    from app.ui.playground import Playground

MAX_SAMPLES = 16
RESULT_COLUMNS = ("#", "sample", "tokens", "mean logprob", "perplexity", "prompt", "output")
PROMPT, OUTPUT = 5, 6  # the text columns
EXPORT_FILTERS = {"CSV (*.csv)": "csv", "JSON Lines (*.jsonl)": "jsonl", "Markdown (*.md)": "md"}
EMPTY = ("Paste prompts (one per line, or blocks separated by a blank line) and press Add, or Load a CSV / JSON "
         "Lines file; then Run set runs each prompt under the window's settings and model.")


def number(x: float | None, digits: int = 3) -> str:
    """A statistic as the results table shows it ("—": not measured)."""
    return "—" if x is None else "∞" if math.isinf(x) else f"{x:.{digits}f}"


@dataclass
class PromptRun:
    """A prompt of the set being run: its row, its request once started, its samples' results once done."""

    index: int
    prompt: str
    request: Request | None = None
    results: tuple[PromptResult, ...] | None = None


class PromptSetView(QWidget):
    """Paste box, the prompts table (editable), N, Run set / Stop / Export, progress, the results table."""

    failed = Signal(str)  # a line a person can act on (an empty set, a file that cannot be read or written)

    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("Prompt set — Logit Lab")
        self.pg = playground
        self.jobs: list[PromptRun] = []
        self._settings = SamplerSettings()  # the run's: the window's, with one seed for every prompt
        self._running = self._stopping = False
        self.paste = QPlainTextEdit(placeholderText="Paste prompts here: one per line, or blocks separated by a "
                                    "blank line")
        self.add_button = QPushButton("Add", toolTip="Add the pasted prompts to the set")
        self.load_button = QPushButton("Load…", toolTip="Add the prompts of a CSV (a prompt column) or JSON Lines file")
        self.save_button = QPushButton("Save set…", toolTip="Save the prompts as a JSON Lines file (Load reads it)")
        self.new_row_button = QPushButton("New row")
        self.remove_button = QPushButton("Remove rows", toolTip="Remove the selected prompts")
        self.prompts = QTableWidget(0, 1, selectionBehavior=QTableWidget.SelectionBehavior.SelectRows)
        self.count = QSpinBox(minimum=1, maximum=MAX_SAMPLES, value=1, prefix="N = ",
                              toolTip="Samples per prompt, decoded together (sample i with seed + i)")
        self.run_button = QPushButton("Run set")
        self.stop_button = QPushButton("Stop", enabled=False)
        self.export_button = QPushButton("Export…", enabled=False, toolTip="The results as CSV, JSON Lines or "
                                         "Markdown")
        self.status = QLabel(EMPTY, wordWrap=True)
        self.table = QTableWidget(0, len(RESULT_COLUMNS), editTriggers=QTableWidget.EditTrigger.NoEditTriggers,
                                  selectionBehavior=QTableWidget.SelectionBehavior.SelectRows)
        self._layout()
        self._wire()

    def _layout(self) -> None:
        self.prompts.setHorizontalHeaderLabels(["prompt"])
        self.prompts.horizontalHeader().setStretchLastSection(True)
        self.table.setHorizontalHeaderLabels(RESULT_COLUMNS)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setWordWrap(False)
        self.paste.setMaximumHeight(90)
        edit = QHBoxLayout()
        for w in (self.add_button, self.load_button, self.save_button, self.new_row_button, self.remove_button):
            edit.addWidget(w)
        edit.addStretch(1)
        top = QWidget()
        tb = QVBoxLayout(top)
        tb.setContentsMargins(0, 0, 0, 0)
        tb.addWidget(self.paste)
        tb.addLayout(edit)
        tb.addWidget(self.prompts, 1)
        controls = QHBoxLayout()
        for w in (self.count, self.run_button, self.stop_button, self.export_button):
            controls.addWidget(w)
        controls.addStretch(1)
        bottom = QWidget()
        bb = QVBoxLayout(bottom)
        bb.setContentsMargins(0, 0, 0, 0)
        bb.addLayout(controls)
        bb.addWidget(self.status)
        bb.addWidget(self.table, 1)
        split = QSplitter(Qt.Orientation.Vertical, childrenCollapsible=False)
        split.addWidget(top)
        split.addWidget(bottom)
        split.setSizes([260, 340])
        QVBoxLayout(self).addWidget(split)
        self.resize(900, 600)

    def _wire(self) -> None:
        self.add_button.clicked.connect(self.add_pasted)
        self.load_button.clicked.connect(self._choose_load)
        self.save_button.clicked.connect(self._choose_save)
        self.new_row_button.clicked.connect(lambda: self._append([""], edit=True))
        self.remove_button.clicked.connect(self.remove_selected)
        self.run_button.clicked.connect(self.run)
        self.stop_button.clicked.connect(self.stop)
        self.export_button.clicked.connect(self._choose_export)
        self.pg.session_changed.connect(self._score)
        self.pg.busy_changed.connect(lambda busy: None if busy or not self._running else self._start_next())
        self.pg.session_replaced.connect(self._forget)
        self.pg.failed.connect(lambda _message: self._halt())

    # the set ----------------------------------------------------------------------------------------------
    def prompt_list(self) -> list[str]:
        """The set's prompts in table order (an empty row is no prompt)."""
        items = (self.prompts.item(r, 0) for r in range(self.prompts.rowCount()))
        return [it.text() for it in items if it is not None and it.text().strip()]

    def set_prompts(self, prompts: list[str] | tuple[str, ...]) -> None:
        self.prompts.setRowCount(0)
        self._append(prompts)

    def add_pasted(self) -> bool:
        """Add the paste box's prompts to the set and empty it; with nothing in it, say so (False)."""
        try:
            prompts = parse_pasted(self.paste.toPlainText())
        except SettingsError as e:
            return self._refuse(str(e))
        self._append(prompts)
        self.paste.clear()
        return True

    def load(self, path: str) -> bool:
        """Add a file's prompts to the set; a file that cannot be read leaves the set as it was (False)."""
        try:
            prompts = read_prompt_set(path)
        except SettingsError as e:
            return self._refuse(str(e))
        self._append(prompts)
        self.status.setText(f"added {len(prompts)} prompts from {path}")
        return True

    def save_set(self, path: str) -> bool:
        try:
            write_prompt_set(path, self.prompt_list())
        except OSError as e:
            return self._refuse(f"cannot write {path}: {e.strerror or e}")
        return True

    def remove_selected(self) -> None:
        for row in sorted({i.row() for i in self.prompts.selectedIndexes()}, reverse=True):
            self.prompts.removeRow(row)

    def _append(self, prompts: list[str] | tuple[str, ...], edit: bool = False) -> None:
        for p in prompts:
            row = self.prompts.rowCount()
            self.prompts.insertRow(row)
            self.prompts.setItem(row, 0, QTableWidgetItem(p))
        if edit and prompts:
            self.prompts.editItem(self.prompts.item(self.prompts.rowCount() - 1, 0))

    def _refuse(self, message: str) -> bool:
        self.status.setText(message)
        self.failed.emit(message)
        return False

    # running ----------------------------------------------------------------------------------------------
    def run(self) -> bool:
        """Run every prompt of the set under the window's settings (one seed for all); False if it cannot."""
        prompts = self.prompt_list()
        if not prompts:
            return self._refuse("the set is empty: paste prompts and press Add, or Load a file")
        settings = self.pg.checked_settings()
        if settings is None or (self.pg.busy and not self.pg.loading_only):
            return False
        self._settings = settings.with_(seed=self.pg.editing.next_run_seed())
        self.jobs, self._stopping = [PromptRun(i, p) for i, p in enumerate(prompts)], False
        self.table.setRowCount(0)
        self._set_running(True)
        return self._start_next()

    def stop(self) -> None:
        """Stop the prompt in progress; the prompts not started are not run."""
        self._stopping = True
        self.pg.stop()

    def results(self) -> list[PromptResult]:
        """Every finished sample, prompt by prompt, in sample order."""
        return [r for job in self.jobs if job.results for r in job.results]

    def export(self, path: str, kind: str | None = None) -> bool:
        """Write the results (`prompt_sets.export_results`: kind "csv", "jsonl" or "md", else by suffix)."""
        try:
            export_results(path, self.results(), kind)
        except OSError as e:
            return self._refuse(f"cannot write {path}: {e.strerror or e}")
        self.status.setText(f"exported {len(self.results())} results to {path}")
        return True

    def _request(self, prompt: str) -> Request:
        base = self.pg.make_request(self._settings)
        messages = None if base.messages is None else (
            *(m for m in base.messages if m.role == "system"), Message("user", prompt))
        return Request(model=base.model, prompt=prompt, messages=messages, settings=self._settings,
                       top_n=base.top_n, n=self.count.value())

    def _start_next(self) -> bool:
        nxt = next((j for j in self.jobs if j.request is None), None)
        if nxt is None or self._stopping:
            self._set_running(False)
            return False
        nxt.request = self._request(nxt.prompt)
        if not self.pg.generate(nxt.request):
            nxt.request = None
            self._set_running(False)
            return False
        self._progress()
        return True

    def _score(self) -> None:
        """A run finished: if it completes the prompt in progress, take `compare`'s statistics of its samples."""
        job = next((j for j in self.jobs if j.request is not None and j.results is None), None)
        if job is None:
            return
        traces = self.pg.session.finished_traces(job.request.id)
        if traces is None:
            return
        job.results = tuple(PromptResult(job.index, job.prompt, s) for s in compare(traces).samples)
        self._add_rows(job.results)
        self._progress()

    def _halt(self) -> None:
        if self._running:
            self._stopping = True

    def _set_running(self, running: bool) -> None:
        self._running = running
        self.run_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.export_button.setEnabled(not running and bool(self.results()))
        if not running:
            self._progress()

    def _progress(self) -> None:
        if not self.jobs:
            return
        done = sum(j.results is not None for j in self.jobs)
        word = ("done, running the next…" if self._running and not self._stopping
                else "done, stopped" if done < len(self.jobs) else "done")
        self.status.setText(f"{done} of {len(self.jobs)} prompts {word} · {self.count.value()} samples each · "
                            f"temperature {self._settings.temperature:g}, seed {self._settings.seed}")

    def _forget(self) -> None:
        """Another session was opened: its runs are gone, the results with them (the prompts stay)."""
        self.jobs = []
        self.table.setRowCount(0)
        self._set_running(False)
        self.status.setText(EMPTY)

    # drawing ----------------------------------------------------------------------------------------------
    def _add_rows(self, results: tuple[PromptResult, ...]) -> None:
        for r in results:
            s = r.sample
            row = self.table.rowCount()
            self.table.insertRow(row)
            cells = (str(r.index + 1), str(s.sequence + 1), str(s.length), number(s.mean_logprob),
                     number(s.perplexity, 2), r.prompt.replace("\n", "↵"), s.text.replace("\n", "↵"))
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(s.text if col == OUTPUT else r.prompt if col == PROMPT else "")
                if col < PROMPT:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(row, col, item)
        self.table.resizeColumnsToContents()
        self.table.setColumnWidth(PROMPT, min(self.table.columnWidth(PROMPT), 240))
        self.table.horizontalHeader().setStretchLastSection(True)

    def _choose_load(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load prompts", "", "Prompt sets (*.csv *.jsonl *.json);;All (*)")
        if path:
            self.load(path)

    def _choose_save(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the prompt set", "prompts.jsonl", "JSON Lines (*.jsonl)")
        if path:
            self.save_set(path)

    def _choose_export(self) -> None:
        path, chosen = QFileDialog.getSaveFileName(self, "Export the results", "results.csv",
                                                   ";;".join(EXPORT_FILTERS))
        if path:
            self.export(path, EXPORT_FILTERS.get(chosen) if "." not in path.rsplit("/", 1)[-1] else None)
