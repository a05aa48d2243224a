"""Frozen records as plain JSON and back, field by field as their types are annotated: whole numbers, numbers (a
non-finite one as its string, `files.json_number`), text, true / false, null, tuples (lists), dicts (keys as
text), Literals, sampler settings and records within records. Reading checks every value and names the field that
is wrong (a `ValueError`, as `files.read_field` does), then builds each record through its constructor, whose own
checks run. It knows no record by name; no Qt, no numpy.
"""

from __future__ import annotations

import functools
import re
import types
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from app.core.files import brief, json_number, read_number
from app.core.settings import SamplerSettings, read_settings

WHOLE = re.compile(r"-?[0-9]{1,19}")  # a dict's whole-number key, as JSON holds it (text)
SCALARS = {int: "a whole number", float: "a number", str: "text", bool: "true or false", type(None): "null"}


def to_json(value: Any) -> Any:
    """`value` as JSON data: a record as an object of its fields, a tuple as a list, a dict's keys as text."""
    if isinstance(value, SamplerSettings):
        return value.to_dict()
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (tuple, list)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    return json_number(value)


def from_json(tp: Any, value: Any, where: str) -> Any:
    """`value` (what `to_json` wrote) read as a `tp`; a ValueError naming `where`, the field's path, if it is not
    one."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        return _union(args, value, where)
    if origin is Literal:
        if not any(type(value) is type(a) and value == a for a in args):
            raise ValueError(f"{where} must be {kind(tp)}, got {brief(value)}")
        return value
    if origin is tuple:
        return _tuple(args, value, where)
    if origin is dict:
        return _dict(args, value, where)
    if tp is SamplerSettings:
        return read_settings(_object(value, where), where)
    if is_dataclass(tp):
        return _record(tp, value, where)
    return _scalar(tp, value, where)


def kind(tp: Any) -> str:
    """What a value of type `tp` must be, as a message says it."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return "one of " + ", ".join(brief(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(kind(a) for a in args)
    if origin is tuple:
        return "a list"
    return SCALARS.get(tp, "an object")


def _union(args: tuple[Any, ...], value: Any, where: str) -> Any:
    rest = [a for a in args if a is not type(None)]
    if value is None and len(rest) < len(args):
        return None
    if len(rest) == 1:  # (X | None: X's own message, which names the field inside it)
        return from_json(rest[0], value, where)
    for tp in rest:
        try:
            return from_json(tp, value, where)
        except ValueError:
            continue
    raise ValueError(f"{where} must be {' or '.join(kind(a) for a in args)}, got {brief(value)}")


def _tuple(args: tuple[Any, ...], value: Any, where: str) -> tuple[Any, ...]:
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list, got {brief(value)}")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(from_json(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if len(value) != len(args):
        raise ValueError(f"{where} must be a list of {len(args)}, got {brief(value)}")
    return tuple(from_json(tp, v, f"{where}[{i}]") for i, (tp, v) in enumerate(zip(args, value, strict=True)))


def _dict(args: tuple[Any, ...], value: Any, where: str) -> dict[Any, Any]:
    key_type, value_type = args
    out = {}
    for k, v in _object(value, where).items():
        if key_type is int and not WHOLE.fullmatch(k):
            raise ValueError(f"{where} must be keyed by whole numbers, got the key {brief(k)}")
        out[int(k) if key_type is int else k] = from_json(value_type, v, f"{where}[{brief(k)}]")
    return out


def _record(tp: type, value: Any, where: str) -> Any:
    obj, hints, given = _object(value, where), _hints(tp), {}
    for f in fields(tp):
        if f.name in obj:
            given[f.name] = from_json(hints[f.name], obj[f.name], f"{where}.{f.name}")
        elif f.default is MISSING and f.default_factory is MISSING:
            raise ValueError(f"no {where}.{f.name}")
    return tp(**given)


def _scalar(tp: Any, value: Any, where: str) -> Any:
    if tp is float and type(value) is not int:  # (a whole number stays one: a swept top_k reads back as written)
        number = read_number(value)
        if number is None:
            raise ValueError(f"{where} must be a number, got {brief(value)}")
        return number
    ok = type(value) is tp or (tp is float and type(value) is int) or (tp is str and isinstance(value, str))
    if not ok:
        raise ValueError(f"{where} must be {kind(tp)}, got {brief(value)}")
    return value


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object, got {brief(value)}")
    return value


@functools.cache
def _hints(tp: type) -> dict[str, Any]:
    return get_type_hints(tp)
