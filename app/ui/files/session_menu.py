"""File → New session / Open session… / Open recent session / Save session / Save session as…: the entries, where they
go in the File menu, and the file dialogs that ask for a path (starting in the session's folder, else the last
one's). What each entry does is `Sessions`' (app/ui/files/sessions.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMenu, QWidget

if TYPE_CHECKING:
    from app.ui.files.sessions import Sessions

SUFFIX = ".jsonl"
FILTER = f"Logit Lab sessions (*{SUFFIX});;All files (*)"


class SessionMenu:
    def __init__(self, sessions: Sessions, window: QWidget) -> None:
        """`window`: the actions' parent, over which the dialogs open."""
        self._sessions, self._window = sessions, window
        self.new_action = QAction("&New session", window, shortcut=QKeySequence.StandardKey.New)
        self.open_action = QAction("Open &session…", window, shortcut=QKeySequence("Ctrl+Shift+O"),
                                   toolTip="Open a session (or a run's trace) saved by Logit Lab")
        self.save_action = QAction("&Save session", window, shortcut=QKeySequence.StandardKey.Save)
        self.save_as_action = QAction("Save session &as…", window, shortcut=QKeySequence.StandardKey.SaveAs)
        self.new_action.triggered.connect(sessions.new)
        self.open_action.triggered.connect(self.choose_and_open)
        self.save_action.triggered.connect(sessions.save)
        self.save_as_action.triggered.connect(self.choose_and_save)

    def add_to(self, menu: QMenu) -> None:
        """New, Open, Open Recent, Save and Save As at the top of `menu`, then a separator."""
        first = menu.actions()[0] if menu.actions() else None
        menu.insertActions(first, [self.new_action, self.open_action])
        menu.insertMenu(first, self._sessions.recent.menu)
        menu.insertActions(first, [self.save_action, self.save_as_action])
        menu.insertSeparator(first)

    def choose_and_open(self) -> bool:
        path, _ = QFileDialog.getOpenFileName(self._window, "Open session", self._folder(), FILTER)
        return bool(path) and self._sessions.open(path)

    def choose_and_save(self) -> bool:
        """Ask where to save the session (a name without a suffix gets `SUFFIX`); False if not saved."""
        current = self._sessions.path
        start = str(Path(self._folder()) / (current.name if current else f"untitled{SUFFIX}"))
        path, _ = QFileDialog.getSaveFileName(self._window, "Save session", start, FILTER)
        if not path:
            return False
        return self._sessions.save_as(path if Path(path).suffix else path + SUFFIX)

    def _folder(self) -> str:
        recent = self._sessions.recent.paths
        where = self._sessions.path or (Path(recent[0]) if recent else None)
        return str(where.parent) if where is not None else str(Path.home())
