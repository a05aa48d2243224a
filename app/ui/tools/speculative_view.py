"""Run ▸ Speculative decoding…: a dock that runs the prompt with a draft model proposing k tokens per round and
the window's model verifying them, and shows every round as the core recorded it.

One row per draft token: accepted (green) or rejected (red), with the draft's and the target's probability of
it; then one row for the token the target drew itself (blue): from the residual after a rejection, or a bonus
after all were kept, or a plain step (pale blue: an adaptive run measuring one, or paused where drafting does not
pay); then the drafts discarded after a rejection (grey: never judged, no step of the run). A summary line gives
the acceptance rate, tokens per target forward, why drafting is paused if it is and, at the end, the speed
against plain decoding of the same target (timed in the same request).
The run is a run of the session (its tokens stream into the output like any run), named after its draft and k;
the dock sends the request through the `Playground` and draws its `Drafted` / `Speculated` events. It computes no
probability itself. What it drew is kept in the session (`Views.speculative`) and drawn again when it is reopened.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDockWidget,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.events import Drafted, Speculated
from app.core.models.catalog import ModelEntry, scan_cache
from app.core.models.drafts import offered_drafts
from app.core.models.sources import ModelSpec
from app.core.record.spec_record import K_MAX, DraftToken, SpecRound, SpecStats, SpecSummary
from app.core.session.view_records import SpecRecord
from app.ui.formatting import format_prob, visible

if TYPE_CHECKING:
    from app.ui.viewmodel.playground import Playground

FLUSH_MS = 50
READY = "Pick a draft model and press Run: the window's model verifies what it proposes."
COLUMNS = ("round", "step", "token", "p draft", "p target", "verdict", "drawn instead")
VERDICT_COLORS = {"accepted": QColor(46, 160, 67, 70), "rejected": QColor(214, 39, 40, 80),
                  "discarded": QColor(128, 128, 128, 50), "residual": QColor(31, 119, 180, 70),
                  "bonus": QColor(31, 119, 180, 70), "plain": QColor(31, 119, 180, 30)}


def draft_rows(r: SpecRound) -> list[tuple[str, ...]]:
    """The table's rows for one round, in the run's order: the judged drafts (verdict by the record), the token
    the target drew itself at the next step, then the drafts discarded after a rejection (no step of the run)."""
    judged = r.accepted + (r.rejected is not None)
    rows = [_row(r, r.step + i, d, "accepted" if d.accepted else "rejected",
                 "" if d.accepted else visible(r.drawn_text)) for i, d in enumerate(r.drafts[:judged])]
    kind = "plain" if r.plain else "residual" if r.residual else "bonus"  # (plain: a step without drafts)
    rows.append((str(r.index), str(r.step + r.accepted), visible(r.drawn_text), "", format_prob(r.p_drawn), kind, ""))
    return rows + [_row(r, None, d, "discarded", "") for d in r.drafts[judged:]]


def _row(r: SpecRound, step: int | None, d: DraftToken, verdict: str, instead: str) -> tuple[str, ...]:
    return (str(r.index), "" if step is None else str(step), visible(d.text), format_prob(d.p_draft),
            format_prob(d.p_target), verdict, instead)


def summary_line(stats: SpecStats, summary: SpecSummary | None = None) -> str:
    """The totals as the dock states them (what the record says; nothing recomputed)."""
    rate = "n/a" if stats.acceptance_rate is None else f"{stats.acceptance_rate:.0%}"
    per = "n/a" if stats.tokens_per_target_forward is None else f"{stats.tokens_per_target_forward:.2f}"
    line = (f"acceptance {rate} ({stats.accepted}/{stats.drafted} drafts) · {per} tokens per target forward · "
            f"{stats.tokens} tokens in {stats.rounds} rounds")
    if stats.plain_rounds:
        line += f" ({stats.plain_rounds} plain steps)"
    if stats.note:
        line += f" · {stats.note}"
    if summary is not None and summary.tokens_per_s is not None:
        line += f" · {summary.tokens_per_s:.1f} tok/s"
        if summary.plain_tokens_per_s is not None and summary.speedup is not None:
            line += (f"; plain decoding {summary.plain_tokens_per_s:.1f} tok/s (timed after the run, not drawn): "
                     f"×{summary.speedup:.2f}")
            if summary.cpu_speedup is not None:
                line += f", ×{summary.cpu_speedup:.2f} in the model thread's CPU time"
    return line


def run_name(draft: str, k: int) -> str:
    """A speculative run's name in the session: its draft model and draft length."""
    return f"speculative: {Path(draft).name or draft}, k {k or 'adaptive'}"


