"""Run ▸ Multiverse…: a dock that looks ahead from the prompt's end or a run's step (the step pinned, or the step panel
menu's), grows the multiverse on the model thread (a `multiverse` job) and draws it as it grows (`Icicle`): budget,
depth, children, which probability the blocks stand for (and the next Run ranks by), Run, Stop, progress; hover says
a path, click zooms, the crumbs zoom out, double-click forks (`Branches.fork_path`). The tree is kept in the session.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.decoding.multiverse import MAX_BUDGET, MAX_DEPTH, MAX_WIDTH, LookAhead
from app.core.events import Explored, ExploreDone, Failed
from app.core.record.multiverse import ROOT, Multiverse, Space
from app.core.runs.multiverse_run import ExploreRequest
from app.core.session.view_records import MultiverseRecord
from app.core.settings import SettingsError
from app.ui.formatting import format_prob, visible
from app.ui.tools.multiverse.icicle import Icicle
from app.ui.viewmodel.model_job import ModelJob

if TYPE_CHECKING:
    from app.core.models.sources import ModelSpec
    from app.ui.viewmodel.playground import Playground

SPACES: dict[str, Space] = {"the model's own": "model", "after your sampler": "sampled"}
READY = "Press Run: the likeliest continuations, best first, within the budget and the depth."
EMPTY = ("Press Run to look ahead: a column per token, each block as tall as its path's probability, the grey what "
         "no block holds yet")
WHY = {"budget": "the budget is spent", "done": "nothing more within the depth", "cancelled": "stopped",
       "running": "growing"}


class MultiverseControls(QWidget):
    """Budget, depth, children per node, the probability shown; Run and Stop; the progress."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.budget = _spin(1, MAX_BUDGET, 200, "Nodes in the tree: the likeliest paths are taken first")
        self.depth = _spin(1, MAX_DEPTH, 6, "Tokens to look ahead")
        self.width_box = _spin(1, MAX_WIDTH, 10, "Children considered per node: its likeliest tokens under the model")
        self.space = QComboBox()
        self.space.addItems(list(SPACES))
        self.space.setToolTip("What a block's height is: the model's own probability of the path, or the "
                              "probability after your sampler settings (the children a stage cuts stand hatched). "
                              "Run ranks by it too")
        self.run, self.stop = QPushButton("Run"), QPushButton("Stop", enabled=False)
        self.progress = QProgressBar(maximum=200, value=0, textVisible=True)
        self.progress.setFormat("%v / %m nodes")
        self.progress.setMinimumWidth(150)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for text, w in (("Budget", self.budget), ("Depth", self.depth), ("Children", self.width_box),
                        ("Probability", self.space)):
            row.addWidget(QLabel(text))
            row.addWidget(w)
        row.addStretch(1)
        row.addWidget(self.progress)
        row.addWidget(self.run)
        row.addWidget(self.stop)

    def look(self) -> LookAhead:
        return LookAhead(self.budget.value(), self.depth.value(), self.width_box.value(), self.shown_space())

    def shown_space(self) -> Space:
        return SPACES[self.space.currentText()]

    def set_look(self, tree: Multiverse) -> None:
        """Show what `tree` was grown under (a reopened session's)."""
        self.budget.setValue(tree.budget)
        self.depth.setValue(tree.depth)
        self.width_box.setValue(tree.width)
        self.space.setCurrentText(next(k for k, v in SPACES.items() if v == tree.space))


