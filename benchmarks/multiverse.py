"""Multiverse speed: nodes expanded per second, the rows of a round forwarded together against one node at a time.

On the built-in model and a random-weight ~0.1B Llama made on the spot (`logitlab bench`'s shape, the built-in
tokenizer), each prefilled once; then, in turns (so that a busy machine slows both alike), the same look-ahead
(budget 200, depth 6, 10 children a node) grown with `--rows` nodes per forward and with one. Prints each one's
best seconds of the turns (and the median), the nodes it ranked and the rows it forwarded per second, and the ratio
of the best times against one at a time in the same process (the baseline is `rows=1`, measured in this run), under
the window's default chain (temperature 0.8) and a top-p / min-p one (whose whole-vocabulary sort costs each row more).

    PYTHONPATH=. python benchmarks/multiverse.py [--backend torch] [--repeats 3] [--rows 32] [--models builtin,0.1b]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from app.core.settings import SamplerSettings

PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    "
CHAINS = {"temperature 0.8": SamplerSettings(), "top-p 0.9, min-p 0.05": SamplerSettings(top_p=0.9, min_p=0.05)}


def grow(model: Any, cache: Any, logits: Any, ids: list[int], rows: int, budget: int,
         settings: SamplerSettings) -> tuple[float, Any]:
    from app.core.decoding.multiverse import Explorer, LookAhead

    t = time.perf_counter()
    *_, tree = Explorer(model, cache, logits, ids, (), settings,
                        LookAhead(budget=budget, depth=6, width=10, rows=rows)).grow()
    return time.perf_counter() - t, tree


def bench(name: str, model: Any, rows: int, repeats: int, budget: int) -> None:
    from app.core.decoding.prefill import prefill

    ids = model.tokenizer.encode(PROMPT)
    cache = model.new_cache()
    logits = prefill(model, cache, ids, None)
    for chain, settings in CHAINS.items():
        grow(model, cache, logits, ids, rows, budget, settings)  # warm: first calls, the sampler's compiled steps
        times: dict[int, list[float]] = {1: [], rows: []}
        trees = {}
        for _ in range(repeats):
            for r in (1, rows):
                seconds, trees[r] = grow(model, cache, logits, ids, r, budget, settings)
                times[r].append(seconds)
        base = min(times[1])
        for r in (1, rows):
            best, tree = min(times[r]), trees[r]
            print(f"{name:>13} {chain:>18}  rows {r:>3}: best {best:6.2f} s (median {statistics.median(times[r]):6.2f})"
                  f"  {tree.ranked / best:7.1f} nodes/s  {tree.expanded / best:7.1f} rows/s  ({tree.ranked} nodes, "
                  f"{tree.expanded} expanded)  ×{base / best:.2f} vs one at a time", flush=True)


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
            bench(label, model, args.rows, args.repeats, args.budget)
            model.close()
        finally:
            if name != "builtin":
                shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
