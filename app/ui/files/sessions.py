"""File → New / Open… / Open Recent / Save / Save As… for the window's session, and its title.

`Sessions` reads the editing state (prompt, chat, sampler settings, model) and the view-model's runs into a
`SavedSession` (`snapshot`) and puts one back (`app/core/session/session_file.py` writes and reads the file). The
title names the file and marks it modified while that differs from what was last saved or opened; New, Open and
closing then ask first. What is not the file's lifecycle has its own object: the menu entries and their file dialogs
(`SessionMenu`, app/ui/files/session_menu.py), the autosave and the recovery of what a crashed window left
(`Autosave`, app/ui/files/autosave.py), the recent files' list and menu (`RecentSessions`, recent_sessions.py).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import platformdirs
from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QMessageBox, QWidget

from app.core.session import session_file
from app.core.session.run_group import SIDE_BY_SIDE
from app.core.session.session_file import SavedSession, SessionFormatError
from app.core.session.store import Session
from app.ui.banner import Banner
from app.ui.files.autosave import Autosave
from app.ui.files.preferences import Preferences, default_path
from app.ui.files.recent_sessions import RecentSessions
from app.ui.files.session_menu import SessionMenu
from app.ui.viewmodel.editing_state import Prompt
from app.ui.viewmodel.playground import Playground

Answer = Literal["save", "discard", "cancel"]


def state_dir(prefs: Preferences) -> Path:
    """Where the autosave lives: the user state folder, or beside a preferences file the window was given
    instead of the default one (tests, a portable setup), so two such windows never share one."""
    path = Path(prefs.store.fileName())
    return platformdirs.user_state_path("logitlab", appauthor=False) if path == default_path() else path.parent


class Sessions(QObject):
    def __init__(self, window: QWidget, playground: Playground, banner: Banner, store: Preferences,
                 folder: Path) -> None:
        """`window`: whose title names the session and over which the dialogs open; `folder`: the autosave's."""
        super().__init__(window)
        self.w, self.pg, self.editing, self.banner, self.store = window, playground, playground.editing, banner, store
        self.path: Path | None = None  # the session's file (None: never saved)
        self._saved: tuple | None = None  # the state last saved or opened; None until the window is restored
        self._closed = False
        self.autosave = Autosave(folder, banner, self._unsaved, self.recover, self)
        self.recent = RecentSessions(store, self.open, window)
        self.menu = SessionMenu(self, window)
        self._wire()
        QTimer.singleShot(0, self._started)  # once the window has restored its prompt and settings

    def _wire(self) -> None:
        for edited in (self.editing.prompt_changed, self.editing.settings_changed, self.editing.model_changed):
            edited.connect(lambda _value: self.changed())
        self.pg.session_changed.connect(self.changed)  # a run added, finished, renamed or deleted
        self.pg.session_replaced.connect(self.changed)

    def _started(self) -> None:
        self._saved = state(self.pg)
        self._show_title()
        self.autosave.offer()

    @property
    def modified(self) -> bool:
        return self._saved is not None and state(self.pg) != self._saved

    def changed(self) -> None:
        """Something in the session may have changed: redo the title's mark and autosave a little later."""
        if self._saved is None or self._closed:
            return
        self._show_title()
        self.autosave.later()

    def _show_title(self) -> None:
        self.w.setWindowTitle(f"{self.path.name if self.path else 'Untitled'}[*] — Logit Lab")
        self.w.setWindowModified(self.modified)

    def _apply(self, doc: SavedSession) -> bool:
        """Put `doc` into the editing state and the view-model; refused (False, with a message) while a run is
        going."""
        session, shown = session_file.to_session(doc)
        if not self.pg.open_session(session, shown):
            self.banner.show_message("A run is in progress: stop it (Esc) before opening another session.")
            return False
        e = self.editing
        e.set_prompt(Prompt(doc.prompt, doc.messages, doc.chat))
        e.set_settings(doc.settings)
        e.set_model(replace(e.model, source=doc.model, backend=doc.backend))
        open_views(getattr(self.w, "tools", {}), self.pg.session)
        return True

    def _unsaved(self) -> SavedSession | None:
        """What the autosave keeps: the session with unsaved changes, None without."""
        return snapshot(self.pg, str(self.path or "")) if self.modified else None

    def recover(self, doc: SavedSession) -> bool:
        """Show an autosaved `doc` as unsaved (under its file's name, if it had one); False if refused."""
        if not self._may_replace() or not self._apply(doc):
            return False
        self.path, self._saved = (Path(doc.origin) if doc.origin else None), ()  # () : modified until saved
        self.changed()
        return True

    # verbs --------------------------------------------------------------------------------------------------
    def new(self) -> bool:
        """An empty session (no prompt, no runs) with the current settings and model."""
        if not self._may_replace():
            return False
        empty = snapshot(self.pg)
        if not self._apply(SavedSession(settings=empty.settings, model=empty.model, backend=empty.backend)):
            return False
        self._set_path(None)
        return True

    def open(self, path: str | os.PathLike) -> bool:
        """Open a session file (or a run's trace); a newer or damaged file leaves the current session as it was."""
        path = Path(path)
        if not self._may_replace():
            return False
        try:
            doc = session_file.load(path)
        except (OSError, SessionFormatError) as e:
            self.banner.show_message(f"Cannot open {path.name}: {getattr(e, 'strerror', None) or e}")
            return False
        return self.show_file(doc, path)

    def show_file(self, doc: SavedSession, path: str | os.PathLike) -> bool:
        """Show `doc`, read from `path`, as that file's session (False, with a message, while a run is going)."""
        path = Path(path)
        if not self._apply(doc):
            return False
        self._set_path(path)
        self.recent.remember(path)
        return True

    def save(self) -> bool:
        """Save to the session's file (asking for one the first time); False if not saved."""
        return self.save_as(self.path) if self.path is not None else self.menu.choose_and_save()

    def save_as(self, path: str | os.PathLike) -> bool:
        path = Path(path)
        try:
            session_file.save(snapshot(self.pg), path)
        except OSError as e:
            self.banner.show_message(f"Cannot save {path}: {e.strerror or e}")
            return False
        self._set_path(path)
        self.recent.remember(path)
        return True

    def _set_path(self, path: Path | None) -> None:
        """The session now is what `path` holds (None: a new, unsaved one): unmodified, no autosave needed."""
        self.path, self._saved = path, state(self.pg)
        self._show_title()
        self.autosave.clear()

    def may_close(self) -> bool:
        """Whether the window may close now (unsaved changes: saved or discarded, as the user answers)."""
        return self._closed or self._may_replace(running_ok=True)

    def closed(self) -> None:
        """A clean exit: no more changes are followed; the autosave's own exit (app/ui/files/autosave.py)."""
        self._closed = True
        self.autosave.closed()

    def _may_replace(self, running_ok: bool = False) -> bool:
        pg = self.pg
        if not running_ok and pg.busy and not pg.loading_only:
            self.banner.show_message("A run is in progress: stop it (Esc) before opening another session.")
            return False
        if not self.modified:
            return True
        answer = self.ask()
        return answer == "discard" or (answer == "save" and self.save())

    def ask(self) -> Answer:
        """What to do with unsaved changes, as the user answers (a test, or a screenshot, sets its own answer)."""
        box = question(self.w, self.path.name if self.path else "Untitled")
        box.exec()
        return {QMessageBox.StandardButton.Save: "save", QMessageBox.StandardButton.Discard: "discard"}.get(
            box.standardButton(box.clickedButton()), "cancel")


