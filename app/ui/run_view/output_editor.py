"""The output made editable (Edit, or a double-click on the output): a copy of the shown text with its shading,
what is typed drawn in the edit's own colour, its own undo (Ctrl+Z). Ctrl+Enter continues from the edited text,
Esc cancels; the window's shortcuts for those keys give way while it has the focus. It edits text and says what
was asked; the view-model turns the text into a run.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QColor, QKeyEvent, QTextCharFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import QHBoxLayout, QTextEdit, QToolButton, QWidget

from app.core.session.edits import common_chars

EDITED = QColor(20, 80, 190)  # text a person typed into the output: blue on a pale blue
EDITED_BACKGROUND = QColor(20, 80, 190, 28)
CONTINUE_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter)


def typed_format() -> QTextCharFormat:
    """How text a person typed into the output looks (here, and in the edit's run after it)."""
    f = QTextCharFormat()
    f.setForeground(EDITED)
    f.setBackground(EDITED_BACKGROUND)  # (typed white space shows too)
    return f


class OutputEditor(QTextEdit):
    continued = Signal(str)  # Ctrl+Enter: the edited text
    cancelled = Signal()  # Esc

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAcceptRichText(False)  # a paste is text, in the typed look
        self._typed = typed_format()
        self.shown = ""  # the text as it was when the edit began (Qt's plain text of it)
        self.cursorPositionChanged.connect(lambda: self.setCurrentCharFormat(self._typed))

    def start(self, source: QTextDocument, begin: int, end: int, at: int | None = None) -> None:
        """Edit a copy of `source`'s characters [begin, end) (the output's tokens: no end mark, no text before
        them), the cursor at `at` (a position in `source`; None: the end)."""
        doc = source.clone(self)
        doc.setUndoRedoEnabled(False)
        cur = QTextCursor(doc)
        cur.setPosition(end)
        cur.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cur.removeSelectedText()
        cur.setPosition(0)
        cur.setPosition(begin, QTextCursor.MoveMode.KeepAnchor)
        cur.removeSelectedText()
        doc.setUndoRedoEnabled(True)
        self.setDocument(doc)  # (the copy before, a child of this editor, is deleted)
        self.shown = self.toPlainText()
        cursor = self.textCursor()
        cursor.setPosition(len(self.shown) if at is None else max(0, min(at - begin, len(self.shown))))
        self.setTextCursor(cursor)

    def replace_text(self, text: str) -> None:
        """Make the text `text`, changing only what differs from it (in the typed look): an edit given back."""
        now = self.toPlainText()
        a = common_chars(now, text)
        b = common_chars(now[a:][::-1], text[a:][::-1])
        cur = self.textCursor()
        cur.setPosition(a)
        cur.setPosition(len(now) - b, QTextCursor.MoveMode.KeepAnchor)
        cur.insertText(text[a:len(text) - b], self._typed)
        self.setTextCursor(cur)

    def as_recorded(self, text: str, record: str) -> str:
        """`text` (edited) with what was not changed as `record` has it: Qt's plain text of the output, `shown`,
        may differ from it in a character or two (a no-break space made a space, a line separator a line break)."""
        if self.shown == record or len(self.shown) != len(record):
            return text
        same = common_chars(self.shown, text)
        return record[:same] + text[same:]

    def event(self, e: QEvent) -> bool:
        """Ctrl+Enter and Esc are the editor's while it has the focus (the window's Generate and Stop otherwise)."""
        if e.type() == QEvent.Type.ShortcutOverride and self._is_ours(e):
            e.accept()
            return True
        return super().event(e)

    def keyPressEvent(self, e: QKeyEvent) -> None:  # noqa: N802 - Qt override
        if not self._is_ours(e):
            super().keyPressEvent(e)
        elif e.key() == Qt.Key.Key_Escape:
            self.cancelled.emit()
        else:
            self.continued.emit(self.toPlainText())

    @staticmethod
    def _is_ours(e: QKeyEvent) -> bool:
        if e.key() == Qt.Key.Key_Escape:
            return e.modifiers() == Qt.KeyboardModifier.NoModifier
        mods = e.modifiers() & ~Qt.KeyboardModifier.KeypadModifier
        return e.key() in CONTINUE_KEYS and mods == Qt.KeyboardModifier.ControlModifier


class EditBar(QWidget):
    """The output's edit buttons: Edit, or while editing, Continue and Cancel."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.edit = QToolButton(text="Edit", enabled=False, toolTip="Edit the output, then continue from your text "
                                "(or double-click the output)")
        self.go = QToolButton(text="Continue", visible=False, toolTip="Continue from the edited text (Ctrl+Enter): "
                              "a new run, a child of this one marked “edit”")
        self.cancel = QToolButton(text="Cancel", visible=False, toolTip="Cancel the edit (Esc)")
        box = QHBoxLayout(self)
        box.setContentsMargins(6, 0, 0, 0)
        for b in (self.edit, self.go, self.cancel):
            box.addWidget(b)

    def set_editing(self, on: bool) -> None:
        self.edit.setVisible(not on)
        self.go.setVisible(on)
        self.cancel.setVisible(on)
