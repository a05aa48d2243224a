"""Run ▸ Beam search…: a dock that runs a beam search on the editing state's prompt and model, draws its tree as it
grows (`BeamTree`) and lists the finished hypotheses best first, each with "Open as run".

The search runs on the model thread (a `beam` job), whose events land in this view's own queue, drained on a
timer: the UI never touches the model. "Open as run" sends the `Playground` a request whose steps are the
hypothesis' recorded steps (`beam_run.open_request`): it becomes a run of the session, in the branch tree, and
forks like any other. Every number shown is the recorded one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDockWidget,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.decoding.beam import (
    MAX_WIDTH,
    BeamFinished,
    BeamSettings,
    BeamStarted,
    BeamStep,
    BeamStepped,
    Candidate,
    Hypothesis,
)
from app.core.events import Failed
from app.core.runs.beam_run import BeamRequest, open_request
from app.core.session.view_records import BeamRecord
from app.core.settings import SettingsError
from app.ui.formatting import format_logprob, visible
from app.ui.tools.beam_tree import BeamTree
from app.ui.viewmodel.model_job import ModelJob

if TYPE_CHECKING:
    from app.core.models.sources import ModelSpec
    from app.ui.viewmodel.playground import Playground

EARLY = {"false: when no beam can do better": False, "true: once width are finished": True,
         "never: judge at max length": "never"}
READY = "Set the beams and press Run: the search runs on the prompt and model of the window."
THINK_BUDGET_REFUSED = ("A think budget runs on plain decoding and samples, not on beam search: set More samplers → "
                        "Think budget to 0 (off), then run the beam search.")
COLUMNS = ("#", "score", "log p", "tokens", "end", "text", "")
STEP_COLUMNS = ("beam", "token", "log p(token)", "cumulative", "fate", "score")


class BeamControls(QWidget):
    """Width, length penalty, early stopping, no-repeat n-gram size, max tokens; Run and Stop."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.width_box = _spin(1, MAX_WIDTH, 4, "Beams kept at each step (1: greedy)")
        self.penalty = QDoubleSpinBox(minimum=-5.0, maximum=5.0, singleStep=0.1, value=1.0, decimals=2)
        self.penalty.setToolTip("Hypotheses are ranked by summed log-probability / length ** this")
        self.early = QComboBox()
        self.early.addItems(list(EARLY))
        self.early.setToolTip("When the search stops (transformers' early_stopping)")
        self.ngram = _spin(0, 10, 0, "Never repeat an n-gram of this size (0: off)")
        self.max_tokens = _spin(1, 512, 24, "Stop every beam after this many tokens")
        self.run, self.stop = QPushButton("Run"), QPushButton("Stop", enabled=False)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for text, w in (("Width", self.width_box), ("Length penalty", self.penalty), ("Early stop", self.early),
                        ("No-repeat n-gram", self.ngram), ("Max tokens", self.max_tokens)):
            row.addWidget(QLabel(text))
            row.addWidget(w)
        row.addStretch(1)
        row.addWidget(self.run)
        row.addWidget(self.stop)

    def settings(self) -> BeamSettings:
        return BeamSettings(self.width_box.value(), self.penalty.value(), EARLY[self.early.currentText()],
                            self.ngram.value(), self.max_tokens.value())

    def set_settings(self, s: BeamSettings) -> None:
        """Show `s` (a reopened search's settings)."""
        self.width_box.setValue(s.width)
        self.penalty.setValue(s.length_penalty)
        self.early.setCurrentText(next(k for k, v in EARLY.items()
                                       if type(v) is type(s.early_stopping) and v == s.early_stopping))
        self.ngram.setValue(s.no_repeat_ngram)
        self.max_tokens.setValue(s.max_tokens)