class MultiverseView(QDockWidget):
    forked = Signal(int)  # the run id a node's path was forked into
    finished = Signal(object)  # ExploreDone

    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__("Multiverse", parent)
        self.setObjectName("multiverse")
        self.playground = playground
        self.controls = MultiverseControls()
        self.icicle = Icicle()
        self.origin_label = QLabel()
        self.from_prompt = QPushButton("From the prompt's end", toolTip="Look ahead from the end of the prompt, not "
                                       "from a run's step")
        self.crumbs = QLabel(textFormat=Qt.TextFormat.RichText)
        self.crumbs.setOpenExternalLinks(False)
        self.zoom_out = QPushButton("Zoom out", enabled=False, toolTip="Back to the node around this one "
                                    "(or right-click the drawing)")
        self.info = QLabel(READY, wordWrap=True)
        self.origin: tuple[int, int] | None = None  # (run id, step) to look ahead from; None: the prompt's end
        self.tree: Multiverse | None = None  # what is drawn (growing, or the last one)
        self._spec: ModelSpec | None = None
        self.job = ModelJob(playground, self)
        self._build()
        self._wire()
        self.follow_selection()
        self.restore()

    def _build(self) -> None:
        origin = QHBoxLayout()
        origin.addWidget(self.origin_label, 1)
        origin.addWidget(self.from_prompt)
        crumbs = QHBoxLayout()
        crumbs.addWidget(self.crumbs, 1)
        crumbs.addWidget(self.zoom_out)
        body = QWidget()
        box = QVBoxLayout(body)
        box.addWidget(self.controls)
        box.addLayout(origin)
        box.addLayout(crumbs)
        box.addWidget(self.icicle, 1)
        box.addWidget(self.info)
        self.setWidget(body)

    def _wire(self) -> None:
        c, pg = self.controls, self.playground
        self.job.event.connect(self._on_event)
        self.job.running_changed.connect(self._show_running)
        c.run.clicked.connect(self.run)
        c.stop.clicked.connect(self.stop)
        c.space.currentTextChanged.connect(self._space_changed)
        self.from_prompt.clicked.connect(lambda: self.look_from(None))
        self.zoom_out.clicked.connect(self.icicle.zoom_out)
        self.crumbs.linkActivated.connect(lambda node: self.icicle.zoom(int(node)))
        self.icicle.zoomed.connect(lambda _n: self._show_zoom())
        self.icicle.hovered.connect(self._show_hover)
        self.icicle.fork_requested.connect(self.fork)
        pg.editing.selection_changed.connect(self.follow_selection)
        pg.session_replaced.connect(self.restore)

    def _space_changed(self) -> None:
        self.icicle.set_space(self.controls.shown_space())
        self._show_zoom()
        if self.tree is not None:
            self.info.setText(status(self.tree, self.icicle.space))

    @property
    def running(self) -> bool:
        return self.job.running

    # where it looks from ------------------------------------------------------------------------------------
    def follow_selection(self) -> None:
        """Look from the step pinned in the run shown, else from the prompt's end (while nothing runs here)."""
        e = self.playground.editing
        if not self.running:
            self.look_from(e.step if e.run is not None and e.step is not None else None)

    def look_from(self, step: int | None) -> None:
        """Look ahead from `step` of the run shown (None: from the prompt's end)."""
        run = self.playground.editing.run
        ok = step is not None and run is not None and run.trace is not None and 0 <= step <= len(run.trace.steps)
        self.origin = (run.id, step) if ok else None  # type: ignore[union-attr]
        if self.origin is None:
            self.origin_label.setText("Looks ahead from <b>the prompt's end</b>")
        else:
            self.origin_label.setText(f"Looks ahead from <b>step {step}</b> of <b>{run.name or f'run {run.id}'}</b> "
                                      "(its first tokens are part of the prefix)")
        self.from_prompt.setEnabled(self.origin is not None)

    def _request(self) -> ExploreRequest | None:
        pg = self.playground
        settings = pg.checked_settings()
        if settings is None:
            return None
        e, look = pg.editing, self.controls.look()
        if self.origin is not None:
            run = pg.session.get(self.origin[0])
            if run is not None and run.trace is not None:
                trace, k = run.trace, self.origin[1]
                return ExploreRequest(model=e.model, prompt_ids=tuple(trace.prompt_ids),
                                      start=tuple(trace.token_ids[:k]), settings=settings, look=look,
                                      origin=self.origin)
        return ExploreRequest(model=e.model, prompt=e.prompt.text, messages=e.prompt.chat_messages,
                              settings=settings, look=look)

    # running ------------------------------------------------------------------------------------------------
    def run(self) -> bool:
        """Grow a multiverse from where it looks; False (and why) if it cannot start."""
        if self.running or self.playground.busy:
            self.info.setText("A run is in progress: wait for it, or stop it, then look ahead.")
            return False
        try:
            request = self._request()
        except SettingsError as e:
            self.info.setText(str(e))
            return False
        if request is None:
            return False
        self._spec = request.model
        self.controls.progress.setMaximum(request.look.budget)
        self.controls.progress.setValue(0)
        self.icicle.focus = ROOT
        self._show(None, "Prefilling the prefix…")
        self.job.start("multiverse", request)
        self.info.setText("Prefilling the prefix…")
        return True

    def stop(self) -> None:
        self.job.stop()

    def drain(self) -> None:
        self.job.drain()

    def _show_running(self, running: bool) -> None:
        self.controls.run.setEnabled(not running)
        self.controls.stop.setEnabled(running)

    def _on_event(self, ev: object) -> None:
        if isinstance(ev, (Explored, ExploreDone)):
            self._show(ev.multiverse)
            self.controls.progress.setValue(min(ev.multiverse.ranked, self.controls.progress.maximum()))
            self.info.setText(status(ev.multiverse, self.icicle.space))
            if isinstance(ev, ExploreDone):
                self.job.done()
                self._store(ev.multiverse)
                self.finished.emit(ev)
        elif isinstance(ev, Failed):
            self.info.setText(ev.message)
            self.job.done()

    def _show(self, tree: Multiverse | None, note: str = "") -> None:
        self.tree = tree
        self.icicle.show_tree(tree, note)
        self._show_zoom()

    # zoom, hover, fork --------------------------------------------------------------------------------------
    def _show_zoom(self) -> None:
        """The crumbs from the prefix to the node zoomed into, each a link back out to it."""
        tree, focus = self.tree, self.icicle.focus
        self.zoom_out.setEnabled(tree is not None and focus != ROOT)
        if tree is None:
            self.crumbs.setText("")
            return
        parts = [f"<a href='{i}'>{'prefix' if i == ROOT else visible(tree.node(i).text)}</a>"
                 for i in tree.lineage(focus)]
        parts[-1] = f"<b>{'prefix' if focus == ROOT else visible(tree.node(focus).text)}</b>"
        scale = tree.node(focus).path_prob(self.icicle.space)
        zoom = f" — zoomed ×{1 / scale:.3g} (the node spans the height)" if focus != ROOT and scale > 0 else ""
        self.crumbs.setText(" ▸ ".join(parts) + zoom)

    def _show_hover(self, node: int) -> None:
        if self.tree is not None and node >= 0:
            self.info.setText(self.icicle.path_info(node))
        elif self.tree is not None:
            self.info.setText(status(self.tree, self.icicle.space))

    def fork(self, node: int) -> bool:
        """Fork node `node`'s path into a run of the session (refused, with why, while a run is in progress)."""
        tree = self.tree
        if tree is None or self.running or not 0 < node < len(tree.nodes):
            return False
        pg = self.playground
        before = set(pg.session.runs)
        if not pg.branches.fork_path(tree, node):
            self.info.setText("A run is in progress (or the run it looked from is gone): fork it when it is done.")
            return False
        new = [i for i in pg.session.runs if i not in before]
        if new:
            pg.branches.rename(new[0], f"multiverse: {visible(tree.path_text(node))[:24]}")
            self.forked.emit(new[0])
        return True

    # the session keeps what the view shows ------------------------------------------------------------------
    def _store(self, tree: Multiverse) -> None:
        session, spec = self.playground.session, self._spec
        if spec is not None:
            session.views = replace(session.views, multiverse=MultiverseRecord(spec, tree))
            self.playground.session_changed.emit()

    def restore(self) -> None:
        """Draw the session's multiverse (a reopened session's), or nothing."""
        record = self.playground.session.views.multiverse
        if self.running:
            return
        if record is None:
            self._spec = None
            self._show(None, EMPTY)
            self.info.setText(READY)
            return
        self._spec = record.model
        self.controls.set_look(record.multiverse)
        self.icicle.space = record.multiverse.space
        self._show(record.multiverse)
        self.controls.progress.setMaximum(record.multiverse.budget)
        self.controls.progress.setValue(record.multiverse.ranked)
        self.info.setText(status(record.multiverse, self.icicle.space))


def status(tree: Multiverse, space: Space) -> str:
    """What the tree holds: its nodes, why it ended, each depth's explored share in `space`, and what to do."""
    cols = ", ".join(format_prob(c.explored) for c in tree.columns(space))
    return (f"{tree.ranked} nodes ranked by the {'model' if tree.space == 'model' else 'sampler'}'s probability "
            f"({WHY[tree.reason]}; {tree.expanded} expanded). Explored per depth: {cols}. Hover a block for its "
            "path, click to zoom in, double-click to fork it into a run.")


def _spin(lo: int, hi: int, value: int, tip: str) -> QSpinBox:
    box = QSpinBox(minimum=lo, maximum=hi, value=value)
    box.setToolTip(tip)
    return box
