"""File → New / Open… / Open Recent / Save / Save As… for the window's session, its title, and autosave.

`Sessions` reads the editing state (prompt, chat, sampler settings, model) and the view-model's runs into a
`SavedSession` and puts one back (`app/core/session_file.py` writes and reads the file). The title names the file
and marks it modified while that differs from what was last saved or opened; New, Open and closing then ask
first. A few seconds after the last change the session is written to an autosave file (atomically, off the UI
thread), one per window, named by its process id (`autosave-<pid>.jsonl`), so that windows running side by side
never touch each other's. A clean exit removes it; a start offers back, one after the other in the banner, every
autosave a window left that is gone (killed, crashed): its process no longer runs. What is offered and not
restored stays offered at each start until a clean exit, which keeps it aside as `recovered-<pid>.jsonl` (File →
Open reads it) and offers it no more.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Literal

import platformdirs
from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMenu, QMessageBox, QWidget

from app.core import session_file
from app.core.session_file import EncodedTraces, SavedSession, SessionFormatError
from app.ui.banner import Banner
from app.ui.editing_state import Prompt
from app.ui.playground import Playground
from app.ui.preferences import Preferences, default_path

AUTOSAVE_MS = 2500  # after the last change
MAX_RECENT = 10
SUFFIX = ".jsonl"
FILTER = f"Logit Lab sessions (*{SUFFIX});;All files (*)"
AUTOSAVE = re.compile(r"autosave(?:-(\d+))?\.jsonl")  # a window's, by its process id (none: an older version's)
Answer = Literal["save", "discard", "cancel"]
log = logging.getLogger(__name__)


def state_dir(prefs: Preferences) -> Path:
    """Where the autosave lives: the user state folder, or beside a preferences file the window was given
    instead of the default one (tests, a portable setup), so two such windows never share one."""
    path = Path(prefs.store.fileName())
    return platformdirs.user_state_path("logitlab", appauthor=False) if path == default_path() else path.parent


class Sessions(QObject):
    autosave_failed = Signal(str)  # from the writer thread: why (the banner says it)

    def __init__(self, window: QWidget, playground: Playground, banner: Banner, store: Preferences,
                 folder: Path) -> None:
        """`window`: whose title names the session and over which the dialogs open."""
        super().__init__(window)
        self.w, self.pg, self.editing, self.banner, self.store = window, playground, playground.editing, banner, store
        self.path: Path | None = None  # the session's file (None: never saved)
        self.folder, self.autosave_path = folder, folder / f"autosave-{os.getpid()}.jsonl"
        self.offered: list[Path] = []  # autosaves of windows gone without a clean exit, offered back: newest first
        self.recent: list[str] = store.get("recent_sessions")  # most recent first
        self._saved: tuple | None = None  # the state last saved or opened; None until the window is restored
        self._closed = False
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="autosave")  # one write at a time
        self._encoded = EncodedTraces()  # the runs' lines, encoded once for every autosave (writer thread only)
        self._timer = QTimer(self, singleShot=True, interval=AUTOSAVE_MS)
        self._timer.timeout.connect(self.autosave)
        self._make_actions()
        self._wire()
        QTimer.singleShot(0, self._started)  # once the window has restored its prompt and settings

    # actions ------------------------------------------------------------------------------------------------
    def _make_actions(self) -> None:
        w = self.w
        self.new_action = QAction("&New session", w, shortcut=QKeySequence.StandardKey.New)
        self.open_action = QAction("Open &session…", w, shortcut=QKeySequence("Ctrl+Shift+O"),
                                   toolTip="Open a session (or a run's trace) saved by Logit Lab")
        self.save_action = QAction("&Save session", w, shortcut=QKeySequence.StandardKey.Save)
        self.save_as_action = QAction("Save session &as…", w, shortcut=QKeySequence.StandardKey.SaveAs)
        self.recent_menu = QMenu("Open &recent session", w)
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        self.new_action.triggered.connect(self.new)
        self.open_action.triggered.connect(self._choose_and_open)
        self.save_action.triggered.connect(self.save)
        self.save_as_action.triggered.connect(self._choose_and_save)

    def add_to(self, menu: QMenu) -> None:
        """New, Open, Open Recent, Save and Save As at the top of `menu`, then a separator."""
        first = menu.actions()[0] if menu.actions() else None
        menu.insertActions(first, [self.new_action, self.open_action])
        menu.insertMenu(first, self.recent_menu)
        menu.insertActions(first, [self.save_action, self.save_as_action])
        menu.insertSeparator(first)

    def _wire(self) -> None:
        for edited in (self.editing.prompt_changed, self.editing.settings_changed, self.editing.model_changed):
            edited.connect(lambda _value: self.changed())
        self.pg.session_changed.connect(self.changed)  # a run added, finished, renamed or deleted
        self.pg.session_replaced.connect(self.changed)
        self.autosave_failed.connect(self.banner.show_message)

    def _started(self) -> None:
        self._saved = self.state()
        self._show_title()
        self._offer_recovery()

    # the session as the editing state holds it -----------------------------------------------------------------
    def snapshot(self, origin: str = "") -> SavedSession:
        e, shown = self.editing, self.pg.shown
        return SavedSession(prompt=e.prompt.text, messages=e.prompt.messages, chat=e.prompt.chat,
                            settings=e.settings, model=e.model.source, backend=e.model.backend,
                            runs=session_file.runs_of(self.pg.session),
                            shown=shown.id if shown is not None and shown.trace is not None else None, origin=origin)

    def state(self) -> tuple:
        """What a save would keep, less the traces (a finished run's never change): compared to see changes."""
        e = self.editing
        runs = tuple((r.id, r.name, r.parent) for r in self.pg.session.runs.values() if r.trace is not None)
        return (e.prompt, e.settings, e.model.source, e.model.backend, runs)

    @property
    def modified(self) -> bool:
        return self._saved is not None and self.state() != self._saved

    def changed(self) -> None:
        """Something in the session may have changed: redo the title's mark and autosave a little later."""
        if self._saved is None or self._closed:
            return
        self._show_title()
        self._timer.start()

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
        return True

    # verbs --------------------------------------------------------------------------------------------------
    def new(self) -> bool:
        """An empty session (no prompt, no runs) with the current settings and model."""
        if not self._may_replace():
            return False
        empty = self.snapshot()
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
        self._remember(path)
        return True

    def save(self) -> bool:
        """Save to the session's file (asking for one the first time); False if not saved."""
        return self.save_as(self.path) if self.path is not None else self._choose_and_save()

    def save_as(self, path: str | os.PathLike) -> bool:
        path = Path(path)
        try:
            session_file.save(self.snapshot(), path)
        except OSError as e:
            self.banner.show_message(f"Cannot save {path}: {e.strerror or e}")
            return False
        self._set_path(path)
        self._remember(path)
        return True

    def _set_path(self, path: Path | None) -> None:
        """The session now is what `path` holds (None: a new, unsaved one): unmodified, no autosave needed."""
        self.path, self._saved = path, self.state()
        self._show_title()
        self._timer.stop()
        self._write(None)

    def may_close(self) -> bool:
        """Whether the window may close now (unsaved changes: saved or discarded, as the user answers)."""
        return self._closed or self._may_replace(running_ok=True)

    def closed(self) -> None:
        """A clean exit: this run's autosave is needed no more, and a session offered back and not restored is
        kept aside as recovered-<pid>.jsonl (File → Open reads it), offered no more."""
        self._closed = True
        self._timer.stop()
        self._writer.shutdown(wait=True)
        with contextlib.suppress(OSError):
            self.autosave_path.unlink()
        for path in self.offered:
            with contextlib.suppress(OSError):
                os.replace(path, path.with_name(path.name.replace("autosave", "recovered", 1)))

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

    # file dialogs and recent files ----------------------------------------------------------------------------
    def _folder(self) -> str:
        where = self.path or (Path(self.recent[0]) if self.recent else None)
        return str(where.parent) if where is not None else str(Path.home())

    def _choose_and_open(self) -> bool:
        path, _ = QFileDialog.getOpenFileName(self.w, "Open session", self._folder(), FILTER)
        return bool(path) and self.open(path)

    def _choose_and_save(self) -> bool:
        start = str(Path(self._folder()) / (self.path.name if self.path else f"untitled{SUFFIX}"))
        path, _ = QFileDialog.getSaveFileName(self.w, "Save session", start, FILTER)
        if not path:
            return False
        return self.save_as(path if Path(path).suffix else path + SUFFIX)

    def _remember(self, path: Path | None) -> None:
        """`path` first in the recent files (None: the list emptied)."""
        if path is None:
            self.recent = []
        else:
            self.recent = [str(path.resolve()), *(p for p in self.recent if p != str(path.resolve()))][:MAX_RECENT]
        self.store.set("recent_sessions", self.recent)

    def _fill_recent(self) -> None:
        menu = self.recent_menu
        menu.clear()
        for i, p in enumerate(self.recent, 1):
            action = menu.addAction(f"&{i} {Path(p).name}  —  {Path(p).parent}")
            action.triggered.connect(lambda _=False, p=p: self.open(p))
        if not self.recent:
            menu.addAction("No recent sessions").setEnabled(False)
            return
        menu.addSeparator()
        menu.addAction("Clear the list").triggered.connect(lambda: self._remember(None))

    # autosave -----------------------------------------------------------------------------------------------
    def autosave(self) -> None:
        """Write the session to the autosave file if it has unsaved changes, else remove that file."""
        if not self._closed:
            self._write(self.snapshot(str(self.path or "")) if self.modified else None)

    def _write(self, doc: SavedSession | None) -> None:
        """Queue the autosave file's write (or removal: None) behind any still going, off the UI thread."""
        if self._closed:
            return
        self._writer.submit(self._write_now, doc)

    def _write_now(self, doc: SavedSession | None) -> None:
        """On the writer thread: a failure goes to the banner (through a queued signal), never to a traceback."""
        try:
            _write_autosave(self.autosave_path, doc, self._encoded)
        except OSError as e:
            self.autosave_failed.emit(f"Autosave failed: cannot write {self.autosave_path}: {e.strerror or e}")

    def _offer_recovery(self) -> None:
        """Offer back what windows gone without a clean exit (killed, crashed) autosaved, the newest first."""
        self.offered = crashed_autosaves(self.folder)
        self._offer_next()

    def _offer_next(self) -> None:
        """The banner's offer of the newest autosave still offered (one that cannot be read is kept aside)."""
        while self.offered:
            path = self.offered[0]
            try:
                head = session_file.load_header(path)
                when = datetime.datetime.fromtimestamp(path.stat().st_mtime).strftime("%H:%M on %d %b")
            except (OSError, SessionFormatError) as e:  # nothing this version can read: not offered again
                log.warning("the autosaved session %s cannot be read (%s): it is kept as recovered-…", path,
                            getattr(e, "strerror", None) or e)
                self.offered.pop(0)
                with contextlib.suppress(OSError):
                    os.replace(path, path.with_name(path.name.replace("autosave", "recovered", 1)))
                continue
            what = f"“{Path(head.origin).name}”" if head.origin else "an unsaved session"
            start = " ".join(head.prompt.split())[:40]
            more = f" ({len(self.offered) - 1} more after it)" if len(self.offered) > 1 else ""
            self.banner.show_message(f"Logit Lab did not close cleanly: {what} from {when} (prompt “{start}…”) "
                                       f"can be restored{more}.", "Restore", self.restore)
            return

    def restore(self) -> bool:
        """Open the newest session offered back, unsaved (under its file's name, if it had one); then offer the
        next one, if there is one."""
        if not self.offered:
            return False
        path = self.offered[0]
        try:
            doc = session_file.load(path)
        except (OSError, SessionFormatError) as e:
            self.offered.pop(0)
            self.banner.show_message(f"Cannot restore the autosaved session: {getattr(e, 'strerror', None) or e}")
            return False
        if not self._may_replace() or not self._apply(doc):
            return False
        self.offered.pop(0)
        self.path, self._saved = (Path(doc.origin) if doc.origin else None), ()  # () : modified until saved
        self._write(None)  # any autosave of this run so far is of what was just replaced
        with contextlib.suppress(OSError):  # the restored session is this run's autosave now: safe if killed again
            self._writer.submit(os.replace, path, self.autosave_path).result()
        self.changed()
        self._offer_next()
        return True


def crashed_autosaves(folder: Path) -> list[Path]:
    """The autosave files in `folder` of windows gone without a clean exit, newest first. A window still running
    keeps its own: its process is alive and was started before the file was last written (one started later
    holds a reused process id)."""
    found = []
    for path in folder.glob("autosave*.jsonl"):
        match = AUTOSAVE.fullmatch(path.name)
        pid = int(match[1]) if match and match[1] else None
        if not match or pid == os.getpid():
            continue
        try:
            written = path.stat().st_mtime
        except OSError:  # gone meanwhile (restored by another window)
            continue
        if pid is None or not _running_since(pid, written):
            found.append((written, path))
    return [path for _, path in sorted(found, reverse=True)]


def _running_since(pid: int, written: float) -> bool:
    import psutil  # (not before the window's first paint)

    try:
        return psutil.Process(pid).create_time() <= written + 1  # +1: the two clocks' rounding
    except psutil.NoSuchProcess:  # a zombie too: it runs no more
        return False
    except psutil.Error:  # alive, and not ours to look at: left alone
        return True


def _write_autosave(path: Path, doc: SavedSession | None, cache: EncodedTraces) -> None:
    if doc is None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    session_file.save(doc, path, cache)


def question(parent: QWidget, name: str) -> QMessageBox:
    """Save / Discard / Cancel for a session with unsaved changes."""
    box = QMessageBox(QMessageBox.Icon.Warning, "Unsaved changes", f"Save the changes to {name}?",
                      QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard
                      | QMessageBox.StandardButton.Cancel, parent)
    box.setInformativeText("Without saving, its prompt, settings and runs since the last save are lost.")
    box.setDefaultButton(QMessageBox.StandardButton.Save)
    return box