class BeamView(QDockWidget):
    opened = Signal(int)  # the run id a hypothesis was opened as
    finished = Signal(object)  # BeamFinished

    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__("Beam search", parent)
        self.setObjectName("beam_search")
        self.playground = playground
        self.controls = BeamControls()
        self.tree = BeamTree()
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(header.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(5, header.ResizeMode.Stretch)  # the text takes what is left
        self.step_table = QTableWidget(0, len(STEP_COLUMNS))  # the selected step's candidates: what decided the cut
        self.step_table.setHorizontalHeaderLabels(STEP_COLUMNS)
        self.step_table.verticalHeader().hide()
        self.step_label = QLabel("Click a step in the tree: its candidates, with the scores that decided the cut.")
        self.step_label.setWordWrap(True)
        self.shown_step: int | None = None  # None: follow the latest step
        self.status = QLabel(READY)
        self.status.setWordWrap(True)
        self._build()
        self.job = ModelJob(playground, self)  # the search on the model thread: its queue, drained on a timer
        self._started: BeamStarted | None = None
        self._spec: ModelSpec | None = None
        self._settings: BeamSettings | None = None
        self._texts: dict[int, str] = {}  # token id -> display text, for every token a step named
        self.steps: list[BeamStep] = []  # the records drawn, in order
        self.result: BeamFinished | None = None
        self.job.event.connect(self._on_event)
        self.job.running_changed.connect(self._show_running)
        self.controls.run.clicked.connect(self.run)
        self.controls.stop.clicked.connect(self.stop)
        self.tree.step_clicked.connect(self.show_step)
        playground.session_replaced.connect(self.restore)
        self.restore()

    def _build(self) -> None:
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.tree)
        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.addWidget(self.table)
        step = QWidget()
        col = QVBoxLayout(step)
        col.setContentsMargins(0, 0, 0, 0)
        col.addWidget(self.step_label)
        col.addWidget(self.step_table, 1)
        bottom.addWidget(step)
        bottom.setSizes([600, 400])
        split.addWidget(bottom)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 1)
        split.setSizes([420, 200])  # the tree first: a shortlist of up to 16 rows
        body = QWidget()
        box = QVBoxLayout(body)
        box.addWidget(self.controls)
        box.addWidget(self.status)
        box.addWidget(split, 1)
        self.setWidget(body)

    @property
    def texts(self) -> dict[int, str]:
        return self._texts

    @property
    def running(self) -> bool:
        return self.job.running

    def run(self) -> bool:
        """Start a search on the editing state's prompt and model; False (and why, in the status) if it cannot."""
        if self.running or self.playground.busy:
            self.status.setText("A run is in progress: wait for it, or stop it, then run the beam search.")
            return False
        try:
            settings = self.controls.settings()
        except SettingsError as e:
            self.status.setText(str(e))
            return False
        e = self.playground.editing
        if e.settings.think_budget > 0:  # (each beam would have to force its own closing marker: not done)
            self.status.setText(THINK_BUDGET_REFUSED)
            return False
        # the sampler panel's constraint holds every beam to it, as a plain run; its Think box tells the template
        request = BeamRequest(model=e.model, prompt=e.prompt.text, messages=e.prompt.chat_messages, settings=settings,
                              constraint=e.settings.constraint, think=e.settings.think)
        self._spec = e.model  # the model the search runs on: a hypothesis opens on it, whatever is chosen next
        self._settings = settings
        self._reset()
        self._store(None)
        self.job.start("beam", request)
        self.status.setText("Prefilling the prompt…")
        return True

    def stop(self) -> None:
        self.job.stop()

    def _reset(self) -> None:
        self._started, self.result, self._texts, self.steps, self.shown_step = None, None, {}, [], None
        self.tree.clear()
        self.table.setRowCount(0)

    def _show_running(self, running: bool) -> None:
        self.controls.run.setEnabled(not running)
        self.controls.stop.setEnabled(running)

    def drain(self) -> None:
        """Take every waiting event now (the job's timer does it every few milliseconds)."""
        self.job.drain()

    def _on_event(self, ev: object) -> None:
        """One event of the search: a column per step, the hypotheses at the end."""
        if isinstance(ev, BeamStarted):
            self._started = ev
            self.tree.clear(self._prompt_of(ev))
        elif isinstance(ev, BeamStepped):
            self.steps.append(ev.step)
            self._texts.update(ev.texts)
            self.tree.add_step(ev.step, self._texts)
            if self.shown_step is None:
                self._fill_step(ev.step)
            self.status.setText(f"Step {ev.step.step}: {sum(c.fate == 'kept' for c in ev.step.candidates)}"
                                f" beams live")
        elif isinstance(ev, BeamFinished):
            self._finish(ev)
        elif isinstance(ev, Failed):
            self.status.setText(ev.message)
            self.job.done()

    def show_step(self, i: int) -> None:
        """Pin step i in the candidates table (the tree's click)."""
        if 0 <= i < len(self.steps):
            self.shown_step = i
            self._fill_step(self.steps[i])
            self.tree.mark_step(i)

    def _fill_step(self, step: BeamStep) -> None:
        """Every candidate the step recorded (each live beam's best `shortlist`), best first by cumulative."""
        self.step_label.setText(f"Step {step.step}: {len(step.cumulative)} live beams; the best {step.shortlist} "
                                "extensions over all beams were ranked, the rest pruned")
        self.step_table.setRowCount(len(step.candidates))
        for i, c in enumerate(step.candidates):
            cells = step_cells(c, self._texts.get(c.token, ""))
            for j, cell in enumerate(cells):
                item = QTableWidgetItem(cell)
                if c.fate == "pruned":
                    item.setForeground(Qt.GlobalColor.gray)
                self.step_table.setItem(i, j, item)
        self.step_table.resizeColumnsToContents()

    def _finish(self, ev: BeamFinished) -> None:
        self.job.done()
        self._show_result(ev)
        started, spec, settings = self._started, self._spec, self._settings
        self._store(None if started is None or spec is None or settings is None else
                    BeamRecord(spec, settings, started, tuple(self.steps), dict(self._texts), ev))
        self.finished.emit(ev)

    def _show_result(self, ev: BeamFinished) -> None:
        self.result = ev
        self._fill(ev)
        r = ev.result
        why = {"done": "no live beam could do better", "length": "max tokens reached", "cancelled": "stopped"}
        self.status.setText(f"{len(r.hypotheses)} hypotheses after {r.steps} steps ({why[r.reason]}), best first")

    def _prompt_of(self, started: BeamStarted) -> str:
        """The prompt as the tree's root shows it (its recorded text where no tokenizer is loaded yet)."""
        tokenizer = self.playground.tokenizer
        return tokenizer.decode(started.prompt_ids) if tokenizer is not None else started.prompt_text

    # the session keeps what the view shows ------------------------------------------------------------------
    def _store(self, record: BeamRecord | None) -> None:
        """Keep the search shown in the session (what its file saves); a new one marks the session modified."""
        session = self.playground.session
        if record is not session.views.beam:
            session.views = replace(session.views, beam=record)
            self.playground.session_changed.emit()

    def restore(self) -> None:
        """Draw the session's beam search (a reopened session's) from its records, as its events drew it; or
        nothing."""
        record = self.playground.session.views.beam
        self._reset()
        self.step_table.setRowCount(0)
        if record is None:
            self._spec = self._settings = None
            self.status.setText(READY)
            return
        self._spec, self._settings = record.model, record.settings
        self.controls.set_settings(record.settings)
        self._on_event(record.started)
        for step in record.steps:
            self._on_event(BeamStepped(record.started.request_id, step, record.texts))
        self._show_result(record.finished)

    def _fill(self, ev: BeamFinished) -> None:
        self.table.setRowCount(len(ev.result.hypotheses))
        for i, (h, text) in enumerate(zip(ev.result.hypotheses, ev.texts, strict=True)):
            for j, cell in enumerate(row_cells(i, h, text)):
                self.table.setItem(i, j, QTableWidgetItem(cell))
            button = QPushButton("Open as run")
            can = i < len(ev.runs) and bool(ev.runs[i])
            button.setEnabled(can)
            button.setToolTip("Add it to the session as a run (a branch you can fork)" if can else
                              "a token of it is outside the recorded candidates: it cannot be opened")
            button.clicked.connect(lambda _=False, i=i: self.open(i))
            self.table.setCellWidget(i, len(COLUMNS) - 1, button)

    def open(self, rank: int) -> bool:
        """Open hypothesis `rank` as a run of the session (refused, with why, while a run is in progress)."""
        ev, started = self.result, self._started
        if ev is None or started is None or self._spec is None or rank >= len(ev.runs) or not ev.runs[rank]:
            return False
        request = open_request(started, ev.runs[rank], self._spec)
        if not self.playground.generate(request):
            self.status.setText("A run is in progress: open the hypothesis when it is done.")
            return False
        h = ev.result.hypotheses[rank]
        self.playground.branches.rename(request.id, f"beam #{rank + 1} ({format_logprob(h.score)})")
        self.opened.emit(request.id)
        return True


def row_cells(rank: int, h: Hypothesis, text: str) -> list[str]:
    """A hypothesis' row: rank, score, summed log-probability, length, why it ended, its text."""
    return [str(rank + 1), format_logprob(h.score), format_logprob(h.logprob), str(len(h.tokens)), h.reason,
            text.replace("\n", "↵")]


def step_cells(c: Candidate, text: str) -> list[str]:
    """A candidate's row: the beam it extends, its token, log-probability, cumulative, fate (and next row or score)."""
    fate = f"kept → beam {c.row}" if c.row is not None else c.fate
    score = format_logprob(c.score) if c.score is not None else ""
    return [str(c.beam), visible(text), format_logprob(c.logprob), format_logprob(c.cumulative), fate, score]


def _spin(lo: int, hi: int, value: int, tip: str) -> QSpinBox:
    box = QSpinBox(minimum=lo, maximum=hi, value=value)
    box.setToolTip(tip)
    return box
