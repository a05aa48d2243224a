"""The constraint editor: the kind (off, JSON schema, regular expression, Lark or GBNF grammar, choices, any JSON
object), its text, where the stage sits (first, or llama.cpp's way: only when the drawn token is rejected), a menu of
examples, and a status line checked as you type (debounced): "valid" in green, or one line naming the position of
the error in red.

It says `edited` when what it holds may have changed (after the pause in typing); `constraint()` is the constraint
it holds (None when off), or a `SettingsError` with the status line. The text is never cleared by an error, by a
change of kind, or by switching off: an example replaces it undoably (Ctrl+Z brings the text back).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QFontDatabase, QTextCursor
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPlainTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.settings import SettingsError
from app.core.stage_inputs import Constraint
from app.ui.panels.constraint.checking import problem
from app.ui.panels.constraint.examples import EXAMPLES

KINDS = (("", "Off: free text"), ("json_schema", "JSON schema"), ("regex", "Regular expression"),
         ("lark", "Grammar (Lark)"), ("gbnf", "Grammar (GBNF, llama.cpp's)"), ("choices", "Choices, one per line"),
         ("json_object", "Any JSON object"))
PLACES = (("first", "First: every stage sees only legal tokens"),
          ("on_reject", "On reject (llama.cpp's way): checked after the draw"))
PLACEHOLDERS = {"": "Choose a kind, or an example", "json_schema": '{"type": "object", "properties": {...}}',
                "regex": r"\d{4}-\d{2}-\d{2}", "lark": 'start: "yes" | "no"', "gbnf": 'root ::= "yes" | "no"',
                "choices": "yes\nno\nmaybe", "json_object": "(no text: any JSON object)"}
DEBOUNCE_MS = 300
VALID, INVALID, IDLE = "#2e7d32", "#c62828", "palette(mid)"


class ConstraintEditor(QWidget):
    edited = Signal()  # what `constraint()` gives may have changed (after a pause in typing)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.kind = QComboBox(toolTip="What the text must match: the grammar stage cuts every token that cannot "
                              "continue it")
        for value, label in KINDS:
            self.kind.addItem(label, value)
        self.place = QComboBox(toolTip="First: the grammar runs before every other stage, so each sees only legal "
                               "tokens. On reject: the chain runs free, the drawn token is checked, and only a "
                               "rejected one is redrawn under the grammar (llama.cpp's way; it can draw differently)")
        for value, label in PLACES:
            self.place.addItem(label, value)
        self.examples = QToolButton(text="Examples", popupMode=QToolButton.ToolButtonPopupMode.InstantPopup,
                                    toolTip="Put an example in the editor (Ctrl+Z brings your text back)")
        menu = QMenu(self.examples)
        for label, kind, text in EXAMPLES:
            menu.addAction(label, lambda k=kind, t=text: self.use_example(k, t))
        self.examples.setMenu(menu)
        self.text = QPlainTextEdit(tabChangesFocus=True)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.setFixedHeight(self.fontMetrics().lineSpacing() * 7 + 12)
        self.text.installEventFilter(self)
        self.status = QLabel(wordWrap=True, textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        self.status.setObjectName("constraint_status")
        self._timer = QTimer(self, singleShot=True, interval=DEBOUNCE_MS, timeout=self._changed)
        self._checked: tuple[str, str] | None = None  # (kind, text) the status line is about
        self._given: Constraint | None = None  # what it last gave or was given: the settings' constraint
        self._problem = ""
        self._lay_out()
        self.kind.currentIndexChanged.connect(self._kind_changed)
        self.place.currentIndexChanged.connect(self._changed)
        self.text.textChanged.connect(self._typed)
        self._kind_changed()

    def _lay_out(self) -> None:
        top = QHBoxLayout()
        top.addWidget(self.kind, 1)
        top.addWidget(self.examples)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addLayout(top)
        box.addWidget(self.text)
        box.addWidget(self.status)
        box.addWidget(self.place)

    # what it holds ------------------------------------------------------------------------------------------
    def constraint(self) -> Constraint | None:
        """The constraint shown (None: off); a `SettingsError` with the status line when it cannot run."""
        kind = self.kind.currentData()
        if not kind:
            return None
        self.check()
        if self._problem:
            raise SettingsError(f"constraint: {self._problem}")
        place = self.place.currentData()
        self._given = Constraint(kind, self.text.toPlainText() if kind != "json_object" else "", place)
        return self._given

    def set_constraint(self, c: Constraint | None) -> None:
        """Show `c` (None: off, the text kept). The constraint it gave last leaves the editor as it is: an edit
        in progress (one not valid yet) is never overwritten by the settings it has not reached."""
        if c == self._given:
            return
        self._given = c
        self._quietly(lambda: self._show(c))
        self.check()

    def _show(self, c: Constraint | None) -> None:
        self.kind.setCurrentIndex(self.kind.findData(c.kind if c else ""))
        if c is not None:
            self.place.setCurrentIndex(self.place.findData(c.place))
            if c.kind != "json_object" and c.text != self.text.toPlainText():
                self._replace_text(c.text)
        self._enable()

    def use_example(self, kind: str, text: str) -> None:
        """An example in the editor: its kind, its text in place of the typed one (undoably)."""
        self._quietly(lambda: self.kind.setCurrentIndex(self.kind.findData(kind)))
        self._quietly(lambda: self._replace_text(text))
        self._enable()
        self._changed()

    def _replace_text(self, text: str) -> None:
        cursor = self.text.textCursor()
        cursor.select(QTextCursor.SelectionType.Document)
        cursor.insertText(text)  # (one undo step, unlike setPlainText, which clears the undo history)

    def summary(self) -> str:
        """The kind in a few words, for the folded section's title ("" when off)."""
        return self.kind.currentText() if self.kind.currentData() else ""

    # checking -------------------------------------------------------------------------------------------------
    def check(self) -> None:
        """Check what is typed now (once per kind and text) and show the status line."""
        self._timer.stop()
        kind, text = self.kind.currentData(), self.text.toPlainText()
        if (kind, text) == self._checked:
            return
        self._checked = (kind, text)
        self._problem = self._why(kind, text)
        self._show_status(kind)

    def _why(self, kind: str, text: str) -> str:
        if not kind:
            return ""
        try:
            return problem(Constraint(kind, text if kind != "json_object" else ""))
        except ValueError as e:  # (no text yet)
            return str(e)

    def _show_status(self, kind: str) -> None:
        words, colour = ((self._problem, INVALID) if self._problem else ("valid", VALID)) if kind else (
            "off: the text is free", IDLE)
        self.status.setText(words)
        self.status.setToolTip(words)
        self.status.setStyleSheet(f"color: {colour};")

    # edits ----------------------------------------------------------------------------------------------------
    def _typed(self) -> None:
        self._timer.start()

    def _kind_changed(self) -> None:
        self.text.setPlaceholderText(PLACEHOLDERS[self.kind.currentData()])
        self._enable()
        self._changed()

    def _enable(self) -> None:
        kind = self.kind.currentData()
        self.text.setReadOnly(kind == "json_object")
        self.place.setEnabled(bool(kind))

    def _changed(self) -> None:
        self.check()
        self.edited.emit()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if watched is self.text and event.type() == QEvent.Type.FocusOut and self._timer.isActive():
            self._changed()  # (leaving the box, e.g. for Generate: checked and sent before the click lands)
        return super().eventFilter(watched, event)

    def _quietly(self, change) -> None:  # noqa: ANN001 - a callable
        for w in (self.kind, self.place, self.text):
            w.blockSignals(True)
        try:
            change()
        finally:
            for w in (self.kind, self.place, self.text):
                w.blockSignals(False)
