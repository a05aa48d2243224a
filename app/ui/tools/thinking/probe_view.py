"""Run ▸ Think probes…: a dock that probes the shown run of a thinking model — every K think tokens (and at the selected
step), its think span closed and the answer read — on the model thread (a `think_probes` job, `decoding.probes`),
and draws the answer's probability over thinking time (`probe_chart`). A click on a probe opens it as a run of the
session: the run's text up to there and the closing marker, continued as an edit of it (a child in the branch tree).
The probes drawn are kept in the session (`view_records.ProbesRecord`) and drawn again when it is reopened.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.decoding.probes import Probed, ProbeRequest, ProbesDone, ThinkProbe
from app.core.events import Failed
from app.core.record.spans import find_markers
from app.core.session.view_records import ProbesRecord
from app.ui.formatting import format_prob, visible
from app.ui.tools.thinking.probe_chart import ProbeChart
from app.ui.viewmodel.model_job import ModelJob

if TYPE_CHECKING:
    from app.ui.viewmodel.playground import Playground

EVERY = 16  # think tokens between probes, at first
READY = "Show a thinking model's run, then Probe: the answer it would give if it stopped thinking there."


def answers_of(text: str) -> tuple[str, ...]:
    """The answers box: comma-separated, each stripped; empty ones left out."""
    return tuple(a.strip() for a in text.split(",") if a.strip())


class ThinkProbeView(QDockWidget):
    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__("Think probes", parent)
        self.setObjectName("think_probes")
        self.playground = playground
        self.every = QSpinBox(minimum=1, maximum=4096, value=EVERY, suffix=" think tokens",
                              toolTip="A probe every this many tokens of the think span (and one where it closed)")
        self.answers = QLineEdit(placeholderText="answers, e.g. 85, 86, 75 (empty: the first answer token)",
                                 toolTip="Each answer is scored whole (its tokens' log-probability), renormalized "
                                 "over the list; without a list the chart follows the likeliest first tokens")
        self.run = QPushButton("Probe the run", toolTip="Probe the shown run's think span")
        self.here = QPushButton("Probe the selected step", toolTip="Close the span at the selected step and read "
                                "the answer there (beside the run's other probes)")
        self.stop = QPushButton("Stop", enabled=False)
        self.status = QLabel(READY, wordWrap=True)
        self.summary = QLabel(wordWrap=True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.chart = ProbeChart()
        self._build()
        self.probes: dict[int, ThinkProbe] = {}  # by step
        self.run_id: int | None = None  # the run probed
        self.job = ModelJob(playground, self)
        self.job.event.connect(self._on_event)
        self.job.running_changed.connect(self._show_running)
        self.run.clicked.connect(lambda: self.probe())
        self.here.clicked.connect(self.probe_selected)
        self.stop.clicked.connect(self.job.stop)
        self.chart.probe_clicked.connect(self.open_probe)
        playground.session_replaced.connect(self.restore)
        self.restore()

    def _build(self) -> None:
        row = QHBoxLayout()
        row.addWidget(QLabel("Every"))
        row.addWidget(self.every)
        row.addWidget(self.answers, 1)
        for b in (self.run, self.here, self.stop):
            row.addWidget(b)
        body = QWidget()
        box = QVBoxLayout(body)
        box.addLayout(row)
        box.addWidget(self.status)
        box.addWidget(self.chart, 1)
        box.addWidget(self.summary)
        self.setWidget(body)

    def probe(self, at: tuple[int, ...] = (), every: int | None = None) -> bool:
        """Probe the shown run (every `every` think tokens, the dock's by default; and the steps `at`); False, and
        why in the status, where it cannot start now."""
        pg = self.playground
        run = pg.editing.run
        if run is None or run.trace is None:
            self.status.setText("Show a finished run of a thinking model first.")
            return False
        if self.job.running or (pg.busy and not pg.loading_only):
            self.status.setText("A run is in progress: wait for it, or stop it, then probe.")
            return False
        trace = run.trace
        if run.id != self.run_id:
            self.probes, self.run_id = {}, run.id
        request = ProbeRequest(model=run.request.model, prompt_ids=tuple(trace.prompt_ids),
                               tokens=tuple(trace.token_ids), every=self.every.value() if every is None else every,
                               at=at, answers=answers_of(self.answers.text()), markers=trace.settings.think_markers,
                               run_id=run.id)
        self.job.start("think_probes", request)
        self.status.setText(f"Probing run {run.id}…")
        return True

    def probe_selected(self) -> bool:
        step = self.playground.editing.step
        if step is None:
            self.status.setText("Select a step of the think span (click a token or the timeline), then probe it.")
            return False
        return self.probe(at=(step,), every=0)

    def _show_running(self, running: bool) -> None:
        for b in (self.run, self.here):
            b.setEnabled(not running)
        self.stop.setEnabled(running)

    def _on_event(self, ev: object) -> None:
        if isinstance(ev, Probed):
            self.probes[ev.probe.step] = ev.probe
            self.status.setText(f"Probed {len(self.probes)} point(s) of run {ev.run_id}…")
            self._draw()
        elif isinstance(ev, ProbesDone):
            self.job.done()
            self._draw(done=ev)
            self._store()
        elif isinstance(ev, Failed):
            self.job.done()
            self.status.setText(ev.message)

    def _shown(self) -> list[ThinkProbe]:
        """The probes drawn, in step order: of one answer list, the latest job's."""
        probes = [self.probes[s] for s in sorted(self.probes)]
        if probes and probes[0].answers != probes[-1].answers:  # another list: only the latest job's probes
            probes = [p for p in probes if p.answers == probes[-1].answers]
        return probes

    def _store(self) -> None:
        """Keep the probes drawn in the session (what its file saves); new probes mark it modified."""
        pg = self.playground
        record = ProbesRecord(self.run_id or 0, self.every.value(), self.answers.text(), tuple(self._shown()))
        pg.session.views = replace(pg.session.views, probes=record if record.probes else None)
        pg.session_changed.emit()

    def restore(self) -> None:
        """Draw the session's probes (a reopened session's), or none."""
        if self.job.running:
            return
        record = self.playground.session.views.probes
        self.probes, self.run_id = {}, None
        if record is None:
            self.chart.show_probes([], self._text)
            self.summary.setText("")
            self.status.setText(READY)
            return
        self.every.setValue(record.every)
        self.answers.setText(record.answers)
        self.probes, self.run_id = {p.step: p for p in record.probes}, record.run_id or None
        self._draw()
        run = f"run {record.run_id}" if record.run_id else "a run no longer in the session"
        self.status.setText(f"{len(record.probes)} probes of {run}: click a point to open that probe as a run.")

    def _draw(self, done: ProbesDone | None = None) -> None:
        from app.core.decoding.probes import changed_at, settled_at

        probes = self._shown()
        changed, settled = changed_at(probes), settled_at(probes)
        self.chart.show_probes(probes, self._text, changed, settled)
        if done is not None:
            cut = " (stopped)" if done.cancelled else ""
            self.status.setText(f"{len(probes)} probes of run {done.run_id}{cut}: click a point to open that probe "
                                "as a run.")
        self.summary.setText(self.words(probes, changed, settled))

    def words(self, probes: list[ThinkProbe], changed: tuple[int, ...], settled: int | None) -> str:
        """What the probes say: the answer it ends with, from when, and where it changed its mind."""
        if not probes:
            return ""
        last = probes[-1]
        lead = last.leading if isinstance(last.leading, str) else visible(self._text(last.leading))
        p = float(last.answer_probs.max()) if last.answers else float(last.first_prob(int(last.top_ids[0])) or 0)
        at = {q.step: q.think_tokens for q in probes}
        mind = ", ".join(str(at[s]) for s in changed) or "never"
        since = f"; led from {at[settled]} think tokens on" if settled is not None else ""
        return (f"At the end of thinking it answers <b>{lead}</b> ({format_prob(p)}){since}. Changed its mind at "
                f"{mind} think tokens.")

    def _text(self, token: int) -> str:
        tok = self.playground.tokenizer
        return tok.token_text(token) if tok is not None else f"#{token}"

    def open_probe(self, step: int) -> bool:
        """Open the probe at `step` as a run: the shown run's text before it and the closing marker (and what the
        template writes before the answer), continued as an edit."""
        pg = self.playground
        run, tok = pg.session.get(self.run_id) if self.run_id is not None else None, pg.tokenizer
        if run is None or run.trace is None or tok is None:
            self.status.setText("The run probed is gone, or the model is not loaded: probe it again.")
            return False
        markers = find_markers(tok, run.trace.settings.think_markers)
        if markers is None:
            return False
        text = "".join(s.text for s in run.trace.steps[:step]) + "".join(tok.token_text(t) for t in markers.closing)
        if pg.editing.run is not run:
            pg.show_run(run.id)
        return pg.branches.continue_edit(text)
