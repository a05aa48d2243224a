"""Run ▸ Steering…: a dock to make a steering vector from contrastive prompt pairs (mean difference or first principal
component), load and save it as llama.cpp's control-vector GGUF, choose the layers and the strength (shown relative
to the residual stream's norm there), and run the window's prompt and sampler steered, then unsteered with the same
seed (`steer_vector`, then `plain` twice, on the model thread). It draws the records: both texts, each step's KL from
the unsteered model as a curve, where the steered draw first left the twin's, the tokens moved at the step clicked.
Its second tab runs the prompt under a strength × layer grid of the vector (`steer_grid_view`).
"""

from __future__ import annotations

import html
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDockWidget,
    QDoubleSpinBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QTabWidget,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.core.control_vectors import (
    BREAKS,
    METHODS,
    ControlVector,
    VectorError,
    parse_layers,
    read_vector,
    write_vector,
)
from app.core.decoding.steering.pairs import VectorMade, VectorRequest
from app.core.events import Failed, Finished, Request
from app.core.record.steer_record import summary_line
from app.core.stage_inputs import Steering
from app.ui.charts.shared import DRAWN
from app.ui.formatting import format_prob, visible
from app.ui.tools.inside.steer_grid_view import SteerGridView
from app.ui.tools.inside.steer_widgets import KlCurve, PairsEditor
from app.ui.viewmodel.model_job import ModelJob

if TYPE_CHECKING:
    from app.core.record.trace import RunTrace
    from app.ui.viewmodel.playground import Playground

EMPTY = "Make a vector (or load one), then Run: the steered text, its unsteered twin and the KL per step show here."


