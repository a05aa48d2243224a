"""How the views write what they show: probabilities, log-probabilities, token text made visible, and the few
shared notes and marks. Plain functions and constants; no widget here, and nothing computes a probability.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from PySide6.QtGui import QColor

if TYPE_CHECKING:
    from app.core.sampler.step_view import StageKept

DIVERGED = QColor(200, 60, 40)  # the mark of the first token a branch drew differently from its parent
INHERITED = QColor(70, 70, 70)  # the text a branch took over from its parent (on its shade, faded)
EMPTY = "no step yet: press Generate"  # the step chart's note while nothing is shown


def format_prob(p: float) -> str:
    """A probability as people read it, the one way every view writes one: 0.412, 0.0035, 3.1e-4, 0 (never
    "0.000" or "0.0e+00"); "?" for NaN. Three significant digits at most, so the small ones stay apart."""
    if math.isnan(p):
        return "?"
    if p == 0:
        return "0"
    if p >= 0.01:
        return f"{p:.3f}"
    if p >= 1e-3:
        return f"{p:.2g}"
    mantissa, exponent = f"{p:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def token_count(n: int, prompt_empty: bool = False) -> str:
    """A prompt's length as the editor says it: "1 token", "12 tokens"; an empty prompt's tokens are the ones the
    tokenizer or template adds (the start-of-text token), and it says so."""
    count = f"{n} token{'s' * (n != 1)}"
    return f"empty prompt ({count} added by the tokenizer)" if prompt_empty and n else count


def format_logprob(logprob: float) -> str:
    return f"{logprob:.2f}".replace("-", "−")


def shown_piece(text: str) -> str:
    """A prompt token as the surprisal view lays it out: line breaks get a visible ↵ to carry their shade."""
    return text.replace("\n", "↵\n") or "∅"


def visible(text: str) -> str:
    return text.replace("\n", "↵").replace("\t", "⇥").replace(" ", "·") or "∅"


def recorded_prob(x: float | None) -> str:
    """A recorded probability, or a dash where the backend could not observe it (a server's partial trace)."""
    return "—" if x is None else format_prob(x)


def stage_strip(stages: list[StageKept], approximate: tuple[str, ...] = ()) -> str:
    """Each stage in order with its survivors and the share of its input they kept, as the step panel's strip says
    it: "temperature → top-k 20 kept (0.93) → top-p 6 kept (0.90) → min-p 4 kept"; a stage whose numbers a preview
    could only approximate ends in "≈"."""
    parts = []
    for st in stages:
        text = st.name.replace("_", "-")
        if st.kept is not None:
            text += f" {st.kept} kept" + ("" if st.mass is None else f" ({format_prob(st.mass)})")
        parts.append(text + (" ≈" if st.name in approximate else ""))
    return " → ".join(parts)
