"""The logit bias editor: pick a token by its text (a completer searches the loaded model's vocabulary) or its id,
give it a value, add it; the list below shows each biased token, Delete (or the − button) removes it.

It edits (token id, value) pairs and says when they changed; a token that cannot be found (no model loaded, text
that is not one token) is refused with a one-line reason and the typed text stays.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QEvent, QObject, QStringListModel, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QCompleter,
    QDoubleSpinBox,
    QGridLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QToolButton,
    QWidget,
)

from app.core.sampler.logit_bias import token_id, typed_token
from app.core.settings import MAX_BIAS, SettingsError

PAIR = Qt.ItemDataRole.UserRole


def token_label(text: str, tid: int) -> str:
    """How a vocabulary entry reads in the completer and the list: its text quoted, then its id."""
    return f"{text!r} #{tid}"


class LogitBiasEditor(QWidget):
    pairs_changed = Signal(tuple)  # ((token id, value), ...)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tokenizer: object | None = None
        self.vocab_size = 0
        self._ids: dict[str, int] = {}  # completer label -> id, built when first searched
        self.token = QLineEdit(placeholderText="token text or id", toolTip="A token of the loaded model: type to "
                               "search its vocabulary, or type an id")
        self.completions = QStringListModel(self)
        completer = QCompleter(self.completions, self, filterMode=Qt.MatchFlag.MatchContains,
                               caseSensitivity=Qt.CaseSensitivity.CaseInsensitive)
        completer.setMaxVisibleItems(12)
        self.token.setCompleter(completer)
        self.token.textEdited.connect(lambda _: self._fill_vocabulary())
        self.token.returnPressed.connect(self.add)
        self.value = QDoubleSpinBox(minimum=-MAX_BIAS, maximum=MAX_BIAS, singleStep=0.5, value=-5.0,
                                    toolTip=f"Added to the token's logit ({-MAX_BIAS:g}: practically never)")
        add = QToolButton(text="+", toolTip="Add this token's bias", autoRaise=True, clicked=self.add)
        remove = QToolButton(text="−", toolTip="Remove the selected bias (Delete)", autoRaise=True,
                             clicked=self.remove_selected)
        self.list = QListWidget(toolTip="Biased tokens: select one and press Delete to remove it")
        self.list.setFixedHeight(self.fontMetrics().lineSpacing() * 3 + 8)
        self.list.installEventFilter(self)  # Delete or Backspace removes the selected bias
        self.error = QLabel(visible=False, wordWrap=True)
        self.error.setStyleSheet("color: #b00020;")
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(self.token, 0, 0)
        grid.addWidget(self.value, 0, 1)
        grid.addWidget(add, 0, 2)
        grid.addWidget(self.list, 1, 0, 1, 2)
        grid.addWidget(remove, 1, 2, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(self.error, 2, 0, 1, 3)
        grid.setColumnStretch(0, 1)

    def set_tokenizer(self, tokenizer: object | None, vocab_size: int) -> None:
        """The loaded model's tokenizer (None: ids only); its vocabulary is listed when first searched."""
        self.tokenizer, self.vocab_size, self._ids = tokenizer, vocab_size, {}
        self.completions.setStringList([])
        self._relabel()

    def pairs(self) -> tuple[tuple[int, float], ...]:
        pairs = (self.list.item(i).data(PAIR) for i in range(self.list.count()))  # Qt gives them back as lists
        return tuple((int(tid), float(value)) for tid, value in pairs)

    def set_pairs(self, pairs: Sequence[tuple[int, float]]) -> None:
        """Show `pairs` (without saying they changed)."""
        if tuple(pairs) == self.pairs():
            return
        self.list.clear()
        for tid, value in pairs:
            item = QListWidgetItem()
            item.setData(PAIR, (int(tid), float(value)))
            self.list.addItem(item)
        self._relabel()

    def add(self) -> None:
        """Add (or replace) the typed token's bias; a token not found says why and keeps the text."""
        tid, why = self._token_id(self.token.text())  # not stripped: " os" and "os" are different tokens
        self.error.setVisible(tid is None)
        if tid is None:
            self.error.setText(why)
            return
        kept = [p for p in self.pairs() if p[0] != tid]
        self.set_pairs(sorted([*kept, (tid, float(self.value.value()))]))
        self.token.clear()
        self.pairs_changed.emit(self.pairs())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if (watched is self.list and isinstance(event, QKeyEvent) and event.type() == QEvent.Type.KeyPress
                and event.key() in (Qt.Key.Key_Delete, Qt.Key.Key_Backspace)):
            self.remove_selected()
            return True
        return super().eventFilter(watched, event)

    def remove_selected(self) -> None:
        row = self.list.currentRow()
        if row >= 0:
            self.list.takeItem(row)
            self.pairs_changed.emit(self.pairs())

    def _token_id(self, typed: str) -> tuple[int | None, str]:
        if not typed:
            return None, "type a token's text or its id"
        if typed in self._ids:
            return self._ids[typed], ""
        token = typed_token(typed)
        if self.tokenizer is None and isinstance(token, str):
            return None, "no model is loaded: type a token id, or load a model to search its vocabulary"
        try:
            return token_id(token, self.tokenizer, self.vocab_size), ""  # type: ignore[arg-type]
        except SettingsError as e:
            return None, str(e)

    def _fill_vocabulary(self) -> None:
        """The completer's list: every token's text with its id (made once per model, when first searched)."""
        if self._ids or self.tokenizer is None or not self.vocab_size:
            return
        self._ids = {token_label(self.tokenizer.token_text(i), i): i for i in range(self.vocab_size)}
        self.completions.setStringList(list(self._ids))

    def _relabel(self) -> None:
        for i in range(self.list.count()):
            item = self.list.item(i)
            tid, value = item.data(PAIR)
            text = self.tokenizer.token_text(tid) if self.tokenizer is not None and tid < self.vocab_size else None
            item.setText(f"{token_label(text, tid) if text is not None else f'#{tid}'}   {value:+g}")
