"""The Edit and Help menus' entries: undo and redo, copy the shown run's output (as text, as Markdown), select
all; the keyboard shortcuts and About (app/ui/files/about.py's dialogs, imported at their first use, not before the
window's first paint). In a text field with focus, its own keys win (Ctrl+Z, Ctrl+A, …).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu, QWidget

from app.core.session.store import Run
from app.ui.files import clipboard

KEY = QKeySequence.StandardKey


def add_edit_actions(menu: QMenu, undoers: Sequence[Callable[[], object]], redo: Callable[[], object],
                     shown: Callable[[], Run | None], output: QWidget) -> None:
    """Undo (the first of `undoers` that acts), Redo; Copy output, as text and as Markdown (of the run `shown`
    returns); Select All (the focused field's text, else `output`'s)."""

    def select_all() -> None:
        focused = output.window().focusWidget()
        (focused if hasattr(focused, "selectAll") else output).selectAll()

    _add(menu, "&Undo", KEY.Undo, lambda: any(undo() for undo in undoers))
    _add(menu, "&Redo", KEY.Redo, redo)
    menu.addSeparator()
    _add(menu, "&Copy output", QKeySequence("Ctrl+Shift+C"), lambda: clipboard.copy(clipboard.output_text(shown())))
    _add(menu, "Copy output as &Markdown", QKeySequence("Ctrl+Alt+C"),
         lambda: clipboard.copy(clipboard.output_markdown(shown())))
    menu.addSeparator()
    _add(menu, "Select &All", KEY.SelectAll, select_all)


def add_help_actions(menu: QMenu, window: QMainWindow, preferences_file: str, state_folder: Path) -> None:
    """Keyboard shortcuts (read from `window`'s menus) and About Logit Lab (where the preferences and the state
    live)."""

    def shortcuts() -> None:
        from app.ui.files.about import ShortcutsDialog, open_dialog

        open_dialog(ShortcutsDialog(window.menuBar(), window))

    def about() -> None:
        from app.ui.files.about import AboutDialog, locations, open_dialog

        open_dialog(AboutDialog(locations(preferences_file, state_folder), window))

    _add(menu, "&Keyboard shortcuts", KEY.HelpContents, shortcuts)
    menu.addSeparator()
    _add(menu, "&About Logit Lab", None, about)


def _add(menu: QMenu, text: str, keys: QKeySequence | QKeySequence.StandardKey | None,
         slot: Callable[[], object]) -> None:
    action = menu.addAction(text, slot)
    if keys is not None:
        action.setShortcut(keys)
