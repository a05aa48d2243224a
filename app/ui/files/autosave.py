"""The session's autosave and the recovery of what a window gone without a clean exit left.

A few seconds after the last change the session is written to an autosave file (atomically, off the UI thread),
one per window, named by its process id (`autosave-<pid>.jsonl`), so that windows running side by side never touch
each other's. A clean exit removes it; a start offers back, one after the other in the banner, every autosave a
window left that is gone (killed, crashed): its process no longer runs. What is offered and not restored stays
offered at each start until a clean exit, which keeps it aside as `recovered-<pid>.jsonl` (File → Open reads it)
and offers it no more. The session file's lifecycle (new, open, save, the title) is `Sessions`'
(app/ui/files/sessions.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.session import session_file
from app.core.session.session_file import EncodedTraces, SavedSession, SessionFormatError
from app.ui.banner import Banner

AUTOSAVE_MS = 2500  # after the last change
AUTOSAVE = re.compile(r"autosave(?:-(\d+))?\.jsonl")  # a window's, by its process id (none: an older version's)
log = logging.getLogger(__name__)


class Autosave(QObject):
    """Writes `unsaved()` (the session, or None when nothing is unsaved) to `path` when due, and offers back the
    autosaves of windows gone; `recover(doc)` puts a restored one into the window (False: refused)."""

    failed = Signal(str)  # from the writer thread: why (the banner says it)

    def __init__(self, folder: Path, banner: Banner, unsaved: Callable[[], SavedSession | None],
                 recover: Callable[[SavedSession], bool], parent: QObject) -> None:
        super().__init__(parent)
        self.banner, self._unsaved, self._recover = banner, unsaved, recover
        self.folder, self.path = folder, folder / f"autosave-{os.getpid()}.jsonl"
        self.offered: list[Path] = []  # autosaves of windows gone without a clean exit, offered back: newest first
        self._closed = False
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="autosave")  # one write at a time
        self._encoded = EncodedTraces()  # the runs' lines, encoded once for every autosave (writer thread only)
        self._timer = QTimer(self, singleShot=True, interval=AUTOSAVE_MS)
        self._timer.timeout.connect(self.save_now)
        self.failed.connect(banner.show_message)

    def later(self) -> None:
        """Something changed: write a few seconds after the last change."""
        self._timer.start()

    def save_now(self) -> None:
        """Write the session to the autosave file if it has unsaved changes, else remove that file."""
        if not self._closed:
            self._write(self._unsaved())

    def clear(self) -> None:
        """Nothing is unsaved now (saved, opened, new): no autosave file, none due."""
        self._timer.stop()
        self._write(None)

    def closed(self) -> None:
        """A clean exit: this run's autosave is needed no more, and a session offered back and not restored is
        kept aside as recovered-<pid>.jsonl, offered no more."""
        self._closed = True
        self._timer.stop()
        self._writer.shutdown(wait=True)
        with contextlib.suppress(OSError):
            self.path.unlink()
        for path in self.offered:
            with contextlib.suppress(OSError):
                os.replace(path, _recovered(path))

    def _write(self, doc: SavedSession | None) -> None:
        """Queue the autosave file's write (or removal: None) behind any still going, off the UI thread."""
        if not self._closed:
            self._writer.submit(self._write_now, doc)

    def _write_now(self, doc: SavedSession | None) -> None:
        """On the writer thread: a failure goes to the banner (through a queued signal), never to a traceback."""
        try:
            _write_autosave(self.path, doc, self._encoded)
        except OSError as e:
            self.failed.emit(f"Autosave failed: cannot write {self.path}: {e.strerror or e}")

    # recovery -----------------------------------------------------------------------------------------------
    def offer(self) -> None:
        """Offer back what windows gone without a clean exit (killed, crashed) autosaved, the newest first."""
        self.offered = crashed_autosaves(self.folder)
        self._offer_next()

    def _offer_next(self) -> None:
        """The banner's offer of the newest autosave still offered (one that cannot be read is kept aside)."""
        while self.offered:
            path = self.offered[0]
            try:
                head = session_file.load_header(path)
                when = time.strftime("%H:%M on %d %b", time.localtime(path.stat().st_mtime))
            except (OSError, SessionFormatError) as e:  # nothing this version can read: not offered again
                log.warning("the autosaved session %s cannot be read (%s): it is kept as recovered-…", path,
                            getattr(e, "strerror", None) or e)
                self.offered.pop(0)
                with contextlib.suppress(OSError):
                    os.replace(path, _recovered(path))
                continue
            what = f"“{Path(head.origin).name}”" if head.origin else "an unsaved session"
            start = " ".join(head.prompt.split())[:40]
            more = f" ({len(self.offered) - 1} more after it)" if len(self.offered) > 1 else ""
            self.banner.show_message(f"Logit Lab did not close cleanly: {what} from {when} (prompt “{start}…”) "
                                     f"can be restored{more}.", "Restore", self.restore)
            return

    def restore(self) -> bool:
        """Open the newest session offered back (through `recover`); then offer the next one, if there is one."""
        if not self.offered:
            return False
        path = self.offered[0]
        try:
            doc = session_file.load(path)
        except (OSError, SessionFormatError) as e:
            self.offered.pop(0)
            self.banner.show_message(f"Cannot restore the autosaved session: {getattr(e, 'strerror', None) or e}")
            return False
        if not self._recover(doc):
            return False
        self.offered.pop(0)
        self._write(None)  # any autosave of this run so far is of what was just replaced
        with contextlib.suppress(OSError):  # the restored session is this run's autosave now: safe if killed again
            self._writer.submit(os.replace, path, self.path).result()
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


def _recovered(path: Path) -> Path:
    return path.with_name(path.name.replace("autosave", "recovered", 1))


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
