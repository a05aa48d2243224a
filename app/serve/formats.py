"""A request's constraint read into our `Constraint`: OpenAI's `response_format` (json_schema, json_object; text: none),
the Responses API's `text.format`, and the dialects turned around: llama.cpp's `json_schema` and `grammar` (GBNF),
vLLM's `structured_outputs` (json, regex, choice, grammar). One constraint a request; a malformed one is a
`RequestError` (HTTP 400) naming the field, and so is one the engine cannot compile (`constraint.check`: its line,
with the position). No HTTP, no model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from app.core.sampler.constraint import ConstraintError, check
from app.core.stage_inputs import Constraint
from app.serve.fields import RequestError

DIALECT_FIELDS = ("json_schema", "grammar", "structured_outputs")  # llama.cpp's and vLLM's, on every route
FIELDS = {"chat": ("response_format", *DIALECT_FIELDS), "completions": ("response_format", *DIALECT_FIELDS),
          "responses": ("text", *DIALECT_FIELDS)}  # what this module reads, per route
_VLLM = {"json": "json_schema", "regex": "regex", "choice": "choices", "grammar": "gbnf"}


def read_constraint(body: Mapping[str, Any], route: str) -> Constraint | None:
    """The constraint `body` asks for on `route`, or None (none asked, or plain text asked)."""
    found = [(key, c) for key in FIELDS[route]
             if body.get(key) is not None and (c := _READERS[key](body[key])) is not None]
    if len(found) > 1:
        raise RequestError(f"give one constraint a request: {found[0][0]} and {found[1][0]} both ask for one",
                           found[1][0])
    if not found:
        return None
    key, c = found[0]
    try:
        check(c)
    except ConstraintError as e:
        raise RequestError(str(e), key) from None
    return c


def _format(value: Any, field: str, schema_at: str) -> Constraint | None:
    """OpenAI's format object: {"type": "text" | "json_object" | "json_schema", ...}; the schema under `schema_at`
    (response_format: json_schema.schema; the Responses API's text.format: schema)."""
    if not isinstance(value, dict) or value.get("type") not in ("text", "json_object", "json_schema"):
        raise RequestError(f'{field}.type must be "text", "json_object" or "json_schema"', field)
    if value["type"] == "text":
        return None
    if value["type"] == "json_object":
        return Constraint("json_object")
    holder = value.get("json_schema") if schema_at == "json_schema.schema" else value
    schema = holder.get("schema") if isinstance(holder, dict) else None
    return _schema(schema, f"{field}.{schema_at}")


def _schema(schema: Any, field: str) -> Constraint:
    if not isinstance(schema, (dict, bool)):
        raise RequestError(f"{field} must be a JSON schema (an object)", field)
    return Constraint("json_schema", json.dumps(schema, ensure_ascii=False))


def _response_format(value: Any) -> Constraint | None:
    return _format(value, "response_format", "json_schema.schema")


def _text(value: Any) -> Constraint | None:
    if not isinstance(value, dict):
        raise RequestError('text must be an object, e.g. {"format": {"type": "json_object"}}', "text")
    return _format(value["format"], "text.format", "schema") if value.get("format") is not None else None


def _grammar(value: Any) -> Constraint | None:
    if not isinstance(value, str):
        raise RequestError("grammar must be a GBNF grammar (text)", "grammar")
    return _made("gbnf", value, "grammar") if value.strip() else None


def _structured(value: Any) -> Constraint | None:
    """vLLM's structured_outputs: one of json (a schema), regex, choice (a list of text), grammar."""
    given = [k for k in _VLLM if isinstance(value, dict) and value.get(k) is not None]
    if len(given) != 1:
        raise RequestError(f"structured_outputs must hold one of {', '.join(_VLLM)}", "structured_outputs")
    key, v = given[0], value[given[0]]
    if key == "json":
        return _schema(_json(v, "structured_outputs.json") if isinstance(v, str) else v, "structured_outputs.json")
    if key == "choice":
        if not isinstance(v, list) or not v or not all(isinstance(s, str) and s and "\n" not in s for s in v):
            raise RequestError("structured_outputs.choice must be a list of text (one line each)",
                               "structured_outputs.choice")
        return Constraint("choices", "\n".join(v))
    if not isinstance(v, str):
        raise RequestError(f"structured_outputs.{key} must be text", f"structured_outputs.{key}")
    return _made(_VLLM[key], v, f"structured_outputs.{key}")


def _json(text: str, field: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise RequestError(f"{field} is not JSON: {e}", field) from None


def _made(kind: str, text: str, field: str) -> Constraint:
    try:
        return Constraint(kind, text)
    except ValueError as e:
        raise RequestError(f"{field}: {e}", field) from None


_READERS = {"response_format": _response_format, "text": _text, "json_schema": lambda v: _schema(v, "json_schema"),
            "grammar": _grammar, "structured_outputs": _structured}
