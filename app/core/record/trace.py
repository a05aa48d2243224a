"""What a run leaves behind: a `RunTrace` around its steps' records (`record.py`: a `Sample` per drawn token, a
`StepTrace` around it), which re-samples a recorded step under other settings (`sampling.py`) and saves to a JSON
Lines file that loads back equal (the format: `trace_file.py`). Knows nothing of models or Qt.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.files import write_lines
from app.core.metrics import Metrics
from app.core.record import trace_file
from app.core.record.record import Sample, StepTrace, model_id
from app.core.settings import SamplerSettings

__all__ = ["RunTrace", "Sample", "StepTrace", "from_lines", "model_id", "to_lines"]  # (records: from record.py)


@dataclass
class RunTrace:
    prompt_ids: list[int]
    settings: SamplerSettings
    seed: int
    steps: list[StepTrace] = field(default_factory=list)
    run_id: int = 0
    parent: tuple[int, int] | None = None  # (run id, step) this run branched from
    model: dict[str, str] | None = None  # name, backend, source
    finish_reason: str | None = None
    finish_message: str = ""  # for "error": why (a server cut the stream…), as `Finished.message` said it
    metrics: Metrics | None = None
    prompt_text: str = ""  # what the model saw (the chat template applied)
    branch: str = ""  # how it left its parent: "fork" (its step parent[1] forced), "regenerate", "replay",
    # "edit" (its prompt: the parent's, its first parent[1] tokens, then edited text; app/core/session/edits.py)

    @property
    def token_ids(self) -> list[int]:
        return [s.token_id for s in self.steps]

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.steps)


    def save(self, path: str | os.PathLike) -> None:
        """Write the trace as JSON Lines (a header, one line per step, a footer), atomically: a reader sees the
        old file or the whole new one, never half of it."""
        write_lines(path, (json.dumps(obj, ensure_ascii=False, allow_nan=False) for obj in to_lines(self)))

    @classmethod
    def load(cls, path: str | os.PathLike) -> RunTrace:
        """Read a file `save` wrote; a newer, damaged or truncated file raises `TraceFormatError`."""
        path = Path(path)
        with path.open("rb") as f:
            return from_lines(f, str(path))


def to_lines(run: RunTrace) -> Iterator[dict[str, Any]]:
    """The trace as the file's lines (JSON objects): a header, one line per step, a footer."""
    return trace_file.encode({k: getattr(run, k) for k in trace_file.HEADER}, run.steps,
                             {k: getattr(run, k) for k in trace_file.FOOTER})


def from_lines(lines: Iterable[str | bytes], name: str = "<trace>") -> RunTrace:
    """The trace in `lines` (a file's lines, UTF-8 bytes or text); `name` names it in error messages."""
    header, steps, footer = trace_file.decode(lines, name)
    return RunTrace(**header, steps=steps, **footer)
