"""A model's chat template is its own code: one that reaches out of the Jinja sandbox, loops, recurses or
raises is stopped, and says so in one line (never a traceback), through the real tokenizer loader and the CLI."""

from __future__ import annotations

import pytest

from backends.base import LoadOptions
from backends.hf.tokenizer import TEMPLATE_LIMIT_S, load_tokenizer
from tests.tiny import CHAT_TEMPLATE, make_tokenizer

ESCAPE = "{{ ''.__class__.__mro__[1].__subclasses__() }}" + CHAT_TEMPLATE
LOOP = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}" + CHAT_TEMPLATE
MESSAGES = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("tok")
    make_tokenizer().save_pretrained(path)
    return load_tokenizer(path, LoadOptions())


@pytest.mark.parametrize(("template", "message"), [
    (ESCAPE, "this model's chat template tried to access attribute '__class__' of 'str' object; it was blocked"),
    ("{{ cycler.__init__.__globals__ }}", "this model's chat template tried to access attribute '__init__' of "
     "'type' object; it was blocked"),
    (LOOP, f"this model's chat template ran for over {TEMPLATE_LIMIT_S:g} s; it was stopped"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "this model's chat template recursed too deeply; it was "
     "stopped"),
    ("{{ raise_exception('Conversation roles must alternate') }}", "this model's chat template failed: "
     "Conversation roles must alternate"),
    ("{% for %}", "this model's chat template failed: Expected an expression, got 'end of statement block'"),
    ("{{ 1 + 'a' }}", "this model's chat template failed: TypeError: unsupported operand type(s) for +: 'int' and "
     "'str'"),
], ids=["sandbox", "sandbox-globals", "endless-loop", "recursion", "raises", "syntax", "type-error"])
def test_a_template_that_misbehaves_is_stopped_with_one_line(tokenizer, template: str, message: str):
    import sys

    tokenizer.hf.chat_template = template
    with pytest.raises(ValueError) as info:
        tokenizer.apply_chat_template(MESSAGES)
    assert str(info.value) == message
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no chained traceback to print
    assert sys.gettrace() is None or "coverage" in type(sys.gettrace()).__module__  # the time limit is undone


def test_a_well_behaved_template_renders_as_before(tokenizer):
    tokenizer.hf.chat_template = CHAT_TEMPLATE
    assert tokenizer.apply_chat_template(MESSAGES) == "<|user|>Hi\n<|assistant|>"
