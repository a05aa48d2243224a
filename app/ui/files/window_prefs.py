"""What the window keeps between sessions, read back into its parts and written from them: geometry and splitters,
the edited settings, prompt, model and backend, the model bar's lists (recent models, folders, allowed opt-ins,
server) and offline box, the timeline's series. Restored once when the window is made (a model the command line names
wins), saved when it closes; recent models, folders and opt-ins also as they change, the folders on disk at once.
Every value is typed by app/ui/files/preferences.py; it reads and sets widgets and decides nothing about them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PySide6.QtWidgets import QComboBox, QSplitter, QWidget

    from app.core.models.sources import ModelSpec
    from app.ui.files.preferences import Preferences
    from app.ui.panels.model_bar import ModelBar
    from app.ui.panels.prompt_editor import PromptEditor
    from app.ui.viewmodel.editing_state import EditingState

MAX_RECENT = 10


class WindowPrefs:
    def __init__(self, store: Preferences, window: QWidget, splitters: Sequence[QSplitter], editing: EditingState,
                 prompt: PromptEditor, model_bar: ModelBar, series: QComboBox) -> None:
        self.store, self._window, self._splitters = store, window, tuple(splitters)
        self._editing, self._prompt, self._bar, self._series = editing, prompt, model_bar, series
        model_bar.folders_changed.connect(self._keep_folders)
        model_bar.opt_ins_changed.connect(lambda opt_ins: store.set("opt_ins", opt_ins))

    def restore(self, spec: ModelSpec | None) -> None:
        """What the last session left; `spec` wins over it."""
        p, bar = self.store, self._bar
        if geometry := p.get("geometry"):
            self._window.restoreGeometry(geometry)
        for s in self._splitters:
            if state := p.get(f"splitter/{s.objectName()}"):
                s.restoreState(state)
        self._editing.set_settings(p.get("sampler"))
        self._prompt.set_prompt(p.get("prompt"))
        bar.add_recent(p.get("recent_models"))
        bar.set_opt_ins(p.get("opt_ins"))
        bar.folders = p.get("model_folders")
        bar.remote.set_server(p.get("remote/base_url"), p.get("remote/concurrency"))
        bar.offline.setChecked(p.get("offline"))
        self._series.setCurrentIndex(max(0, self._series.findData(p.get("timeline/series"))))
        bar.set_source(spec.source if spec is not None else p.get("model"))
        bar.set_backend(spec.backend if spec is not None else p.get("backend"))
        if spec is not None:
            bar.show_options(spec)  # `logitlab --threads 2`: the bar shows it, and loads with it

    def save(self) -> None:
        p, e = self.store, self._editing
        p.set("geometry", self._window.saveGeometry())
        for s in self._splitters:
            p.set(f"splitter/{s.objectName()}", s.saveState())
        p.set("sampler", e.settings)
        p.set("prompt", e.prompt.text)
        p.set("model", e.model.source)
        p.set("backend", e.model.backend)
        p.set("offline", self._bar.offline.isChecked())
        p.set("timeline/series", self._series.currentData())
        url, concurrency = self._bar.remote.server()
        p.set("remote/base_url", url)
        p.set("remote/concurrency", concurrency)
        p.save()

    def remember_model(self, source: str) -> None:
        """A model loaded: first of the recent models (at most `MAX_RECENT`), and in the model bar's list."""
        recent = [s for s in self.store.get("recent_models") if s != source]
        self.store.set("recent_models", [source, *recent][:MAX_RECENT])
        self._bar.add_recent([source])

    def _keep_folders(self, folders: list[str]) -> None:
        """Kept on disk at once: a folder the user added must not wait for a clean exit."""
        self.store.set("model_folders", folders)
        self.store.save()
