"""The Run menu's tools: the windows and docks of the views beside the playground (samples, sweep, side by side,
prompt sets, beam search, speculative decoding, quantization diff, the logit lens, attention, steering, the
multiverse, think probes, the server), each made when first opened, so that pyqtgraph and their core modules are not
imported before the window's first paint.

A `Tool` names its view's class by module and name; `ToolAction` is its menu entry and holds the view once
opened (`view`, None before). Every view is built as `View(playground, window)`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDockWidget, QMainWindow, QWidget

if TYPE_CHECKING:
    from app.ui.viewmodel.playground import Playground


FLOATING_WIDTH = 900  # px: a dock floated because the window is too short for it is at most this wide


@dataclass(frozen=True)
class Tool:
    name: str  # its key in `MainWindow.tools`
    text: str
    tip: str
    view: str  # "module:Class", imported at the first open
    shortcut: str | None = None
    size: tuple[int, int] | None = None  # a dock made floating at this size: its own window, docked if dragged in


TOOLS = (
    Tool("samples", "Sample ×&N…", "Draw N continuations together and compare them",
         "app.ui.tools.samples_view:SamplesView", "Ctrl+Shift+N"),
    Tool("sweep", "S&weep…", "N samples under each cell of a grid of two settings",
         "app.ui.tools.sweep_view:SweepView"),
    Tool("side", "Si&de by side…", "Run the prompt under 2 to 4 settings or models together; compare them step by step",
         "app.ui.tools.side_by_side.view:SideBySideView"),
    Tool("prompt_set", "Pro&mpt set…",
         "Run a table of prompts under the window's settings, the side-by-side columns or a sweep cell; export them",
         "app.ui.tools.prompt_set.view:PromptSetView"),
    Tool("beam", "&Beam search…", "Run a beam search on the prompt and watch its tree grow",
         "app.ui.tools.beam_view:BeamView", "Ctrl+Shift+B", size=(1100, 640)),
    Tool("speculative", "Spec&ulative decoding…", "A small draft model proposes, the window's model verifies",
         "app.ui.tools.speculative_view:SpeculativeView", "Ctrl+Shift+D"),
    Tool("quant", "Compare &quantization…", "Teacher-force the shown run (or the prompt) through the model and a "
         "variant of it (another precision, 4- or 8-bit, a GGUF file): KL and top-1 agreement per token",
         "app.ui.tools.quant_view:QuantView", "Ctrl+Shift+K", size=(1000, 620)),
    Tool("lens", "&Logit lens…", "Each layer's guess at the selected step: its top tokens read through the model's "
         "final norm and head, and the drawn token's probability across layers (live while a run decodes, if on)",
         "app.ui.tools.inside.lens_view:LensView", "Ctrl+Shift+L", size=(1000, 620)),
    Tool("attention", "A&ttention…", "Where the selected step looked: each layer's and head's attention weights over "
         "the context", "app.ui.tools.inside.attention_view:AttentionView", size=(1000, 680)),
    Tool("steering", "Steer&ing…", "Make a steering vector from contrastive prompt pairs (or load a llama.cpp "
         "control vector), add it to the residual stream at chosen layers, and run the prompt steered beside its "
         "unsteered twin: the KL per step, where the draw first diverged, the tokens it moved",
         "app.ui.tools.inside.steer_view:SteerView", size=(1100, 700)),
    Tool("multiverse", "Multiverse (look a&head)…", "Where the text could go from the prompt's end or the selected "
         "step: the likeliest continuations as blocks as tall as their probability, under the model or your sampler",
         "app.ui.tools.multiverse.view:MultiverseView", "Ctrl+Shift+M", size=(1100, 640)),
    Tool("think", "Thin&k probes…", "A thinking model's run: the answer it would give if it stopped thinking here, "
         "every K think tokens (or at the selected step), drawn over its thinking time; click one to open it as a run",
         "app.ui.tools.thinking.probe_view:ThinkProbeView", size=(1000, 560)),
    Tool("server", "Ser&ver…", "Serve the window's model over an OpenAI-compatible API on 127.0.0.1: every request "
         "becomes a run of this session", "app.ui.tools.server_view:ServerView"),
)


class ToolAction(QAction):
    """A tool's menu entry; `view` is its window or dock once opened (None before), `opened` runs on the new view."""

    def __init__(self, tool: Tool, window: QMainWindow, playground: Playground,
                 opened: Callable[[Any], None] | None = None) -> None:
        super().__init__(tool.text, window, toolTip=tool.tip)
        if tool.shortcut:
            self.setShortcut(QKeySequence(tool.shortcut))
        self.tool, self.main, self.playground, self.opened = tool, window, playground, opened
        self.view: Any = None
        self.triggered.connect(self.open)

    def open(self) -> Any:
        if self.view is None:
            module, name = self.tool.view.split(":")
            self.view = getattr(importlib.import_module(module), name)(self.playground, self.main)
            self._place(self.view)
            if self.opened is not None:
                self.opened(self.view)
        self.view.show()
        self.view.raise_()
        return self.view

    def _place(self, view: QWidget) -> None:
        """A dock goes under the charts where the window has room for it beside their least heights; else (and for
        a tool with its own size) it floats, its own window, docked again if dragged in."""
        if isinstance(view, QDockWidget):
            self.main.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, view)
            room = self.main.height() - self.main.centralWidget().minimumSizeHint().height()
            size = self.tool.size or (None if room >= view.minimumSizeHint().height()
                                      else (min(self.main.width(), FLOATING_WIDTH), view.sizeHint().height()))
            if size:
                view.setFloating(True)
                view.resize(*size)
