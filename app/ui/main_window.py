"""The main window: composes the widgets, binds them to the `Playground` view-model and its `EditingState`, and
builds the menus. No logic of its own beyond the wiring, the remembered layout and settings (QSettings), and
which messages go to the banner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.core.models.sources import ModelSpec
from app.ui.banner import Banner
from app.ui.charts.chart_host import SERIES, TimelineHost
from app.ui.files import clipboard
from app.ui.files.exporting import Exporter
from app.ui.files.preferences import Preferences
from app.ui.files.sessions import Sessions, state_dir
from app.ui.panels.info import MetricsStrip, ModelCard
from app.ui.panels.model_bar import ModelBar
from app.ui.panels.prompt_editor import PromptEditor
from app.ui.panels.sampler_panel import SamplerPanel
from app.ui.run_view.branch_tree import BranchTree
from app.ui.run_view.step_panel import StepPanel
from app.ui.run_view.token_view import TokenView
from app.ui.tools.registry import TOOLS, ToolAction
from app.ui.viewmodel.collector import collector
from app.ui.viewmodel.playground import Playground

if TYPE_CHECKING:
    from app.core.runs.model_thread import ModelThread
    from app.ui.tools.code_dialog import CodeDialog

MAX_RECENT = 10
PRELOAD_MS = 250
NARROW = 1100  # px: narrower windows fold the model card away
SIDE = 240  # px: the right column's width (branch tree, model card) when it unfolds
STEP_CHART_MIN, TIMELINE_MIN = 140, 90  # px: the charts' least readable heights, which a dock never takes


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
        self.timeline = TimelineHost()  # a timeline.TimelineChart, built after the first paint
        self.metrics = MetricsStrip()
        self.model_card = ModelCard()
        self.banner = Banner()
        self.generate_button = QPushButton("Generate")
        self.stop_button = QPushButton("Stop", enabled=False)
        self.reply_button = QPushButton("Add the reply to the chat", visible=False,
                                        toolTip="Append the generated text as an assistant message, then a new "
                                        "user message")
        self.branches = BranchTree()
        self._unusable = ""  # why the prompt cannot be generated from now ("": it can)
        self._build_actions()
        self._build_help()
        self._build_tools()
        self._build_run_tools()
        self._build_branching()
        self._build_sessions()
        self._build_layout()
        self._wire()
        self._restore(spec)
        # Load the model once the window is up: importing torch or mlx on the model thread competes for the GIL
        # with the first paint (window shown at 1.63 s with the load started here, 1.33 s deferred).
        QTimer.singleShot(PRELOAD_MS, self._preload)

    # layout -------------------------------------------------------------------------------------------------
    def _build_actions(self) -> None:
        self.generate_action = QAction("&Generate", self, shortcut=QKeySequence("Ctrl+Return"),
                                       toolTip="Generate (Ctrl+Enter)")
        self.generate_action.setShortcuts([QKeySequence("Ctrl+Return"), QKeySequence("Ctrl+Enter")])
        self.stop_action = QAction("&Stop", self, shortcut=QKeySequence(Qt.Key.Key_Escape), enabled=False,
                                   toolTip="Stop (Esc)")
        self.open_action = QAction("&Open model folder…", self, shortcut=QKeySequence.StandardKey.Open)
        quit_action = QAction("&Quit", self, shortcut=QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)
        reset_action = QAction("&Reset sampler settings", self)
        reset_action.triggered.connect(self.sampler.reset_all)
        for a in (self.generate_action, self.stop_action):
            a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        menu = self.menuBar()
        # The menus, in order; each feature adds its actions in its own _build_* method below.
        self.file_menu = menu.addMenu("&File")
        self.edit_menu = menu.addMenu("&Edit")
        self.run_menu = menu.addMenu("&Run")
        self.view_menu = menu.addMenu("&View")
        self.help_menu = menu.addMenu("&Help")
        self.file_menu.addAction(self.open_action)
        self.export_menu = self.file_menu.addMenu("&Export")
        self.file_menu.addSeparator()
        self.file_menu.addAction(quit_action)
        self.run_menu.addAction(self.generate_action)
        self.run_menu.addAction(self.stop_action)
        self.run_menu.addSeparator()
        self.run_menu.addAction(reset_action)
        self.generate_button.setToolTip("Generate (Ctrl+Enter)")
        self.stop_button.setToolTip("Stop (Esc)")

    def _build_help(self) -> None:
        """Edit: undo / redo in the prompt, copy the output (as text, as Markdown), select all; Help: shortcuts,
        About (app/ui/files/about.py). In a text field with focus, its own keys win (Ctrl+Z, Ctrl+A, …)."""

        def select_all() -> None:
            focused = self.focusWidget()
            (focused if hasattr(focused, "selectAll") else self.output.text).selectAll()

        key = QKeySequence.StandardKey
        items = [(self.edit_menu, "&Undo", key.Undo, lambda: self.branches.undo() or self.output.edit.undo()
                  or self.prompt.field().undo()),
                 (self.edit_menu, "&Redo", key.Redo, lambda: self.prompt.field().redo()),
                 (self.edit_menu, "&Copy output", QKeySequence("Ctrl+Shift+C"),
                  lambda: clipboard.copy(clipboard.output_text(self.playground.shown))),
                 (self.edit_menu, "Copy output as &Markdown", QKeySequence("Ctrl+Alt+C"),
                  lambda: clipboard.copy(clipboard.output_markdown(self.playground.shown))),
                 (self.edit_menu, "Select &All", key.SelectAll, select_all),
                 (self.help_menu, "&Keyboard shortcuts", key.HelpContents, self._show_shortcuts),
                 (self.help_menu, "&About Logit Lab", None, self._show_about)]
        for menu, text, keys, slot in items:
            action = menu.addAction(text, slot)
            if keys is not None:
                action.setShortcut(keys)
            if text in ("&Redo", "Copy output as &Markdown", "&Keyboard shortcuts"):
                menu.addSeparator()

    def _show_shortcuts(self) -> None:
        from app.ui.files.about import ShortcutsDialog, open_dialog  # (dialogs: not before the first paint)

        open_dialog(ShortcutsDialog(self.menuBar(), self))

    def _show_about(self) -> None:
        from app.ui.files.about import AboutDialog, locations, open_dialog

        open_dialog(AboutDialog(locations(self.store.store.fileName(), state_dir(self.store)), self))

    def _build_tools(self) -> None:
        """Presets' messages; File → Export (app/ui/files/exporting.py); Run → View code…
        (app/ui/tools/code_dialog.py)."""
        presets = self.sampler.presets
        presets.failed.connect(self.banner.show_message)
        if presets.store.error:
            self.banner.show_message(presets.store.error)
        self.exporter = Exporter(self, self.playground, {"step": self.step_panel.chart, "timeline": self.timeline})
        self.exporter.failed.connect(self.banner.show_message)
        self.exporter.add_to(self.export_menu)
        self.code_action = QAction("View &code…", self, toolTip="Code that reproduces these settings and the prompt "
                                   "in mlx-lm, transformers, an OpenAI-compatible server and llama.cpp")
        self.code_dialog: CodeDialog | None = None

        def show_code() -> None:
            from app.ui.tools.code_dialog import CodeDialog, code_request  # (a dialog: not before the first paint)

            e = self.editing
            request = code_request(e.settings, e.prompt.text, e.prompt.chat_messages, e.model.source,
                                   self.playground.tokenizer)
            self.code_dialog = CodeDialog(request, self)
            self.code_dialog.show()

        self.code_action.triggered.connect(show_code)
        self.run_menu.addSeparator()
        self.run_menu.addAction(self.code_action)

    def _build_run_tools(self) -> None:
        """Run → Sample ×N…, Sweep…, Side by side…, Prompt set…, Beam search…, Speculative decoding…, Compare
        quantization… (app/ui/tools/registry.py: each made at its first use). A view's `failed` line goes to the banner;
        a sweep's cell opens its samples in the samples view."""
        def opened(view: Any) -> None:
            if hasattr(view, "failed"):
                view.failed.connect(self.banner.show_message)
            if hasattr(view, "samples_requested"):
                view.samples_requested.connect(lambda request: self.tools["samples"].open().show_request(request))

        self.run_menu.addSeparator()
        self.tools = {t.name: ToolAction(t, self, self.playground, opened) for t in TOOLS}
        self.run_menu.addActions(list(self.tools.values()))

    def _build_sessions(self) -> None:
        """File → New / Open / Open Recent / Save / Save As, the title's file name and modified mark, autosave."""
        self.sessions = Sessions(self, self.playground, self.banner, self.store, state_dir(self.store))
        self.sessions.add_to(self.file_menu)

    def _build_branching(self) -> None:
        """Run → Replay; View → Branches; the uncertain-steps threshold beside the timeline."""
        self.replay_action = QAction("Re&play under these settings", self, shortcut=QKeySequence("Ctrl+Shift+R"),
                                     enabled=False, toolTip="Re-run the shown run with its seed under the panel's "
                                     "settings: where it first draws a different token is marked")
        self.replay_action.triggered.connect(self.playground.branches.replay)
        self.run_menu.insertAction(self.run_menu.actions()[2], self.replay_action)
        show = QAction("&Branches", self, toolTip="Show the branch tree (and the model card)")
        show.triggered.connect(self._show_side)
        self.view_menu.addAction(show)
        self.uncertain = QDoubleSpinBox(minimum=0.0, maximum=20.0, singleStep=0.1, decimals=2, suffix=" nats",
                                        specialValueText="top 5 %", toolTip="Mark the steps whose entropy is "
                                        "above this (top 5 %: the most uncertain 5 % of the run); click a mark "
                                        "to continue with the runner-up token there")
        self.uncertain.valueChanged.connect(lambda v: self.timeline.set_uncertain_above(v or None))
        self.series = QComboBox(toolTip="What the timeline draws: the drawn token's probability (area, left axis), "
                                "the entropy of the model's distribution (line, right axis), or both")
        for key, label in SERIES.items():
            self.series.addItem(label, key)
        self.series.currentIndexChanged.connect(lambda _i: self.timeline.show_series(self.series.currentData()))

    def _layout_side(self) -> QWidget:
        """The right column: the branch tree over the model card."""
        side = QWidget()
        box = QVBoxLayout(side)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(QLabel("<b>Branches</b>"))
        box.addWidget(self.branches, 1)
        box.addWidget(QLabel("<b>Model</b>"))
        box.addWidget(self.model_card)
        return side

    def _build_layout(self) -> None:
        sampler_scroll = QScrollArea(widgetResizable=True)
        sampler_scroll.setWidget(self.sampler)
        sampler_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        sampler_scroll.setMinimumWidth(self.sampler.minimumSizeHint().width() + 24)
        buttons = QHBoxLayout()
        buttons.addWidget(self.generate_button, 1)
        buttons.addWidget(self.stop_button)
        left_top = QWidget()
        lt = QVBoxLayout(left_top)
        lt.setContentsMargins(0, 0, 0, 0)
        lt.addWidget(QLabel("<b>Prompt</b>"))
        lt.addWidget(self.prompt, 1)
        lt.addWidget(self.reply_button)
        lt.addLayout(buttons)
        self.left = self._splitter(Qt.Orientation.Vertical, "left", left_top, sampler_scroll)
        timeline_box = QWidget()
        tb = QVBoxLayout(timeline_box)
        tb.setContentsMargins(0, 0, 0, 0)
        head = QHBoxLayout()
        title = QLabel("<b>Run timeline</b> — click to select a step", toolTip="Click to select a step")
        title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # cut, never widening
        head.addWidget(title, 1)
        head.addWidget(self.series)
        head.addWidget(QLabel("▲ uncertain:"))
        head.addWidget(self.uncertain)
        tb.addLayout(head)
        tb.addWidget(self.timeline, 1)
        self.timeline.setMinimumHeight(TIMELINE_MIN)  # (its ticks overlap below it)
        self.step_panel.chart.setMinimumHeight(STEP_CHART_MIN)
        self.center = self._splitter(Qt.Orientation.Vertical, "center", self.output, self.step_panel, timeline_box)
        self.center.setSizes([170, 370, 230])  # a small window still gives both charts a readable height
        self.main = self._splitter(Qt.Orientation.Horizontal, "main", self.left, self.center, self._layout_side())
        self.main.setSizes([360, 760, SIDE])
        self.main.setStretchFactor(1, 1)  # a wider window widens the charts, not the prompt or the side column
        self.main.setCollapsible(2, True)  # the model card gives way first in a small window (drag it back)
        self._card_width: int | None = None  # its width before a narrow window folded it away
        root = QWidget()
        box = QVBoxLayout(root)
        box.setContentsMargins(6, 6, 6, 0)
        box.addWidget(self.model_bar)
        box.addWidget(self.banner)
        box.addWidget(self.main, 1)
        box.addWidget(self.metrics)
        self.setCentralWidget(root)
        self.resize(1400, 860)

    def _splitter(self, orientation: Qt.Orientation, name: str, *widgets: QWidget) -> QSplitter:
        s = QSplitter(orientation, childrenCollapsible=False)
        s.setObjectName(name)
        for w in widgets:
            s.addWidget(w)
        return s

    # wiring -------------------------------------------------------------------------------------------------
    def _wire(self) -> None:
        pg = self.playground
        self.generate_action.triggered.connect(self.generate)
        self.generate_button.clicked.connect(self.generate)
        for stop in (self.stop_action.triggered, self.stop_button.clicked):
            stop.connect(pg.stop)
            stop.connect(self.prompt.score_cancelled)  # after pg.stop (Stop cancels a queued score): asks again
        self.open_action.triggered.connect(self.model_bar.browse)
        self.model_bar.load_requested.connect(self.load)
        self.model_bar.folders_changed.connect(self._folders_changed)
        for view in (self.output, self.step_panel, self.timeline, self.metrics, self.model_card, self.branches,
                     self.model_bar, self.prompt, self.sampler):
            view.bind(pg)  # each follows the view-model itself; the window only composes
        for view in (self.output, self.step_panel):
            view.fork_requested.connect(pg.branches.fork)
            view.regenerate_requested.connect(pg.branches.regenerate)
        self.timeline.uncertain_clicked.connect(pg.branches.fork_uncertain)
        pg.session_changed.connect(self._can_replay)
        pg.busy_changed.connect(self._busy)
        pg.loaded.connect(lambda _info: self._remember_model(self.editing.model.source))
        for message in (pg.failed, pg.run_error, pg.refused):
            message.connect(self.banner.show_message)
        pg.opt_in_needed.connect(self._opt_in_needed)
        pg.run_started.connect(lambda _request: self.reply_button.hide())
        pg.cleared.connect(self.reply_button.hide)
        pg.finished.connect(lambda _ev: self.reply_button.setVisible(self.editing.prompt.chat and bool(pg.steps)))
        self.reply_button.clicked.connect(self._add_reply)
        self.prompt.unusable.connect(self._prompt_unusable)

    def _preload(self) -> None:
        """Load the model ahead of the first run; not when a saved run is open (look first, load on Generate)."""
        if not self.playground.busy and not self.playground.session.runs:
            self.playground.load(self.editing.model)

    def load(self, spec: ModelSpec) -> None:
        self.banner.hide()
        self.playground.load(spec)

    def generate(self) -> None:
        """Generate from what the editing state holds (Ctrl+Enter); a reason it cannot goes to the banner."""
        if self.generate_action.isEnabled():
            self.banner.hide()
            self.playground.generate_edited()

    def _can_replay(self) -> None:
        pg = self.playground
        self.replay_action.setEnabled(pg.trace is not None and (not pg.busy or pg.loading_only))

    def _show_side(self) -> None:
        sizes = self.main.sizes()
        if sizes[2] < 200:
            self.main.setSizes([sizes[0], max(200, sizes[1] - 260 + sizes[2]), 260])

    def _folders_changed(self, folders: list[str]) -> None:
        """Kept on disk at once: a folder the user added must not wait for a clean exit."""
        self.store.set("model_folders", folders)
        self.store.save()

    def _prompt_unusable(self, why: str) -> None:
        """The prompt cannot be generated from as it is (chat mode on a model with no chat template…): Generate
        is off, and its tooltip says why."""
        self._unusable = why
        self.generate_button.setToolTip(why or "Generate (Ctrl+Enter)")
        self._busy(self.playground.busy)

    def _busy(self, busy: bool) -> None:
        can_run = (not busy or self.playground.loading_only) and not self._unusable
        self.generate_action.setEnabled(can_run)
        self.generate_button.setEnabled(can_run)
        self.stop_action.setEnabled(busy)
        self.stop_button.setEnabled(busy)
        self._can_replay()

    def _opt_in_needed(self, message: str, opt_in: str) -> None:
        source = self.editing.model.source
        label = {"trust_remote_code": "Allow its code", "allow_pickle": "Allow pickle weights"}[opt_in]

        def allow() -> None:
            self.model_bar.allow(source, opt_in)
            self.store.set("opt_ins", self.model_bar.opt_ins)
            self.load(self.editing.model)

        self.banner.show_message(message, f"{label} for {source}", allow)

    def _add_reply(self) -> None:
        self.prompt.add_reply("".join(s.text for s in self.playground.steps))
        self.reply_button.hide()

    # persistence --------------------------------------------------------------------------------------------
    def _remember_model(self, source: str) -> None:
        recent = [s for s in self._recent() if s != source]
        self.store.set("recent_models", [source, *recent][:MAX_RECENT])
        self.model_bar.add_recent([source])

    def _recent(self) -> list[str]:
        return self.store.get("recent_models")

    def _restore(self, spec: ModelSpec | None) -> None:
        """What the last session left (every preference typed by app/ui/files/preferences.py); `spec` wins over it."""
        p = self.store
        if geometry := p.get("geometry"):
            self.restoreGeometry(geometry)
        for s in (self.main, self.left, self.center):
            if state := p.get(f"splitter/{s.objectName()}"):
                s.restoreState(state)
        self.editing.set_settings(p.get("sampler"))
        self.prompt.set_prompt(p.get("prompt"))
        self.model_bar.add_recent(self._recent())
        self.model_bar.set_opt_ins(p.get("opt_ins"))
        self.model_bar.folders = p.get("model_folders")
        self.model_bar.remote.set_server(p.get("remote/base_url"), p.get("remote/concurrency"))
        self.model_bar.offline.setChecked(p.get("offline"))
        self.series.setCurrentIndex(max(0, self.series.findData(p.get("timeline/series"))))
        self.model_bar.set_source(spec.source if spec is not None else p.get("model"))
        self.model_bar.set_backend(spec.backend if spec is not None else p.get("backend"))
        if spec is not None:
            self.model_bar.show_options(spec)  # `logitlab --threads 2`: the bar shows it, and loads with it

    def save_state(self) -> None:
        p = self.store
        p.set("geometry", self.saveGeometry())
        for s in (self.main, self.left, self.center):
            p.set(f"splitter/{s.objectName()}", s.saveState())
        e = self.editing
        p.set("sampler", e.settings)
        p.set("prompt", e.prompt.text)
        p.set("model", e.model.source)
        p.set("backend", e.model.backend)
        p.set("offline", self.model_bar.offline.isChecked())
        p.set("timeline/series", self.series.currentData())
        url, concurrency = self.model_bar.remote.server()
        p.set("remote/base_url", url)
        p.set("remote/concurrency", concurrency)
        p.save()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        """Below `NARROW` pixels the model card folds away (its splitter handle brings it back); above, it returns."""
        super().resizeEvent(event)
        sizes = self.main.sizes()
        narrow = event.size().width() < NARROW
        if narrow and sizes[2] > 0 and self._card_width is None:
            self._card_width = max(sizes[2], SIDE)  # (a window still being laid out gives it a sliver)
            self.main.setSizes([sizes[0], sizes[1] + sizes[2], 0])
        elif not narrow and self._card_width is not None:
            card, self._card_width = self._card_width, None
            if sizes[2] == 0:  # once the splitter has its new width (it is laid out after this event)
                QTimer.singleShot(0, self, lambda: self._unfold(card))

    def _unfold(self, card: int) -> None:
        left, center, right = self.main.sizes()
        if right == 0 and self.width() >= NARROW:  # (narrowed again before this ran: it stays folded)
            self.main.setSizes([left, max(1, center - card), card])

    def paintEvent(self, e: QPaintEvent) -> None:  # noqa: N802 - Qt override
        """The first paint: start the model thread right after it (a zero timer runs once the paint is done), as
        the charts are built (app/ui/charts/chart_host.py); a load or a run before then starts it at once."""
        super().paintEvent(e)
        if not self._painted:
            self._painted = True
            QTimer.singleShot(0, self.playground, self.playground.start_worker)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        if not self.sessions.may_close():  # unsaved changes, and the user chose Cancel
            event.ignore()
            return
        self.save_state()
        self.playground.close()
        self.sessions.closed()
        super().closeEvent(event)
