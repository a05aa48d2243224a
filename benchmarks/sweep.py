"""A sweep's cells decoded together against one cell at a time, on the built-in model.

A 3×3 grid (temperature × top-p) × N samples × T tokens (every step recorded, end-of-text ignored): the cells
of `logitlab sweep` in batches of up to `compare_cli.BATCH_ROWS` samples (`together.generate_together`, one
prefill a batch) against one request per cell (`generation.generate`), both reusing the prompt's KV cache as
the model thread does. Interleaved run by run after a warm-up; prints the medians and the ratio.

    python benchmarks/sweep.py [--backend torch|mlx] [--n 8] [--tokens 64] [--repeat 2] [--rows 64]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

from app.cli.compare import BATCH_ROWS
from app.core.compare.job_plan import cell_batches
from app.core.compare.statistics import make_grid, parse_axis
from app.core.decoding.generation import Prefix, generate
from app.core.decoding.together import generate_together
from app.core.events import Finished, Request
from app.core.models.sources import BUILTIN_PATH
from app.core.settings import SamplerSettings
from backends import get_backend
from backends.base import LoadOptions

PROMPT = "import os\nimport sys\n\ndef main():\n    "
AXES = ("temperature=0.2,0.7,1.2", "top_p=0.8,0.95,1")


def requests(n: int, tokens: int, seed: int) -> list[Request]:
    base = SamplerSettings(seed=seed, max_tokens=tokens)
    return [Request(prompt=PROMPT, settings=c.settings, n=n, ignore_eos=True)
            for c in make_grid(base, [parse_axis(a) for a in AXES])]


def one_at_a_time(model: Any, reqs: list[Request], rows: int) -> list[Finished]:
    prefix = Prefix()
    return [e for r in reqs for e in generate(model, r, threading.Event(), prefix) if isinstance(e, Finished)]


def together(model: Any, reqs: list[Request], rows: int) -> list[Finished]:
    prefix, out = Prefix(), []
    for batch in cell_batches(reqs, reqs[0].n, rows):
        out += [e for e in generate_together(model, batch, threading.Event(), prefix) if isinstance(e, Finished)]
    return out


def timed(run: Any, model: Any, reqs: list[Request], rows: int, tokens: int) -> float:
    t = time.perf_counter()
    fins = run(model, reqs, rows)
    seconds = time.perf_counter() - t
    assert len(fins) == sum(r.n for r in reqs) and all(f.metrics.generated_tokens == tokens for f in fins)
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="torch")
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--rows", type=int, default=BATCH_ROWS, help="samples a batch holds at most")
    args = p.parse_args()
    model = get_backend(args.backend, BUILTIN_PATH).load(BUILTIN_PATH, LoadOptions(dtype="float32"))
    runs = {"one cell at a time": one_at_a_time, "cells together": together}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for run in runs.values():  # warm-up: every batch size once, a few tokens
        run(model, requests(args.n, 4, 0), args.rows)
    for r in range(args.repeat):
        for name, run in (runs.items() if r % 2 == 0 else reversed(runs.items())):
            times[name].append(timed(run, model, requests(args.n, args.tokens, r), args.rows, args.tokens))
    one, both = (statistics.median(times[k]) for k in runs)
    print(f"{args.backend}: 3x3 sweep x {args.n} samples x {args.tokens} tokens (batches of <= {args.rows} samples): "
          f"one cell at a time {one:.2f} s, cells together {both:.2f} s: {one / both:.2f}x faster "
          f"(runs: {', '.join(f'{k} {[round(x, 2) for x in v]}' for k, v in times.items())})")


if __name__ == "__main__":
    main()
