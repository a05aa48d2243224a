"""`logitlab bench`'s line "speculative (built-in draft, adaptive)": the built-in model with its shipped draft, the
draft length adapted to what drafting is measured to save, against plain decoding of the same tokens timed in the
same request (`--compare-plain`'s measure: both pay the same path), greedy and sampled, with the trace recorded;
medians of the speed ratios over the repeats, and the runs' acceptance and plain steps.
"""

from __future__ import annotations

import statistics
import threading
from typing import Any

from app.core.events import Request, Speculated
from app.core.models.drafts import BUILTIN_DRAFT_PATH
from app.core.runs.speculative_run import run_speculative
from app.core.settings import SamplerSettings
from backends import get_backend
from backends.base import LoadOptions

PROMPT = "import os\nimport sys\n\n\ndef main("
SETTINGS = {"greedy": SamplerSettings(temperature=0.0), "sampled": SamplerSettings(temperature=0.8, top_k=40)}


def speculative_vs_plain(model: Any, backend: str, tokens: int, repeat: int) -> dict[str, dict[str, float]]:
    """{settings: {"speedup", "cpu_speedup", "acceptance", "plain_steps", "tokens"}}: adaptive speculative decoding
    of the built-in model (`model`) with its draft over plain decoding, medians of `repeat` runs after a warm-up."""
    opts = LoadOptions(device="cpu" if model.info.device == "cpu" else None, dtype=model.info.dtype)
    draft = get_backend(backend).load(BUILTIN_DRAFT_PATH, opts)
    out = {}
    for name, s in SETTINGS.items():
        runs = [_run(model, draft, s.with_(max_tokens=tokens, seed=r)) for r in range(repeat + 1)][1:]
        out[name] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    return out


def _run(model: Any, draft: Any, settings: SamplerSettings) -> dict[str, float]:
    request = Request(prompt=PROMPT, settings=settings, draft_k=0, compare_plain=True, ignore_eos=True)
    [s] = [e.summary for e in run_speculative(model, draft, request, threading.Event()) if isinstance(e, Speculated)]
    return {"speedup": s.speedup or 0.0, "cpu_speedup": s.cpu_speedup or 0.0,
            "acceptance": s.stats.acceptance_rate or 0.0, "plain_steps": s.stats.plain_rounds,
            "tokens": s.stats.tokens}


def line(r: dict[str, dict[str, float]]) -> str:
    parts = [f"{name} x{x['speedup']:.2f} plain decoding (CPU time x{x['cpu_speedup']:.2f}; acceptance "
             f"{x['acceptance']:.0%}, {x['plain_steps']:.0f} of {x['tokens']:.0f} tokens plain steps)"
             for name, x in r.items()]
    return "speculative (built-in draft, adaptive, with the trace): " + "; ".join(parts)