class SpecControls(QWidget):
    """The draft model (the built-in draft, or any folder with the target's tokenizer), k, Run and Stop."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.draft = QComboBox(editable=True, minimumContentsLength=24)
        self.draft.setToolTip("A model with exactly the window's model's tokenizer: those offered share its "
                              "tokenizer files; type any folder or hub id")
        self.k = QSpinBox(minimum=0, maximum=K_MAX, value=4, specialValueText="adaptive")
        self.k.setToolTip("Tokens the draft proposes per round (adaptive: the length expected to save most, from "
                          "the measured acceptance and the cost of a draft step against the model's; drafting "
                          "pauses, for plain steps, where no length pays, and is tried again now and then; its "
                          "lengths follow the machine's timing, so a seed replays only a fixed length's run exactly)")
        self.compare = QCheckBox("Time plain decoding too", checked=True)
        self.compare.setToolTip("After the run, decode as many tokens with the model alone, for the speed ratio")
        self.run, self.stop = QPushButton("Run"), QPushButton("Stop", enabled=False)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for text, w in (("Draft", self.draft), ("k", self.k)):
            row.addWidget(QLabel(text))
            row.addWidget(w)
        row.addWidget(self.compare)
        row.addStretch(1)
        row.addWidget(self.run)
        row.addWidget(self.stop)

    def set_drafts(self, entries: list[ModelEntry]) -> None:
        """Offer these drafts (the first chosen), keeping a source the user typed."""
        typed = self.draft.currentText() if self.draft.currentIndex() < 0 else ""
        self.draft.clear()
        for e in entries:
            self.draft.addItem(e.label or e.source, e.source)
        if typed:
            self.draft.setEditText(typed)

    def set_draft(self, source: str) -> None:
        """Choose the draft `source` (an offered one's item, else typed)."""
        i = self.draft.findData(source)
        if i >= 0:
            self.draft.setCurrentIndex(i)
        else:
            self.draft.setEditText(source)

    def draft_source(self) -> str:
        """The draft's source: the item's (a path) where one is chosen, else what was typed."""
        i = self.draft.currentIndex()
        if i >= 0 and self.draft.itemText(i) == self.draft.currentText():
            return self.draft.itemData(i) or self.draft.currentText()
        return self.draft.currentText().strip()


class SpeculativeView(QDockWidget):
    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__("Speculative decoding", parent)
        self.setObjectName("speculative_decoding")
        self.playground = playground
        self.controls = SpecControls()
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        header.setDefaultSectionSize(84)  # (fixed widths: sizing to contents re-measures every row per append)
        header.setSectionResizeMode(COLUMNS.index("token"), QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(COLUMNS.index("drawn instead"), QHeaderView.ResizeMode.Stretch)
        self.status = QLabel(READY)
        self.status.setWordWrap(True)
        body = QWidget()
        box = QVBoxLayout(body)
        box.addWidget(self.controls)
        box.addWidget(self.status)
        box.addWidget(self.table, 1)
        self.setWidget(body)
        self.request_id: int | None = None
        self.rounds: list[SpecRound] = []  # the records drawn, in order
        self.stats = SpecStats()
        self.summary: SpecSummary | None = None
        self._draft, self._k = "", 0  # the run's draft source and k, as asked
        self._pending: list[SpecRound] = []
        self._flush = QTimer(self, singleShot=True, interval=FLUSH_MS)
        self._flush.timeout.connect(self.flush)
        self.controls.run.clicked.connect(self.run)
        self.controls.stop.clicked.connect(playground.stop)
        playground.drafted.connect(self._on_event)
        playground.busy_changed.connect(self._busy)
        playground.failed.connect(self._failed)
        playground.editing.model_changed.connect(lambda _spec: self.refresh_drafts())
        playground.session_replaced.connect(self.restore)
        self.refresh_drafts()
        self.restore()

    def refresh_drafts(self) -> None:
        """Offer the drafts that share the window's model's tokenizer files (the HF cache's models included)."""
        try:
            cached = scan_cache()
        except (OSError, ValueError):  # an unreadable cache: offer what does not need it
            cached = []
        self.controls.set_drafts(offered_drafts(self.playground.editing.model.source, cached))

    def run(self) -> bool:
        """Start a speculative run of the editing state's prompt; False (and why, in the status) if it cannot."""
        source = self.controls.draft_source()
        if not source:
            self.status.setText("Name a draft model: a folder or hub id with the window's model's tokenizer.")
            return False
        settings = self.playground.checked_settings()
        if settings is None:
            return False
        target = self.playground.editing.model
        draft = ModelSpec(source, target.backend, target.options, offline=target.offline)
        request = replace(self.playground.make_request(settings.with_(seed=self.playground.editing.next_run_seed())),
                          draft=draft, draft_k=self.controls.k.value(), compare_plain=self.controls.compare.isChecked())
        previous, self.request_id = self.request_id, request.id  # (before `generate`: its busy signal reads it)
        if not self.playground.generate(request):
            self.request_id = previous
            self.status.setText("A run is in progress: wait for it, or stop it, then run again.")
            return False
        self._clear()
        self._draft, self._k = source, request.draft_k
        self.playground.branches.rename(request.id, run_name(source, request.draft_k))
        self.status.setText(f"Loading the draft model {Path(source).name or source} (once) and drafting…")
        return True

    def _clear(self) -> None:
        self.table.setRowCount(0)
        self.rounds, self._pending, self.stats, self.summary = [], [], SpecStats(), None
        self._store(None)

    def _on_event(self, ev: Drafted | Speculated) -> None:
        if ev.request_id != self.request_id:
            return
        if isinstance(ev, Drafted):
            self._pending.append(ev.round)
            self.stats = ev.stats
            if not self._flush.isActive():
                self._flush.start()
        else:
            self.summary = ev.summary
            self.flush()
            self._store(SpecRecord(ev.request_id, self._draft, self._k, tuple(self.rounds), self.stats, self.summary))

    def flush(self) -> None:
        """Append the rounds that came since the last frame, and restate the totals."""
        for r in self._pending:
            self._append(r)
        self.rounds += self._pending
        self._pending = []
        self.status.setText(summary_line(self.stats, self.summary))
        if self.table.rowCount():
            self.table.scrollToBottom()

    def _append(self, r: SpecRound) -> None:
        for cells in draft_rows(r):
            row = self.table.rowCount()
            self.table.insertRow(row)
            brush = QBrush(VERDICT_COLORS[cells[5]])
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setBackground(brush)
                if col >= 3:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                self.table.setItem(row, col, item)

    def _store(self, record: SpecRecord | None) -> None:
        """Keep what the dock shows in the session (what its file saves); a new run marks the session modified."""
        session = self.playground.session
        if record is not session.views.speculative:
            session.views = replace(session.views, speculative=record)
            self.playground.session_changed.emit()

    def restore(self) -> None:
        """Draw the session's speculative run (a reopened session's) from its records, or nothing."""
        record = self.playground.session.views.speculative
        self._flush.stop()
        self.table.setRowCount(0)
        self._pending = []
        if record is None:
            self.request_id, self.rounds, self.stats, self.summary = None, [], SpecStats(), None
            self.status.setText(READY)
            return
        self.request_id = record.run_id or None
        self._draft, self._k = record.draft, record.k
        self.controls.set_draft(record.draft)
        self.controls.k.setValue(record.k)
        self.rounds, self.stats, self.summary = [], record.stats, record.summary
        self._pending = list(record.rounds)
        self.flush()

    def _busy(self, busy: bool) -> None:
        self.controls.run.setEnabled(not busy)
        self.controls.stop.setEnabled(busy and self.request_id is not None)

    def _failed(self, message: str) -> None:
        if self.request_id is not None and not self.rounds and not self._pending:
            self.status.setText(message)
