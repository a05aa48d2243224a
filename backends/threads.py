"""How many CPU threads torch runs a model's ops on: what the user asked for, else one for a small model and
torch's own default for a larger one.

A small model's decode step is a few hundred tiny ops: splitting each one across threads costs more in hand-offs
than it saves, and on a busy machine a thread that waits for a descheduled partner stalls the whole step
(`benchmarks/threads.py`; figures in the README). Pure arithmetic: the torch backend applies the number.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from backends.base import ModelLoadError

SMALL_MODEL = 50_000_000  # parameters below which one thread is fastest (and never much slower)
MAX_THREADS = 256


class ThreadsError(ModelLoadError):
    """A thread count out of range; the message names the range."""


def check_threads(n: int | None) -> int | None:
    if n is not None and not 1 <= n <= MAX_THREADS:
        raise ThreadsError(f"threads must be from 1 to {MAX_THREADS} (or left to choose), got {n}")
    return n


def from_env(env: Mapping[str, str]) -> int | None:
    """OMP_NUM_THREADS when the user set it to a whole number: an explicit choice, as `--threads` is."""
    value = env.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) >= 1 else None


def choose_threads(parameters: int, requested: int | None, default: int,
                   env: Mapping[str, str] = os.environ) -> int:
    """The thread count for a model of `parameters`: `requested`, else OMP_NUM_THREADS, else the rule
    (one below `SMALL_MODEL` parameters, `default`, torch's own choice, above)."""
    explicit = check_threads(requested) or from_env(env)
    if explicit is not None:
        return explicit
    return 1 if parameters < SMALL_MODEL else max(1, default)
