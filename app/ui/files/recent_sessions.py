"""File → Open recent session: the session files last opened or saved, most recent first, kept in the preferences
(`recent_sessions`). Opening one is the caller's (`open_file`); this holds only the list and its menu."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import QMenu, QWidget

from app.ui.files.preferences import Preferences

MAX_RECENT = 10


class RecentSessions:
    def __init__(self, store: Preferences, open_file: Callable[[str], object], parent: QWidget) -> None:
        self.store, self._open = store, open_file
        self.paths: list[str] = store.get("recent_sessions")  # most recent first
        self.menu = QMenu("Open &recent session", parent)
        self.menu.aboutToShow.connect(self._fill)

    def remember(self, path: Path | None) -> None:
        """`path` first in the recent files (None: the list emptied)."""
        if path is None:
            self.paths = []
        else:
            self.paths = [str(path.resolve()), *(p for p in self.paths if p != str(path.resolve()))][:MAX_RECENT]
        self.store.set("recent_sessions", self.paths)

    def _fill(self) -> None:
        menu = self.menu
        menu.clear()
        for i, p in enumerate(self.paths, 1):
            action = menu.addAction(f"&{i} {Path(p).name}  —  {Path(p).parent}")
            action.triggered.connect(lambda _=False, p=p: self._open(p))
        if not self.paths:
            menu.addAction("No recent sessions").setEnabled(False)
            return
        menu.addSeparator()
        menu.addAction("Clear the list").triggered.connect(lambda: self.remember(None))
