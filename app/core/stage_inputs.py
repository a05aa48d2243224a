"""The inputs of the stages that read more than a number: a constraint (what the text must match) and a steering
vector (what the forward adds to the residual stream). Plain, hashable, frozen data that `SamplerSettings` holds and
files store (`to_dict` / `read_*`); what each means at a step is the sampler's (`sampler.constraint`) and the
decoding's. No app imports beyond `files`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.files import is_a, read_field, whole

# what a constraint's `text` is: a JSON schema (JSON text), a regular expression, a Lark grammar, a GBNF grammar
# (llama.cpp's; converted), a list of choices (one per line), or any JSON object (`text` unused)
CONSTRAINT_KINDS = ("json_schema", "regex", "lark", "gbnf", "choices", "json_object")
# where the constraint runs: first (every stage sees only legal tokens), or llama.cpp's way (the chain runs, the drawn
# token is checked, and the mask applies only when it is rejected)
CONSTRAINT_PLACES = ("first", "on_reject")


@dataclass(frozen=True)
class Constraint:
    kind: str
    text: str = ""
    place: str = "first"

    def __post_init__(self) -> None:
        if self.kind not in CONSTRAINT_KINDS:
            raise ValueError(f"constraint kind must be one of {', '.join(CONSTRAINT_KINDS)}, got {self.kind!r}")
        if self.place not in CONSTRAINT_PLACES:
            raise ValueError(f"constraint place must be one of {', '.join(CONSTRAINT_PLACES)}, got {self.place!r}")
        if self.kind != "json_object" and not self.text.strip():
            raise ValueError(f"a {self.kind.replace('_', ' ')} constraint needs its text")

    @property
    def choices(self) -> tuple[str, ...]:
        """A choices constraint's choices, one per line of `text` (blank lines skipped)."""
        return tuple(line for line in self.text.splitlines() if line.strip()) if self.kind == "choices" else ()

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "place": self.place}


@dataclass(frozen=True)
class Steering:
    """A steering vector file (llama.cpp's control-vector GGUF) added at `layers` with `strength` (0: no change)."""

    path: str
    layers: tuple[int, ...] = ()  # () : every layer the file has a direction for
    strength: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(int(n) for n in self.layers))
        if not self.path:
            raise ValueError("a steering vector needs its file")

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "layers": list(self.layers), "strength": self.strength}


def read_constraint(value: Any, key: str = "constraint") -> Constraint | None:
    """A constraint as a file holds it (`Constraint.to_dict`), or None for null."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be an object with kind, text and place, got {value!r}")
    kind = read_field(value, "kind", is_a(str), "text", where=f"{key}.")
    text = read_field(value, "text", is_a(str), "text", default="", where=f"{key}.")
    place = read_field(value, "place", is_a(str), "text", default="first", where=f"{key}.")
    try:
        return Constraint(kind, text, place)
    except ValueError as e:
        raise ValueError(f"{key}: {e}") from None


def read_steering(value: Any, key: str = "steering") -> Steering | None:
    """A steering vector as a file holds it (`Steering.to_dict`), or None for null."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be an object with path, layers and strength, got {value!r}")
    path = read_field(value, "path", is_a(str), "text", where=f"{key}.")
    layers = read_field(value, "layers", lambda v: isinstance(v, list) and all(whole(x) for x in v),
                        "a list of layer numbers", default=[], where=f"{key}.")
    strength = read_field(value, "strength", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
                          "a number", default=1.0, where=f"{key}.")
    try:
        return Steering(path, tuple(layers), float(strength))
    except ValueError as e:
        raise ValueError(f"{key}: {e}") from None
