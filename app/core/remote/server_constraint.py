"""A constraint (`stage_inputs.Constraint`) as each kind of server takes it: OpenAI's `response_format` (json_schema,
json_object), vLLM's `structured_outputs` (regex, choice, GBNF grammar), llama.cpp's `json_schema` and `grammar`
(GBNF; choices become a GBNF alternation), llama-cpp-python's `grammar` and its chat's `response_format`. What a
server cannot take is refused with one line (`ServerConstraintError`), never sent as free text. The server applies it
where it applies it (the place is ours alone); the run records what was sent, not what the server cut.
"""

from __future__ import annotations

import json
from typing import Any

from app.core.stage_inputs import Constraint

NOT_OBSERVED = "applied by the server, not observed"  # the grammar stage of a server's run, in its record's words
# llama.cpp's grammars/json.gbnf (any JSON object): what llama-cpp-python's completions take for json_object
JSON_OBJECT_GBNF = r'''root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws     ::= | " " | "\n" [ \t]{0,20}
'''
_KIND_WORDS = {"json_schema": "a JSON schema", "json_object": "any JSON object", "regex": "a regular expression",
               "lark": "a Lark grammar", "gbnf": "a GBNF grammar", "choices": "a list of choices"}


class ServerConstraintError(ValueError):
    """A constraint this kind of server cannot take: one line saying what it takes instead."""


def constraint_fields(c: Constraint | None, style: str, server: str, chat: bool = False) -> dict[str, Any]:
    """The request fields that carry `c` to a server of `style` ("openai", "vllm", "llama.cpp", "llama-cpp-python",
    "none"; `server` names it in a refusal; `chat`: the chat route, where llama-cpp-python reads response_format)."""
    if c is None:
        return {}
    fields = _STYLES.get(style, _none)(c, chat)
    if fields is None:
        raise ServerConstraintError(_refusal(c, style, server))
    return fields


def _schema(c: Constraint) -> Any:
    try:
        return json.loads(c.text)
    except ValueError as e:
        raise ServerConstraintError(f"the JSON schema is not JSON: {e}") from None


def _response_format(c: Constraint) -> dict[str, Any] | None:
    if c.kind == "json_object":
        return {"response_format": {"type": "json_object"}}
    if c.kind == "json_schema":
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "logitlab",
                                                                           "schema": _schema(c)}}}
    return None


def _openai(c: Constraint, chat: bool) -> dict[str, Any] | None:
    return _response_format(c)


def _vllm(c: Constraint, chat: bool) -> dict[str, Any] | None:
    theirs = {"regex": ("regex", c.text), "choices": ("choice", list(c.choices)), "gbnf": ("grammar", c.text)}
    if c.kind in theirs:
        key, value = theirs[c.kind]
        return {"structured_outputs": {key: value}}
    return _response_format(c)


def _llama_cpp(c: Constraint, chat: bool) -> dict[str, Any] | None:
    if c.kind == "json_schema":
        return {"json_schema": _schema(c)}
    if c.kind == "json_object":
        return {"json_schema": {"type": "object"}}
    return _grammar(c)


def _llama_cpp_python(c: Constraint, chat: bool) -> dict[str, Any] | None:
    if c.kind in ("json_schema", "json_object") and chat:
        schema = {"schema": _schema(c)} if c.kind == "json_schema" else {}
        return {"response_format": {"type": "json_object", **schema}}
    if c.kind == "json_object":
        return {"grammar": JSON_OBJECT_GBNF}
    return _grammar(c)


def _grammar(c: Constraint) -> dict[str, Any] | None:
    if c.kind == "gbnf":
        return {"grammar": c.text}
    if c.kind == "choices":
        return {"grammar": choices_gbnf(c.choices)}
    return None


def _none(c: Constraint, chat: bool) -> None:
    return None


_STYLES = {"openai": _openai, "vllm": _vllm, "llama.cpp": _llama_cpp, "llama-cpp-python": _llama_cpp_python}


def choices_gbnf(choices: tuple[str, ...]) -> str:
    """A GBNF grammar whose text is exactly one of `choices`."""
    return "root ::= " + " | ".join(_literal(s) for s in choices) + "\n"


def _literal(text: str) -> str:
    escaped = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return '"' + "".join(escaped.get(ch, ch) for ch in text) + '"'


def _refusal(c: Constraint, style: str, server: str) -> str:
    what = _KIND_WORDS[c.kind]
    if style == "none":
        return f"{server} takes no constraint (it ignores response_format): run {what} on a local model"
    if c.kind == "lark":
        return (f"{server} takes no Lark grammar and it cannot be converted to GBNF here: write the grammar in "
                f"GBNF{', or use a JSON schema' if style == 'openai' else ''}")
    takes = {"openai": "a JSON schema or any JSON object (response_format)",
             "llama.cpp": "a JSON schema, GBNF or choices",
             "llama-cpp-python": "GBNF, choices, or a JSON schema in a chat"}
    return f"{server} takes no {what.removeprefix('a ')}: it takes {takes.get(style, 'no constraint')}"
