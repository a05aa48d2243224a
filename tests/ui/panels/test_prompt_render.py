"""The prompt editor renders the chat template off the UI thread: a template that loops leaves the window
responsive and the count says why there is none; one that leaves the sandbox is named in one line; a chat turn
given a model's reply keeps it byte for byte. A real tokenizer folder, made by the test."""

from __future__ import annotations

import pytest

from app.ui.panels.chat_editor import ChatEditor
from app.ui.panels.prompt_editor import PromptEditor
from backends.base import LoadOptions
from backends.hf.tokenizer import TEMPLATE_LIMIT_S, load_tokenizer
from tests.tiny import CHAT_TEMPLATE, make_tokenizer

LOOP = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}" + CHAT_TEMPLATE
ESCAPE = "{{ ''.__class__.__mro__[1].__subclasses__() }}" + CHAT_TEMPLATE


@pytest.fixture(scope="module")
def tok_path(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("tok")
    make_tokenizer().save_pretrained(path)
    return path


def editor_with(qtbot, tok_path, template: str) -> PromptEditor:
    tok = load_tokenizer(tok_path, LoadOptions())
    tok.hf.chat_template = template
    editor = PromptEditor()
    qtbot.addWidget(editor)
    editor.tabs.setCurrentIndex(1)
    editor.chat.turns[0].text.setPlainText("Hi there")
    editor.set_tokenizer(tok)
    return editor


def test_a_looping_template_never_blocks_the_window_and_the_count_says_why(qtbot, tok_path):
    editor = editor_with(qtbot, tok_path, LOOP)
    assert not editor.renderer._future.done()  # set_tokenizer returned while the template still renders
    qtbot.waitUntil(lambda: "it was stopped" in editor.count.text(), timeout=30_000)  # (the event loop runs)
    assert editor.count.text() == f"this model's chat template ran for over {TEMPLATE_LIMIT_S:g} s; it was stopped"
    editor.tokenizer.hf.chat_template = CHAT_TEMPLATE  # a fixed template: the next count is a count again
    editor.chat.turns[0].text.setPlainText("Hi again")
    qtbot.waitUntil(lambda: editor.count.text().endswith(" tokens"), timeout=30_000)


def test_a_template_that_leaves_the_sandbox_is_named_in_one_line(qtbot, tok_path):
    editor = editor_with(qtbot, tok_path, ESCAPE)
    qtbot.waitUntil(lambda: "blocked" in editor.count.text(), timeout=30_000)
    assert editor.count.text() == ("this model's chat template tried to access attribute '__class__' of 'str' "
                                   "object; it was blocked")


def test_only_the_latest_edit_is_counted(qtbot, tok_path):
    editor = editor_with(qtbot, tok_path, CHAT_TEMPLATE)
    for i in range(5):
        editor.chat.turns[0].text.setPlainText("word " * i)
        editor.refresh_count()
    ids = editor.tokenizer.encode("<|user|>" + "word " * 4 + "\n<|assistant|>", add_special_tokens=False)
    qtbot.waitUntil(lambda: editor.count.text() == f"{len(ids)} tokens", timeout=30_000)


@pytest.mark.parametrize("reply", ["line\rnext", "crlf\r\nend", "a\u00a0non-breaking space", "para\u2029sep",
                                   "line\u2028sep", "\r"])
def test_a_reply_added_to_the_chat_is_kept_byte_for_byte(qtbot, reply: str):
    chat = ChatEditor()
    qtbot.addWidget(chat)
    chat.turns[0].text.setPlainText("Hi")
    chat.add_turn("assistant", reply)
    assert chat.messages()[-1].content == reply
    chat.turns[-1].text.setPlainText("edited")  # once edited, the message is what the editor holds
    assert chat.messages()[-1].content == "edited"
