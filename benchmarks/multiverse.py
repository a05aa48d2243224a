"""Multiverse speed: nodes expanded per second, the rows of a round forwarded together against one node at a time.

On the built-in model and a random-weight ~0.1B Llama made on the spot (`logitlab bench`'s shape, the built-in
tokenizer), each prefilled once; then, in turns (so that a busy machine slows both alike), the same look-ahead
(budget 200, depth 6, 10 children a node) grown with `--rows` nodes per forward and with one. Prints each one's
best CPU seconds of the turns (the process's, which a busy machine inflates less than the wall clock) and best wall
seconds, the nodes it ranked and the rows it forwarded per CPU second, and the ratios of the best times against one
at a time in the same process (the baseline is `rows=1`, measured in this run), under the window's default chain
(temperature 0.8) and a top-p / min-p one (whose whole-vocabulary sort costs each row more); and the load average
before and after each model.

    PYTHONPATH=. python benchmarks/multiverse.py [--backend torch] [--repeats 3] [--rows 32] [--models builtin,0.1b]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from app.core.settings import SamplerSettings

PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    "
CHAINS = {"temperature 0.8": SamplerSettings(), "top-p 0.9, min-p 0.05": SamplerSettings(top_p=0.9, min_p=0.05)}


def grow(model: Any, cache: Any, logits: Any, ids: list[int], rows: int, budget: int,
         settings: SamplerSettings) -> tuple[float, float, Any]:
    """CPU seconds, wall seconds and the tree of one look-ahead."""
    from app.core.decoding.multiverse import Explorer, LookAhead

    cpu, wall = time.process_time(), time.perf_counter()
    *_, tree = Explorer(model, cache, logits, ids, (), settings,
                        LookAhead(budget=budget, depth=6, width=10, rows=rows)).grow()
    return time.process_time() - cpu, time.perf_counter() - wall, tree


def bench(name: str, model: Any, rows: int, repeats: int, budget: int) -> None:
    from app.core.decoding.prefill import prefill

    ids = model.tokenizer.encode(PROMPT)
    cache = model.new_cache()
    logits = prefill(model, cache, ids, None)
    for chain, settings in CHAINS.items():
        grow(model, cache, logits, ids, rows, budget, settings)  # warm: first calls, the sampler's compiled steps
        cpu: dict[int, list[float]] = {1: [], rows: []}
        wall: dict[int, list[float]] = {1: [], rows: []}
        trees = {}
        for _ in range(repeats):
            for r in (1, rows):
                c, w, trees[r] = grow(model, cache, logits, ids, r, budget, settings)
                cpu[r].append(c)
                wall[r].append(w)
        for r in (1, rows):
            best, tree = min(cpu[r]), trees[r]
            print(f"{name:>13} {chain:>21}  rows {r:>3}: CPU {best:6.3f} s (median {statistics.median(cpu[r]):6.3f}) "
                  f"wall {min(wall[r]):6.3f} s  {tree.ranked / best:6.0f} nodes/s  {tree.expanded / best:6.0f} rows/s "
                  f"({tree.ranked} nodes, {tree.expanded} expanded)  ×{min(cpu[1]) / best:.2f} CPU, "
                  f"×{min(wall[1]) / min(wall[r]):.2f} wall vs one at a time", flush=True)


def main() -> None:
    from app.cli.bench.command import random_model
    from app.core.models.sources import BUILTIN_PATH
    from backends import get_backend
    from backends.base import LoadOptions

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="torch", choices=["torch", "mlx"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--budget", type=int, default=200)
    p.add_argument("--models", default="builtin,0.1b")
    args = p.parse_args()
    for name in args.models.split(","):
        path = BUILTIN_PATH if name == "builtin" else random_model(name, BUILTIN_PATH, "float32")
        try:
            model = get_backend(args.backend, path).load(Path(path), LoadOptions(dtype="float32"))
            label = f"{name} ({model.info.parameters / 1e6:.0f}M)"
            print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
            bench(label, model, args.rows, args.repeats, args.budget)
            print(f"load average after: {os.getloadavg()[0]:.1f}", flush=True)
            model.close()
        finally:
            if name != "builtin":
                shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
