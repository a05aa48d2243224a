"""The constraint editor's examples: one of each kind, small enough to read at a glance and to run on the built-in
model. Plain data: (menu label, kind, text)."""

from __future__ import annotations

import json

PERSON_SCHEMA = json.dumps({
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 24},
                   "age": {"type": "integer", "minimum": 0, "maximum": 130},
                   "languages": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3}},
    "required": ["name", "age"],
    "additionalProperties": False,
}, indent=2)
ISO_DATE = r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"  # ([0-9]: the engine's \d is any script's digit)
YES_NO_MAYBE = "yes\nno\nmaybe"
ARITHMETIC_LARK = """start: expr
expr: term (("+" | "-") term)*
term: factor (("*" | "/") factor)*
factor: NUMBER | "(" expr ")"
NUMBER: /[0-9]{1,6}/
"""
LIST_GBNF = r"""root ::= item item? item?
item ::= "- " [a-z ]{1,30} "\n"
"""

EXAMPLES: tuple[tuple[str, str, str], ...] = (
    ("A person (JSON schema)", "json_schema", PERSON_SCHEMA),
    ("An ISO date (regular expression)", "regex", ISO_DATE),
    ("Yes, no or maybe (choices)", "choices", YES_NO_MAYBE),
    ("Arithmetic (Lark grammar)", "lark", ARITHMETIC_LARK),
    ("A short list (GBNF grammar)", "gbnf", LIST_GBNF),
)
