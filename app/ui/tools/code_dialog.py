"""Run → View code…: the panel's settings and the prompt as code for other engines (app/core/codegen/snippets.py), a tab
per engine with a copy button. What an engine cannot express exactly is a comment in its code; the JSON body,
which cannot hold comments, lists it under the code.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.codegen.snippets import CodeRequest, Snippet, snippets
from app.core.events import Message
from app.core.settings import SamplerSettings
from backends.base import Tokenizer

INTRO = ("The sampler settings and the prompt, as code for other engines. Comments mark what an engine cannot "
         "express exactly; greedy settings reproduce the app's tokens.")


def code_request(settings: SamplerSettings, prompt: str, messages: Sequence[Message] | None, source: str,
                 tokenizer: Tokenizer | None) -> CodeRequest:
    """What the dialog shows code for; in chat mode the prompt as the model sees it, when a model is loaded."""
    from app.core.decoding.generation import (  # (numpy's: not before the window's first paint)
        PromptError,
        prompt_tokens,
    )

    rendered = None
    if messages is not None and tokenizer is not None:
        try:
            rendered = prompt_tokens(tokenizer, prompt, messages, settings.think)[1]
        except PromptError:
            rendered = None
    return CodeRequest(settings, prompt, tuple(messages) if messages is not None else None, source, rendered)


class CodeDialog(QDialog):
    def __init__(self, request: CodeRequest, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("View code")
        self.tabs = QTabWidget()
        self.editors: dict[str, QPlainTextEdit] = {}
        self.copy_buttons: dict[str, QPushButton] = {}
        for snippet in snippets(request):
            self.tabs.addTab(self._page(snippet), snippet.title)
        intro = QLabel(INTRO, wordWrap=True)
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        close.rejected.connect(self.reject)
        box = QVBoxLayout(self)
        box.addWidget(intro)
        box.addWidget(self.tabs, 1)
        box.addWidget(close)
        self.resize(900, 640)

    def _page(self, snippet: Snippet) -> QWidget:
        text = QPlainTextEdit(snippet.code, readOnly=True, lineWrapMode=QPlainTextEdit.LineWrapMode.NoWrap)
        text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        copy = QPushButton("Copy", toolTip=f"Copy the {snippet.title} code to the clipboard")
        copy.clicked.connect(lambda _=False, s=snippet, b=copy: self.copy(s, b))
        row = QHBoxLayout()
        row.addWidget(QLabel(f"<i>{snippet.language}</i>"))
        row.addStretch(1)
        row.addWidget(copy)
        page = QWidget()
        box = QVBoxLayout(page)
        box.addWidget(text, 1)
        if snippet.notes:
            items = "".join(f"<li>{html.escape(n)}</li>" for n in snippet.notes)
            box.addWidget(QLabel(f"<ul style='margin: 0'>{items}</ul>", wordWrap=True))
        box.addLayout(row)
        self.editors[snippet.title] = text
        self.copy_buttons[snippet.title] = copy
        return page

    def copy(self, snippet: Snippet, button: QPushButton) -> None:
        QGuiApplication.clipboard().setText(snippet.code)
        button.setText("Copied")
