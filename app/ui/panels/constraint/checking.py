"""Whether a constraint as typed can run: the engine's own check (`app.core.sampler.constraint.check`, no model
needed), its one line naming the position of what is wrong, or "" when it compiles. No widgets, no wording of its own.
"""

from __future__ import annotations

from app.core.stage_inputs import Constraint


def problem(c: Constraint) -> str:
    """Why `c` cannot run ("" when it can)."""
    from app.core.sampler.constraint import ConstraintError, check  # (the engine and numpy: when first typed in)

    try:
        check(c)
    except ConstraintError as e:
        return str(e)
    return ""
