"""A group of runs compared together (the side-by-side view's columns): which runs, in order, each column's
label and the model it ran on when not the session's own.

Plain records, written to and read from a session file's header as JSON (`to_json`, `from_json`, which names the
field that is wrong), so that reopening a session brings the comparison back. No Qt, no numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from app.core.files import brief, is_a, read_field, whole
from app.core.models.sources import ModelSpec

SIDE_BY_SIDE = "side_by_side"
KINDS = (SIDE_BY_SIDE,)


@dataclass(frozen=True)
class GroupColumn:
    """One column: its run, its label, and its model (None: the session's model, the window's)."""

    run_id: int
    label: str = ""
    model: ModelSpec | None = None


@dataclass(frozen=True)
class RunGroup:
    """Runs compared together, in their columns' order."""

    columns: tuple[GroupColumn, ...]
    kind: str = SIDE_BY_SIDE

    @property
    def run_ids(self) -> tuple[int, ...]:
        return tuple(c.run_id for c in self.columns)

    def keeping(self, run_ids: set[int] | Mapping[int, int]) -> RunGroup | None:
        """The group with only the columns whose run is in `run_ids` (a mapping: renumbered by it); None when no
        column is left."""
        new = {i: i for i in run_ids} if not isinstance(run_ids, Mapping) else run_ids
        columns = tuple(replace(c, run_id=new[c.run_id]) for c in self.columns if c.run_id in new)
        return replace(self, columns=columns) if columns else None


def to_json(group: RunGroup) -> dict[str, Any]:
    return {"kind": group.kind, "columns": [
        {"run": c.run_id, "label": c.label, "model": None if c.model is None else model_json(c.model)}
        for c in group.columns]}


def model_json(spec: ModelSpec) -> dict[str, Any]:
    """What identifies a model (never a server's key: only the environment variable that holds it, if named)."""
    return {"source": spec.source, "backend": spec.backend, "base_url": spec.base_url,
            "api_key_env": spec.api_key_env}


def from_json(obj: Any, where: str = "groups[0].") -> RunGroup:
    """The group a `to_json` object describes; ValueError naming the field when it is not one."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where[:-1]} must be an object (a kind and its columns), got {brief(obj)}")
    kind = read_field(obj, "kind", lambda v: v in KINDS, f"one of {', '.join(KINDS)}", where=where)
    columns = read_field(obj, "columns", lambda v: isinstance(v, list) and v, "a list of columns", where=where)
    return RunGroup(tuple(_column(c, f"{where}columns[{i}].") for i, c in enumerate(columns)), kind)


def _column(obj: Any, where: str) -> GroupColumn:
    if not isinstance(obj, dict):
        raise ValueError(f"{where[:-1]} must be an object (a run, its label and model), got {brief(obj)}")
    model = read_field(obj, "model", is_a(dict), "an object", null=True, default=None, where=where)
    return GroupColumn(read_field(obj, "run", whole, "a whole number", where=where),
                       read_field(obj, "label", is_a(str), "text", default="", where=where),
                       None if model is None else read_model(model, f"{where}model."))


def read_model(obj: dict[str, Any], where: str) -> ModelSpec:
    return ModelSpec(source=read_field(obj, "source", is_a(str), "text", where=where),
                     backend=read_field(obj, "backend", is_a(str), "text", where=where),
                     base_url=read_field(obj, "base_url", is_a(str), "text", default="", where=where),
                     api_key_env=read_field(obj, "api_key_env", is_a(str), "text", null=True, default=None,
                                            where=where))
