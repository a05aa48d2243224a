"""What Edit → Copy output and Copy output as Markdown put on the clipboard: the shown run's text exactly as the
model produced it (its steps' text, byte for byte; the view's text would have "\\r" as a line break), and the
same as short Markdown (the prompt the model saw, the settings and seed, the output in fenced blocks). Files
with shaded tokens are File → Export's (app/core/record/export.py).
"""

from __future__ import annotations

import re

from PySide6.QtGui import QGuiApplication

from app.core.record.export import describe
from app.core.session.store import Run


def output_text(run: Run | None) -> str:
    return "".join(s.text for s in run.steps) if run is not None else ""


def output_markdown(run: Run | None) -> str:
    """The prompt and the output as Markdown, with what produced them; "" when there is no run."""
    if run is None:
        return ""
    prompt = run.prefilled.prompt_text if run.prefilled is not None else run.request.prompt
    seed = f" · seed {run.prefilled.seed}" if run.prefilled is not None else ""
    end = f", finished by {run.finished.reason}" if run.finished is not None else " so far"
    out = output_text(run)
    return "\n".join([f"**Prompt** ({run.request.model.label})", "", *fenced(prompt), "",
                      f"**Output** ({describe(run.request.settings)}{seed}; {len(run.steps)} tokens{end})", "",
                      *fenced(out), ""])


def fenced(text: str) -> list[str]:
    """A fenced code block that holds `text` whole: its fence is longer than any run of backticks inside."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + "text", text, fence]


def copy(text: str) -> None:
    QGuiApplication.clipboard().setText(text)
