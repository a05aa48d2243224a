"""Edit and continue on the output view: Edit (or a double-click on the output) opens the editor on the shown
finished run, its note counts the run's tokens Continue keeps as one types; Continue (Ctrl+Enter) asks the view-model
to start the edit's run; Cancel (Esc) closes the editor, the output as it was; an edit undone opens it again with
its text. It holds no run: the view-model's branches (app/ui/viewmodel/branching.py) make the edit's request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QStackedWidget

from app.ui.run_view.output_editor import EditBar, OutputEditor

if TYPE_CHECKING:
    from PySide6.QtCore import SignalInstance

    from app.ui.viewmodel.playground import Playground

COUNT_MS = 150  # the note's count of the tokens kept waits for a pause in typing


class Output(Protocol):
    """What is edited: the output view's text (`token_view.TokenText`)."""

    edit_requested: SignalInstance  # a double-click, at a document position

    def output_range(self) -> tuple[int, int]: ...
    def document(self) -> QTextDocument: ...
    def setFocus(self) -> None: ...  # noqa: N802 - Qt's name
    def hasFocus(self) -> bool: ...  # noqa: N802 - Qt's name


class OutputEdit(QObject):
    note = Signal(str)  # what the output's note says while editing ("": its own note again)
    editing_changed = Signal(bool)

    def __init__(self, text: Output, pages: QStackedWidget, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.text, self.pages = text, pages
        self.editor = OutputEditor()
        self.bar = EditBar()
        pages.addWidget(self.editor)
        self._pg: Playground | None = None
        self._counting = QTimer(self, singleShot=True, interval=COUNT_MS)
        self._counting.timeout.connect(self._count_kept)

    def bind(self, pg: Playground) -> None:
        self._pg = pg
        self.bar.edit.clicked.connect(lambda: self.start())
        self.text.edit_requested.connect(lambda at: self.start(at))
        self.bar.go.clicked.connect(lambda: self.go(self.editor.toPlainText()))
        self.editor.continued.connect(self.go)
        for cancel in (self.bar.cancel.clicked, self.editor.cancelled):
            cancel.connect(self.stop)
        self.editor.textChanged.connect(self._counting.start)
        pg.branches.edit_undone.connect(lambda text: self.start(text=text))
        for signal in (pg.busy_changed, pg.finished, pg.cleared, pg.run_started):
            signal.connect(lambda *_: self.bar.edit.setEnabled(self.can_edit))

    @property
    def can_edit(self) -> bool:
        """A finished run is shown, and no run is in progress."""
        pg = self._pg
        return pg is not None and pg.trace is not None and not (pg.busy and not pg.loading_only)

    @property
    def editing(self) -> bool:
        return self.pages.currentWidget() is self.editor

    def start(self, at: int | None = None, text: str | None = None) -> bool:
        """Edit the shown run's output, the cursor at document position `at` (None: the end); `text`: the text to
        edit instead (an edit given back by Undo). False when there is no finished run to edit."""
        if not self.can_edit:
            return False
        self.editor.start(self.text.document(), *self.text.output_range(), at)
        if text is not None:
            self.editor.replace_text(text)
        self.pages.setCurrentWidget(self.editor)
        self.bar.set_editing(True)
        self.editing_changed.emit(True)
        self._count_kept()
        self.editor.setFocus()
        return True

    def go(self, text: str) -> bool:
        """Start the edit's run; what cannot start the view-model's branches refuse with a reason, and the editor
        stays open with the text."""
        trace = self._pg.trace if self._pg is not None else None
        return trace is not None and self._pg.branches.continue_edit(self.editor.as_recorded(text, trace.text))

    def stop(self) -> None:
        """Close the editor: the output shows again as it was."""
        if self.editing:
            had_focus = self.editor.hasFocus()
            self.pages.setCurrentWidget(self.pages.widget(0))
            self.bar.set_editing(False)
            self.editing_changed.emit(False)
            self.note.emit("")
            if had_focus:
                self.text.setFocus()

    def undo(self) -> bool:
        """Edit → Undo with the output in focus: the editor's own undo while editing, else the session's latest
        delete or edit taken back. False when the output has not the focus, or nothing was undone."""
        if self.editing and self.editor.hasFocus():
            self.editor.undo()
            return True
        return self._pg is not None and self.text.hasFocus() and self._pg.branches.undo()

    def _count_kept(self) -> None:
        """The note while editing: the keys, and how many of the run's tokens Continue keeps (the rest is new)."""
        if not self.editing:
            return
        p = self._pg.branches.edit_prompt(self.editor.toPlainText())
        n = len(self._pg.trace.prompt_ids) if p is not None else 0
        kept = f" keeps the run's first {p.kept} tokens, {len(p.ids) - n - p.kept} new;" if p is not None else ""
        self.note.emit(f"Editing: Continue (Ctrl+Enter){kept} Esc cancels")