def question(parent: QWidget, name: str) -> QMessageBox:
    """Save / Discard / Cancel for a session with unsaved changes."""
    box = QMessageBox(QMessageBox.Icon.Warning, "Unsaved changes", f"Save the changes to {name}?",
                      QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard
                      | QMessageBox.StandardButton.Cancel, parent)
    box.setInformativeText("Without saving, its prompt, settings and runs since the last save are lost.")
    box.setDefaultButton(QMessageBox.StandardButton.Save)
    return box


def snapshot(pg: Playground, origin: str = "") -> SavedSession:
    """The session as the editing state and the view-model hold it now (`origin`: the file it came from)."""
    e, shown, session = pg.editing, pg.shown, pg.session
    return SavedSession(prompt=e.prompt.text, messages=e.prompt.messages, chat=e.prompt.chat, settings=e.settings,
                        model=e.model.source, backend=e.model.backend, runs=session_file.runs_of(session),
                        groups=session_file.groups_of(session), prompt_set=session.prompt_set, views=session.views,
                        shown=shown.id if shown is not None and shown.trace is not None else None, origin=origin)


def state(pg: Playground) -> tuple:
    """What a save would keep, less the traces (a finished run's never change): compared to see changes."""
    e, session = pg.editing, pg.session
    runs = tuple((r.id, r.name, r.parent) for r in session.runs.values() if r.trace is not None)
    return (e.prompt, e.settings, e.model.source, e.model.backend, runs, session_file.groups_of(session),
            session.prompt_set, session.views)


def open_views(tools: dict[str, Any], session: Session) -> None:
    """Open the Run-menu views (`tools`, by name) that a saved session's records are for, which draw them: its
    side-by-side columns, a beam search, a speculative run, a sweep, a Sample ×N list, a run's think probes, the
    steering dock's grid (its tab in front)."""
    side = tools.get("side")
    if side is not None and any(g.kind == SIDE_BY_SIDE for g in session.groups):
        side.open()
    views = session.views
    for name, record in (("beam", views.beam), ("speculative", views.speculative), ("sweep", views.sweep),
                         ("samples", views.samples), ("think", views.probes), ("steering", views.steer_grid)):
        if record is not None and name in tools:
            view = tools[name].open()
            if name == "steering":
                view.show_grid()
