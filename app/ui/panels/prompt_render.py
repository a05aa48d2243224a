"""The prompt as the model sees it: rendered through the chat template and the tokenizer on a thread of its own
(`PromptRenderer`: a template that loops or crawls never hangs the window), and shown as its tokens
(`TokenBoundaries`: alternately shaded spans, the id on hover). Only the tokenizer is used, never the model.
"""

from __future__ import annotations

import contextlib
import html
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QWidget

from app.core.events import Message
from app.ui.run_view.token_spans import TokenSpans

RENDER_WAIT_S = 0.05  # a prompt rendered within this is shown at once; a slower one when its thread is done


@dataclass(frozen=True)
class Rendered:
    """The prompt as the model sees it, for one (tokenizer, prompt, messages, think) key: its ids and text, or why
    not; `switch`: whether the tokenizer's chat template has a thinking switch (enable_thinking)."""

    key: tuple[Any, ...]
    ids: tuple[int, ...] = ()
    text: str = ""
    error: str | None = None
    switch: bool = False


class PromptRenderer(QObject):
    """Renders the prompt through the chat template and the tokenizer on one thread of its own, the latest
    request only (one that a newer request has replaced is skipped); `rendered` brings each result back."""

    rendered = Signal(object)  # Rendered, on the UI thread

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prompt-render")
        self._latest: tuple[Any, ...] | None = None
        self._future: Future | None = None

    def render(self, tokenizer: Any, prompt: str, messages: tuple[Message, ...] | None,
               think: bool = True) -> Rendered | None:
        """The render of these inputs if it is ready within `RENDER_WAIT_S`; else None, and `rendered` brings it."""
        key = (tokenizer, prompt, messages, think)
        if key != self._latest or self._future is None:
            self._latest = key
            self._future = self._pool.submit(self._run, key)
        try:
            return self._future.result(RENDER_WAIT_S)
        except FutureTimeout:
            return None

    def _run(self, key: tuple[Any, ...]) -> Rendered | None:
        if key != self._latest:
            return None  # replaced while it waited
        from app.core.decoding.generation import prompt_tokens  # (numpy's: not before the window's first paint)
        from app.core.record.spans import has_think_switch

        switch = has_think_switch(key[0])  # (a template that fails has none; cached per tokenizer)
        try:
            ids, text = prompt_tokens(*key)
            result = Rendered(key, tuple(ids), text, switch=switch)
        except ValueError as e:
            result = Rendered(key, error=str(e), switch=switch)
        with contextlib.suppress(RuntimeError):  # the editor is gone (the window closed)
            self.rendered.emit(result)
        return result


class TokenBoundaries(TokenSpans):
    """Read-only: the prompt as its tokens, alternately shaded; hover shows the token id."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._ids: list[int] = []
        self._pieces: list[str] = []
        self._formats = []
        for c in (QColor(100, 149, 237, 70), QColor(255, 165, 0, 70)):
            f = QTextCharFormat()
            f.setBackground(c)
            self._formats.append(f)

    def set_tokens(self, ids: list[int], pieces: list[str]) -> None:
        self.clear_spans()
        self._ids, self._pieces = list(ids), list(pieces)
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        for i, piece in enumerate(pieces):
            self.insert_span(cursor, piece or "∅", self._formats[i % 2])
        cursor.endEditBlock()

    def span_tooltip(self, i: int) -> str:
        return f"token {i}: id <b>{self._ids[i]}</b> <code>{html.escape(repr(self._pieces[i]))}</code>"