class SteerView(QDockWidget):
    ran = Signal(object, object)  # the steered RunTrace and its unsteered twin's, once both have finished
    made = Signal(object)  # the ControlVector made

    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__("Steering", parent)
        self.setObjectName("steering")
        self.playground = playground
        self.vector: ControlVector | None = None
        self.path = ""  # the vector's file (made ones: in a folder of this view's)
        self.steered: RunTrace | None = None
        self.twin: RunTrace | None = None
        self._folder = tempfile.mkdtemp(prefix="logitlab-vectors-")  # the vectors made here: gone with the view
        weakref.finalize(self, shutil.rmtree, self._folder, ignore_errors=True)
        self.grid = SteerGridView(playground, lambda: self.job.running)  # the Grid tab: strengths × layer sets
        self._build()
        self.job = ModelJob(playground, self)
        self.job.event.connect(self._on_event)
        self.job.running_changed.connect(self._running)
        self._pending: Request | None = None  # the twin's request, started once the steered run has finished

    def _build(self) -> None:
        self.pairs = PairsEditor()
        self.method, self.make_layers = QComboBox(), QLineEdit(placeholderText="every layer from 1")
        self.method.addItems(METHODS)
        self.method.setToolTip("mean: the mean of the pairs' differences; pca: their first principal component")
        self.make_layers.setToolTip("The layers to make it for: 3,4 or 2-5 (llama.cpp never steers layer 0)")
        self.layers, self.strength = QLineEdit(), QDoubleSpinBox(minimum=-100, maximum=100, value=4.0, singleStep=0.5)
        self.layers.setToolTip("The layers it is added at, after each: 3,4 or 2-5 (empty: every layer of the vector)")
        self.relative, self.about, self.status = QLabel(), QLabel("No vector yet."), QLabel(EMPTY, wordWrap=True)
        self.buttons = {name: QPushButton(name) for name in ("Make", "Load…", "Save…", "Run", "Stop", "+", "−")}
        self.texts = (QTextEdit(readOnly=True), QTextEdit(readOnly=True))
        self.texts[0].setPlaceholderText("The steered text")
        self.texts[1].setPlaceholderText("The unsteered twin (same seed)")
        self.texts[0].setToolTip("The steered text: underlined where the unsteered model would have drawn another "
                                 "token with the same random number")
        self.texts[1].setToolTip("The same prompt, sampler and seed, without the vector")
        self.chart, self.moved = KlCurve(), QLabel("Click a step on the curve: the tokens steering moved there.",
                                                   wordWrap=True)
        self.moved.setTextFormat(Qt.TextFormat.RichText)
        self.moved.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.layers.setMaximumWidth(90)
        self.setWidget(self._layout())
        b = self.buttons
        b["+"].clicked.connect(lambda: self.pairs.add_pair())
        b["−"].clicked.connect(self.pairs.remove_pair)
        b["Make"].clicked.connect(self.make)
        b["Load…"].clicked.connect(self._load)
        b["Save…"].clicked.connect(self._save)
        b["Run"].clicked.connect(self.run)
        b["Stop"].clicked.connect(lambda: self.job.stop())
        b["Stop"].setEnabled(False)
        b["Save…"].setEnabled(False)
        self.layers.textChanged.connect(self._show_relative)
        self.strength.valueChanged.connect(self._show_relative)
        self.chart.step_clicked.connect(self.show_step)

    def _layout(self) -> QWidget:
        b = self.buttons
        make = QGridLayout()
        make.addWidget(self.pairs, 0, 0, 4, 1)
        for row, (label, w) in enumerate((("method", self.method), ("layers", self.make_layers))):
            make.addWidget(QLabel(label), row, 1)
            make.addWidget(w, row, 2, 1, 2)
        for col, name in enumerate(("+", "−")):
            make.addWidget(b[name], 2, 1 + col)
        make.addWidget(b["Make"], 2, 3)
        files = QHBoxLayout()
        files.addWidget(b["Load…"])
        files.addWidget(b["Save…"])
        make.addLayout(files, 3, 1, 1, 3)
        steer = QHBoxLayout()
        for w in (self.about, QLabel("at layers"), self.layers, QLabel("strength"), self.strength):
            steer.addWidget(w)
        steer.addStretch(1)
        steer.addWidget(b["Run"])
        steer.addWidget(b["Stop"])
        texts = QSplitter(Qt.Orientation.Horizontal)
        for t in self.texts:
            texts.addWidget(t)
        lower = QSplitter(Qt.Orientation.Horizontal)
        lower.addWidget(self.chart)
        lower.addWidget(self.moved)
        lower.setSizes([620, 300])
        body = QSplitter(Qt.Orientation.Vertical)
        body.addWidget(texts)
        body.addWidget(lower)
        body.setSizes([200, 260])
        page = QWidget()
        col = QVBoxLayout(page)
        col.addLayout(make)
        col.addLayout(steer)
        col.addWidget(self.relative)
        col.addWidget(self.status)
        self.tabs = QTabWidget()
        self.tabs.addTab(body, "Steered beside its twin")
        self.tabs.addTab(self.grid, "Strength × layer grid")
        col.addWidget(self.tabs, 1)
        return page

    # the vector --------------------------------------------------------------------------------------------------
    def make(self) -> bool:
        """Make a vector from the typed pairs on the window's model; False (and why, in the status) if it cannot."""
        positive, negative = self.pairs.pairs()
        if not positive:
            self.status.setText("Type at least one pair: a prompt toward the behaviour and one away from it.")
            return False
        try:
            layers = parse_layers(self.make_layers.text()) if self.make_layers.text().strip() else ()
        except ValueError as e:
            self.status.setText(str(e))
            return False
        folder = Path(self._folder)
        path = str(folder / f"vector-{len(list(folder.iterdir())) + 1}.gguf")
        request = VectorRequest(model=self.playground.editing.model, positive=positive, negative=negative,
                                layers=layers, method=self.method.currentText(), path=path)
        return self._start("steer_vector", request, f"Making a vector from {len(positive)} pair(s)…")

    def set_vector(self, vector: ControlVector, path: str) -> None:
        self.vector, self.path = vector, path
        layers = vector.layers
        span = f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}–{layers[-1]}"
        self.about.setText(f"<b>{html.escape(Path(path).name)}</b>: {vector.method or 'a vector'}"
                           f"{f' of {vector.pairs} pair(s)' if vector.pairs else ''}, {span}")
        if not self.layers.text().strip() or not self._layers():
            self.layers.setText(str(layers[len(layers) // 2]))  # the middle one: where steering usually reads best
        self.buttons["Save…"].setEnabled(True)
        self.grid.set_vector(vector, path)
        self._show_relative()

    def show_grid(self) -> None:
        """Bring the strength × layer grid's tab to the front (a reopened session's grid)."""
        self.tabs.setCurrentWidget(self.grid)

    def _load(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load a steering vector", "", "Control vectors (*.gguf)")
        if path:
            self.load(path)

    def load(self, path: str) -> bool:
        try:
            self.set_vector(read_vector(path), path)
        except VectorError as e:
            self.status.setText(str(e))
            return False
        return True

    def _save(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the steering vector", "vector.gguf", "Control vectors "
                                              "(*.gguf)")
        if path and self.vector is not None:
            try:
                write_vector(path, self.vector)
                self.path = path
                self.status.setText(f"Saved {path}: llama.cpp runs it with --control-vector {Path(path).name}")
            except (OSError, VectorError) as e:
                self.status.setText(f"Cannot save {path}: {e}")

    def _layers(self) -> tuple[int, ...] | None:
        """The layers typed (() for every layer of the vector); None where they cannot be read."""
        try:
            return parse_layers(self.layers.text()) if self.layers.text().strip() else ()
        except ValueError:
            return None

    def _show_relative(self) -> None:
        """The strength relative to the residual stream's norm at the layers chosen (the vector's recorded norms)."""
        layers = self._layers()
        if self.vector is None or layers is None:
            self.relative.setText("")
            return
        rel = [r for n in (layers or self.vector.layers) if n in self.vector.directions
               and (r := self.vector.relative(n, self.strength.value())) is not None]
        if not rel:
            self.relative.setText("(no residual norm recorded in the file)")
            return
        color = DRAWN.name() if max(rel) >= BREAKS else "gray"
        self.relative.setText(f"<span style='color:{color}'>strength {self.strength.value():g} adds "
                              f"{max(rel):.2g}× the residual stream's norm there (fluency typically breaks near "
                              f"{BREAKS:g}×)</span>")

    # the run -----------------------------------------------------------------------------------------------------
    def run(self) -> bool:
        """The window's prompt and sampler, steered, then the same unsteered (same seed); False (and why) if it
        cannot start now."""
        settings = self.playground.checked_settings()
        layers = self._layers()
        if self.vector is None or settings is None or layers is None:
            self.status.setText("Make or load a vector first." if self.vector is None else
                                "The layers are numbers, ranges or both (3,4 or 2-5)." if layers is None else
                                "The sampler settings are not valid: see the sampler panel.")
            return False
        settings = settings.with_(seed=self.playground.editing.next_run_seed())
        base = self.playground.make_request(settings)
        steering = Steering(self.path, layers, self.strength.value())
        steered = Request(model=base.model, prompt=base.prompt, messages=base.messages, top_n=base.top_n,
                          settings=settings.with_(steering=steering))
        self._pending = Request(model=base.model, prompt=base.prompt, messages=base.messages, top_n=base.top_n,
                                settings=settings)
        self.steered = self.twin = None
        for t in self.texts:
            t.clear()
        return self._start("plain", steered, "Running steered…")

    def _start(self, kind: str, request: object, says: str) -> bool:
        if self.job.running or self.playground.busy:
            self.status.setText("A run is in progress: wait for it, or stop it.")
            return False
        self.job.start(kind, request)  # type: ignore[arg-type]
        self.status.setText(says)
        return True

    def _running(self, running: bool) -> None:
        for name in ("Make", "Run", "Load…"):
            self.buttons[name].setEnabled(not running)
        self.buttons["Stop"].setEnabled(running)

    def _on_event(self, ev: object) -> None:
        if isinstance(ev, Failed):
            self.status.setText(ev.message)
            self._pending = None
            self.job.done()
        elif isinstance(ev, VectorMade):
            self.job.done()
            self.set_vector(ev.vector, ev.path)
            self.status.setText(f"Made {Path(ev.path).name}: choose the layers and the strength, then Run "
                                "(Save… keeps it; llama.cpp runs it with --control-vector).")
            self.made.emit(ev.vector)
        elif isinstance(ev, Finished):
            self.job.done()
            self._finished(ev)

    def _finished(self, ev: Finished) -> None:
        if ev.trace is None or ev.reason == "cancelled":
            self.status.setText("Stopped.")
            self._pending = None
            return
        if self._pending is not None:  # the steered run: now its twin
            self.steered, twin, self._pending = ev.trace, self._pending, None
            self.show_steered(ev.trace)
            self._start("plain", twin, "Running the unsteered twin (same seed)…")
            return
        self.twin = ev.trace
        self.texts[1].setPlainText(ev.trace.text)
        self.status.setText(summary_line(self.steered.steps) if self.steered is not None else "")
        self.ran.emit(self.steered, self.twin)

    def show_steered(self, trace: RunTrace) -> None:
        """The steered text (each token whose draw left the twin's underlined), its KL curve, its first step."""
        parts = []
        for st in trace.steps:
            piece = html.escape(st.text)
            steer = st.sample.steer
            off = steer is not None and steer.twin_token != st.token_id
            parts.append(f"<span style='text-decoration: underline; color:{DRAWN.name()}'>{piece}</span>"
                         if off else piece)
        self.texts[0].setHtml(f"<div style='white-space: pre-wrap'>{''.join(parts)}</div>")
        self.chart.show_trace(trace)
        if trace.steps:
            self.show_step(0)

    def show_step(self, step: int) -> None:
        """The tokens steering raised and lowered most at `step`, with their probabilities without and with it."""
        if self.steered is None or not 0 <= step < len(self.steered.steps):
            return
        st = self.steered.steps[step]
        steer = st.sample.steer
        self.chart.select(step)
        if steer is None:
            self.moved.setText(f"step {step}: not steered")
            return
        ids, t = st.sample.top_ids[: st.top_n].tolist(), steer.twin_token
        twin = ("the same" if t == st.token_id else f"<code>{html.escape(visible(st.top_texts[ids.index(t)]))}</code>"
                if t in ids else f"token {t}")
        rows = [f"<b>step {step}</b>: drew <code>{html.escape(visible(st.text))}</code> (unsteered: {twin}), KL "
                f"{steer.kl:.3g} nats"]
        for title, moved in (("raised", steer.promoted), ("lowered", steer.demoted)):
            rows.append(f"<br><b>{title}</b>")
            rows += [f"<br><code>{html.escape(visible(text))}</code> {format_prob(before)} → {format_prob(after)}"
                     for _, text, before, after in moved]
        self.moved.setText("".join(rows))
