"""The main window: composes the widgets, binds them to the `Playground` view-model and its `EditingState`, places
the menus' entries and lays the parts out. Composition only: what the entries and parts do is theirs or a small
helper's (the run controls, the Edit and Help menus, View code, the Run-menu tools, sessions, exports, the side
column's fold, the kept preferences); the window sends messages to the banner, and loads the model after its first
paint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence, QPaintEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.core.models.sources import ModelSpec
from app.ui.banner import Banner
from app.ui.files.exporting import Exporter
from app.ui.files.menus import add_edit_actions, add_help_actions
from app.ui.files.preferences import Preferences
from app.ui.files.sessions import Sessions, state_dir
from app.ui.files.window_prefs import WindowPrefs
from app.ui.panels.info import MetricsStrip, ModelCard
from app.ui.panels.model_bar import ModelBar, opt_in_offer
from app.ui.panels.prompt_editor import PromptEditor
from app.ui.panels.run_controls import RunControls
from app.ui.panels.sampler_panel import SamplerPanel
from app.ui.run_view.branch_tree import BranchTree
from app.ui.run_view.side_column import SIDE, SideFold, side_column
from app.ui.run_view.step_panel import StepPanel
from app.ui.run_view.timeline_panel import TimelinePanel
from app.ui.run_view.token_view import TokenView
from app.ui.tools.code_action import CodeAction
from app.ui.tools.registry import TOOLS, ToolAction
from app.ui.viewmodel.collector import collector
from app.ui.viewmodel.playground import Playground

if TYPE_CHECKING:
    from app.core.runs.model_thread import ModelThread

PRELOAD_MS = 250
STEP_CHART_MIN = 140  # px: the step chart's least readable height, which a dock never takes


class MainWindow(QMainWindow):
    def __init__(self, settings: QSettings | None = None, spec: ModelSpec | None = None,
                 worker: ModelThread | None = None) -> None:
        super().__init__()
        self.setWindowTitle("Logit Lab")
        self._painted = False
        self.store = Preferences(settings)
        self.playground = Playground(self, worker)
        collector().follow(self.playground)  # a model thread never collects Qt objects: app/ui/viewmodel/collector.py
        self.editing = self.playground.editing  # what the user edits: every editor below binds to it
        self.model_bar = ModelBar(self.editing)
        self.prompt = PromptEditor(self.editing)
        self.sampler = SamplerPanel(self.editing)
        self.output = TokenView()
        self.step_panel = StepPanel()
        self.timeline_panel = TimelinePanel()
        self.timeline = self.timeline_panel.timeline  # a timeline.TimelineChart, built after the first paint
        self.metrics = MetricsStrip()
        self.model_card = ModelCard()
        self.banner = Banner()
        self.controls = RunControls(self.prompt, self.banner, self)  # Generate, Stop, Replay, Add the reply
        self.branches = BranchTree()
        self.exporter = Exporter(self, self.playground, {"step": self.step_panel.chart, "timeline": self.timeline})
        self.code_action = CodeAction(self.playground, self)
        self.tools = {t.name: ToolAction(t, self, self.playground, self._tool_opened) for t in TOOLS}
        self.sessions = Sessions(self, self.playground, self.banner, self.store, state_dir(self.store))
        self._build_menus()
        self._build_layout()
        self.side = SideFold(self, self.main)  # below a width, the side column folds away
        self.prefs = WindowPrefs(self.store, self, (self.main, self.left, self.center), self.editing, self.prompt,
                                 self.model_bar, self.timeline_panel.series)
        self._wire()
        self.prefs.restore(spec)
        # Load the model once the window is up: importing torch or mlx on the model thread competes for the GIL
        # with the first paint (window shown at 1.63 s with the load started here, 1.33 s deferred).
        QTimer.singleShot(PRELOAD_MS, self._preload)

    # composition --------------------------------------------------------------------------------------------
    def _build_menus(self) -> None:
        """File, Edit, Run, View, Help: each part's entries, in the menus' order."""
        c, menu = self.controls, self.menuBar()
        self.file_menu, self.edit_menu = menu.addMenu("&File"), menu.addMenu("&Edit")
        self.run_menu, self.view_menu = menu.addMenu("&Run"), menu.addMenu("&View")
        self.help_menu = menu.addMenu("&Help")
        self.open_action = QAction("&Open model folder…", self, shortcut=QKeySequence.StandardKey.Open)
        self.file_menu.addAction(self.open_action)
        self.exporter.add_to(self.file_menu.addMenu("&Export"))
        self.file_menu.addSeparator()
        self.file_menu.addAction(QAction("&Quit", self, shortcut=QKeySequence.StandardKey.Quit, triggered=self.close))
        self.sessions.menu.add_to(self.file_menu)  # New, Open, Open Recent, Save, Save As: at the top
        undoers = (self.branches.undo, self.output.edit.undo, lambda: self.prompt.field().undo())  # the first that acts
        add_edit_actions(self.edit_menu, undoers, lambda: self.prompt.field().redo(), lambda: self.playground.shown,
                         self.output.text)
        self.run_menu.addActions([c.generate_action, c.stop_action, c.replay_action])
        self.run_menu.addSeparator()
        self.run_menu.addAction("&Reset sampler settings", self.sampler.reset_all)
        self.run_menu.addSeparator()
        self.run_menu.addAction(self.code_action)
        self.run_menu.addSeparator()
        self.run_menu.addActions(list(self.tools.values()))
        self.view_menu.addAction("&Branches", lambda: self.side.show_side()).setToolTip(
            "Show the branch tree (and the model card)")
        add_help_actions(self.help_menu, self, self.store.store.fileName(), state_dir(self.store))

    def _build_layout(self) -> None:
        sampler_scroll = QScrollArea(widgetResizable=True)
        sampler_scroll.setWidget(self.sampler)
        sampler_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        sampler_scroll.setMinimumWidth(self.sampler.minimumSizeHint().width() + 24)
        buttons = QHBoxLayout()
        buttons.addWidget(self.controls.generate_button, 1)
        buttons.addWidget(self.controls.stop_button)
        left_top = QWidget()
        lt = QVBoxLayout(left_top)
        lt.setContentsMargins(0, 0, 0, 0)
        lt.addWidget(QLabel("<b>Prompt</b>"))
        lt.addWidget(self.prompt, 1)
        lt.addWidget(self.controls.reply_button)
        lt.addLayout(buttons)
        self.left = _splitter(Qt.Orientation.Vertical, "left", left_top, sampler_scroll)
        self.step_panel.chart.setMinimumHeight(STEP_CHART_MIN)
        self.center = _splitter(Qt.Orientation.Vertical, "center", self.output, self.step_panel, self.timeline_panel)
        self.center.setSizes([170, 370, 230])  # a small window still gives both charts a readable height
        self.main = _splitter(Qt.Orientation.Horizontal, "main", self.left, self.center,
                              side_column(self.branches, self.model_card))
        self.main.setSizes([360, 760, SIDE])
        self.main.setStretchFactor(1, 1)  # a wider window widens the charts, not the prompt or the side column
        self.main.setCollapsible(2, True)  # the model card gives way first in a small window (drag it back)
        root = QWidget()
        box = QVBoxLayout(root)
        box.setContentsMargins(6, 6, 6, 0)
        box.addWidget(self.model_bar)
        box.addWidget(self.banner)
        box.addWidget(self.main, 1)
        box.addWidget(self.metrics)
        self.setCentralWidget(root)
        self.resize(1400, 860)

    def _wire(self) -> None:
        pg = self.playground
        self.open_action.triggered.connect(self.model_bar.browse)
        self.model_bar.load_requested.connect(self.load)
        for view in (self.output, self.step_panel, self.timeline, self.metrics, self.model_card, self.branches,
                     self.model_bar, self.prompt, self.sampler, self.controls):
            view.bind(pg)  # each follows the view-model itself; the window only composes
        self.step_panel.inside_requested.connect(lambda kind: self.tools[kind].open().look_at())
        self.step_panel.look_ahead_requested.connect(lambda step: self.tools["multiverse"].open().look_from(step))
        for view in (self.output, self.step_panel):
            view.fork_requested.connect(pg.branches.fork)
            view.regenerate_requested.connect(pg.branches.regenerate)
        self.timeline.uncertain_clicked.connect(pg.branches.fork_uncertain)
        pg.loaded.connect(lambda _info: self.prefs.remember_model(self.editing.model.source))
        for message in (pg.failed, pg.run_error, pg.refused, pg.noticed, self.sampler.presets.failed,
                        self.exporter.failed):
            message.connect(self.banner.show_message)
        pg.opt_in_needed.connect(
            lambda message, opt_in: self.banner.show_message(message, *opt_in_offer(self.model_bar, opt_in)))
        if self.sampler.presets.store.error:
            self.banner.show_message(self.sampler.presets.store.error)

    def _tool_opened(self, view: Any) -> None:
        """A Run-menu view, just made: its `failed` line goes to the banner; a sweep's cell opens its samples."""
        if hasattr(view, "failed"):
            view.failed.connect(self.banner.show_message)
        if hasattr(view, "samples_requested"):
            view.samples_requested.connect(lambda request: self.tools["samples"].open().show_request(request))

    # the window's verbs -------------------------------------------------------------------------------------
    def load(self, spec: ModelSpec) -> None:
        self.banner.hide()
        self.playground.load(spec)

    def generate(self) -> None:
        """Generate from what the editing state holds (Ctrl+Enter); a reason it cannot goes to the banner."""
        self.controls.generate()

    def _preload(self) -> None:
        """Load the model ahead of the first run; not when a saved run is open (look first, load on Generate)."""
        if not self.playground.busy and not self.playground.session.runs:
            self.playground.load(self.editing.model)

    def paintEvent(self, e: QPaintEvent) -> None:  # noqa: N802 - Qt override
        """The first paint: start the model thread right after it (a zero timer runs once the paint is done), as
        the charts are built (app/ui/charts/chart_host.py); a load or a run before then starts it at once."""
        super().paintEvent(e)
        if not self._painted:
            self._painted = True
            QTimer.singleShot(0, self.playground, self.playground.start_worker)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        """Unsaved changes: saved or discarded as the user answers (Cancel keeps the window); then the preferences
        are kept, the model thread ends and the sessions' autosave with it."""
        if not self.sessions.may_close():
            event.ignore()
            return
        self.prefs.save()
        self.playground.close()
        self.sessions.closed()
        super().closeEvent(event)


def _splitter(orientation: Qt.Orientation, name: str, *widgets: QWidget) -> QSplitter:
    """A splitter named `name` (its state is kept under that name) over `widgets`, none of them collapsible."""
    s = QSplitter(orientation, childrenCollapsible=False)
    s.setObjectName(name)
    for w in widgets:
        s.addWidget(w)
    return s
