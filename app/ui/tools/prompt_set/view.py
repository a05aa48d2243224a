"""The prompt set window: a table of prompts (pasted, typed, or loaded from CSV / JSON Lines), run under the
window's settings, the side-by-side view's columns or the sweep's selected cell (`prompt_set_targets`), and a table
of the results, one row per prompt × settings × sample, exported as CSV, JSON Lines or Markdown.

The prompts run one after another through the `Playground`, each as one job of its targets together (one request
per settings, N samples each; those on one model decode in one batch, a column on another model runs beside it),
so every sample is a run of the session; Stop ends the set with the prompt in progress. Every number shown
is `app.core.compare.statistics`'s, computed once per run when its samples are done; the writers are
`app.core.compare.prompt_sets`'s. The set and its last results are part of the session (`Session.prompt_set`: saved in
its file, back on open and in autosave recovery; an edit marks the session modified); Save set… also writes the prompts
alone as a file. The prompts' table is `PromptsTable` (prompts_table.py), the file dialogs are dialogs.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.core.compare.job_plan import PromptRun, PromptSetPlan, Target
from app.core.compare.prompt_sets import (
    PromptResult,
    PromptSet,
    export_results,
    parse_pasted,
    read_prompt_set,
    write_prompt_set,
)
from app.core.compare.statistics import compare
from app.core.settings import SamplerSettings, SettingsError
from app.ui.tools.prompt_set.dialogs import choose_export, choose_load, choose_save
from app.ui.tools.prompt_set.prompts_table import PromptsTable
from app.ui.tools.prompt_set.results_table import PromptResultsTable
from app.ui.tools.prompt_set.targets import (
    COLUMNS,
    SOURCES,
    SWEEP_CELL,
    column_targets,
    sweep_cell_targets,
    window_targets,
)

if TYPE_CHECKING:
    from app.ui.viewmodel.playground import Playground

MAX_SAMPLES = 16
EMPTY = ("Paste prompts (one per line, or blocks separated by a blank line) and press Add, or Load a CSV / JSON "
         "Lines file; then Run set runs each prompt under the settings chosen in “run against”.")


class PromptSetView(QWidget):
    """Paste box, the prompts table (editable), what to run against, N, Run set / Stop / Export, progress, and the
    results table."""

    failed = Signal(str)  # a line a person can act on (an empty set, a file that cannot be read or written)

    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("Prompt set — Logit Lab")
        self.pg = playground
        self._tools: dict[str, Any] = getattr(parent, "tools", {})  # the window's views by name: "side", "sweep"
        self.jobs: list[PromptRun] = []
        self._results: list[PromptResult] = []  # the last run's, in the order they finished (or the session's)
        self.plan = PromptSetPlan()  # the set's runs, prompt after prompt, run by the view-model
        self._running = False
        self._n = 1  # samples per prompt of the run in progress
        self.paste = QPlainTextEdit(placeholderText="Paste prompts here: one per line, or blocks separated by a "
                                    "blank line")
        self.add_button = QPushButton("Add", toolTip="Add the pasted prompts to the set")
        self.load_button = QPushButton("Load…", toolTip="Add the prompts of a CSV (a prompt column) or JSON Lines file")
        self.save_button = QPushButton("Save set…", toolTip="Write the prompts alone as a JSON Lines file (Load reads "
                                       "it); the session keeps the set and its results in any case")
        self.new_row_button = QPushButton("New row")
        self.remove_button = QPushButton("Remove rows", toolTip="Remove the selected prompts")
        self.prompts = PromptsTable()
        self.against = QComboBox(toolTip="The settings each prompt runs under: the sampler panel's, each column of "
                                 "Side by side (as its form holds it), or the cell last clicked in Sweep")
        self.against.addItems(list(SOURCES))
        self.count = QSpinBox(minimum=1, maximum=MAX_SAMPLES, value=1, prefix="N = ",
                              toolTip="Samples per prompt and settings, decoded together (sample i with seed + i)")
        self.run_button = QPushButton("Run set")
        self.stop_button = QPushButton("Stop", enabled=False)
        self.export_button = QPushButton("Export…", enabled=False, toolTip="The results as CSV, JSON Lines or "
                                         "Markdown")
        self.status = QLabel(EMPTY, wordWrap=True)
        self.table = PromptResultsTable()
        self._layout()
        self._wire()
        self._restore()

    def _layout(self) -> None:
        self.paste.setMaximumHeight(72)
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
        for w in (QLabel("run against"), self.against, self.count, self.run_button, self.stop_button,
                  self.export_button):
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
        split.setSizes([240, 360])
        split.setStretchFactor(1, 1)  # a taller window gives its height to the results
        QVBoxLayout(self).addWidget(split)
        self.resize(900, 600)

    def _wire(self) -> None:
        self.add_button.clicked.connect(self.add_pasted)
        self.load_button.clicked.connect(lambda: choose_load(self))
        self.save_button.clicked.connect(lambda: choose_save(self))
        self.new_row_button.clicked.connect(lambda: self.prompts.append([""], edit=True))
        self.remove_button.clicked.connect(self.prompts.remove_selected)
        self.prompts.edited.connect(self._store)
        self.against.currentTextChanged.connect(lambda _t: self._describe_against())
        self.run_button.clicked.connect(self.run)
        self.stop_button.clicked.connect(self.stop)
        self.export_button.clicked.connect(lambda: choose_export(self))
        self.pg.session_changed.connect(self._score)
        self.pg.plan_ended.connect(lambda plan: None if plan is not self.plan else self._set_running(False))
        self.pg.session_replaced.connect(self._restore)

    # the set ----------------------------------------------------------------------------------------------
    def prompt_list(self) -> list[str]:
        """The set's prompts in table order (an empty row is no prompt)."""
        return self.prompts.prompts()

    def set_prompts(self, prompts: list[str] | tuple[str, ...]) -> None:
        self.prompts.fill(prompts, clear=True)
        self._store()

    def add_pasted(self) -> bool:
        """Add the paste box's prompts to the set and empty it; with nothing in it, say so (False)."""
        try:
            prompts = parse_pasted(self.paste.toPlainText())
        except SettingsError as e:
            return self._refuse(str(e))
        self.prompts.append(prompts)
        self.paste.clear()
        return True

    def load(self, path: str) -> bool:
        """Add a file's prompts to the set; a file that cannot be read leaves the set as it was (False)."""
        try:
            prompts = read_prompt_set(path)
        except SettingsError as e:
            return self._refuse(str(e))
        self.prompts.append(prompts)
        self.status.setText(f"added {len(prompts)} prompts from {path}")
        return True

    def save_set(self, path: str) -> bool:
        """Write the prompts alone as their own JSON Lines file (an export: the session keeps the set anyway)."""
        try:
            write_prompt_set(path, self.prompt_list())
        except OSError as e:
            return self._refuse(f"cannot write {path}: {e.strerror or e}")
        return True

    def _store(self) -> None:
        """Keep the set and its results in the session (what its file saves); a change marks it modified."""
        prompts, results = tuple(self.prompt_list()), tuple(self._results)
        kept = PromptSet(prompts, results) if prompts or results else None
        if kept != self.pg.session.prompt_set:
            self.pg.session.prompt_set = kept
            self.pg.session_changed.emit()

    def _restore(self) -> None:
        """Show the session's set and its last results (on opening, and when another session replaces it)."""
        kept = self.pg.session.prompt_set or PromptSet()
        self.jobs, self._results = [], list(kept.results)
        self._set_running(False)
        self.prompts.fill(kept.prompts, clear=True)
        self.table.show_results(self._results)
        self.export_button.setEnabled(bool(self._results))
        self.status.setText(f"{len(self._results)} results of the set's last run, as the session saved them"
                            if self._results else EMPTY)

    def _refuse(self, message: str) -> bool:
        self.status.setText(message)
        self.failed.emit(message)
        return False

    # running ----------------------------------------------------------------------------------------------
    def run(self) -> bool:
        """Run every prompt of the set under each target settings ("run against"); False if it cannot."""
        prompts = self.prompt_list()
        if not prompts:
            return self._refuse("the set is empty: paste prompts and press Add, or Load a file")
        base = self.pg.checked_settings()
        if base is None:
            return False
        if self.pg.busy and not self.pg.loading_only:
            return self._refuse("a run is in progress: wait for it, or Stop it, then Run set")
        try:
            targets = self.targets(base)
        except SettingsError as e:
            return self._refuse(str(e))
        self.jobs = [PromptRun(i, p, t) for i, p in enumerate(prompts) for t in targets]
        self._results, self._n = [], self.count.value()
        self.plan = PromptSetPlan(self.jobs, self.pg.make_request(base), self._n)
        self.table.show_results([])
        self._store()
        started = self.pg.run_plan(self.plan)
        self._set_running(started)
        self._progress()
        return started

    def targets(self, base: SamplerSettings) -> list[Target]:
        """The settings the set runs under, as "run against" says, over the panel's `base` (SettingsError: none)."""
        source, views = self.against.currentText(), {name: getattr(t, "view", None) for name, t in self._tools.items()}
        if source == COLUMNS:
            return column_targets(views.get("side"), base, self.pg.editing.model)
        if source == SWEEP_CELL:
            return sweep_cell_targets(views.get("sweep"))
        return window_targets(base.with_(seed=self.pg.editing.next_run_seed()))

    def stop(self) -> None:
        """Stop the run in progress; the runs not started are not run."""
        self.plan.stop()
        self.pg.stop()

    def results(self) -> list[PromptResult]:
        """The last run's results, prompt by prompt, settings by settings, in sample order."""
        return list(self._results)

    def export(self, path: str, kind: str | None = None) -> bool:
        """Write the results (`prompt_sets.export_results`: kind "csv", "jsonl" or "md", else by suffix)."""
        try:
            export_results(path, self._results, kind)
        except OSError as e:
            return self._refuse(f"cannot write {path}: {e.strerror or e}")
        self.status.setText(f"exported {len(self._results)} results to {path}")
        return True

    def _describe_against(self) -> None:
        """Say what the chosen settings are now (or why there are none yet)."""
        if self._running:
            return
        source = self.against.currentText()
        if source not in (COLUMNS, SWEEP_CELL):
            self.status.setText("runs against the sampler panel's settings (its seed, or a new one unless locked)")
            return
        try:
            self.status.setText("runs against " + " · ".join(t.label for t in self.targets(self.pg.editing.settings)))
        except SettingsError as e:
            self.status.setText(str(e))

    def _score(self) -> None:
        """Runs finished: take `compare`'s statistics of each job whose samples have all ended, in the set's order
        (prompt by prompt, target by target)."""
        for job in (j for j in self.jobs if j.request is not None and j.results is None):
            traces = self.pg.session.finished_traces(job.request.id)
            if traces is None:
                return
            job.results = tuple(PromptResult(job.index, job.prompt, job.target.label, s)
                                for s in compare(traces).samples)
            self._results.extend(job.results)
            self.table.add(job.results)
            self._progress()
            self._store()

    def _set_running(self, running: bool) -> None:
        self._running = running
        self.run_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.against.setEnabled(not running)
        self.export_button.setEnabled(not running and bool(self._results))
        if not running:
            self._progress()

    def _progress(self) -> None:
        if not self.jobs:
            return
        done = sum(j.results is not None for j in self.jobs)
        word = ("done, running the next…" if self._running and not self.plan.stopped
                else "done, stopped" if done < len(self.jobs) else "done")
        prompts, targets = len({j.index for j in self.jobs}), list(dict.fromkeys(j.target.label for j in self.jobs))
        self.status.setText(f"{done} of {len(self.jobs)} runs {word} · {prompts} prompts × {len(targets)} settings · "
                            f"{self._n} samples each · against {' · '.join(targets)}")
