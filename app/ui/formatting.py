"""How the views write what they show: probabilities, log-probabilities, token text made visible, and the few
shared notes and marks. Plain functions and constants; no widget here, and nothing computes a probability.
"""

from __future__ import annotations

from PySide6.QtGui import QColor

DIVERGED = QColor(200, 60, 40)  # the mark of the first token a branch drew differently from its parent
EMPTY = "no step yet: press Generate"  # the step chart's note while nothing is shown


def format_prob(p: float) -> str:
    """A probability as people read it: 0.412, 0.0035, 3.1e-06."""
    return f"{p:.3f}" if p >= 0.01 else f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


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
