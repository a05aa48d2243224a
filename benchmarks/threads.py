"""Torch CPU decode speed against the number of intra-op threads, on idle and on busy cores.

For each model (the built-in one and random-weight Llamas made on the fly), our loop with the full trace runs
at each thread count, interleaved run by run; with `--busy N`, each repeat also runs every thread count while N
extra processes spin on the cores (a machine shared with other work). Baseline: torch's own default thread
count, measured in the same run. Prints tokens/s (medians), the ratios, and the load average.

    python benchmarks/threads.py [--models builtin,0.1b] [--threads 1,2] [--busy 2] [--tokens 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from app.cli.bench.command import SETTINGS, make_prompt, random_model, run_ours
from app.core.models.sources import resolve
from backends.base import LoadOptions
from backends.torch.backend import TorchBackend

DEFAULT = torch.get_num_threads()  # before anything sets it: what a user gets without a rule


def spin() -> None:
    while True:
        pass


@contextmanager
def busy(n: int) -> Iterator[None]:
    """`n` processes spinning on the cores while the block runs."""
    procs = [multiprocessing.Process(target=spin, daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
            p.join()


def load(name: str) -> tuple[Any, str | None]:
    path = resolve("builtin")
    tmp = None
    if name != "builtin":
        path = tmp = random_model(name, path, "float32")
    return TorchBackend().load(path, LoadOptions(device="cpu", dtype="float32")), tmp and str(tmp)


def measure(model: Any, threads: list[int], loads: list[int], tokens: int, repeat: int) -> dict:
    ids = make_prompt(model.tokenizer, 32)
    s = SETTINGS["sampling"]
    rates: dict[tuple[int, int], list[float]] = {(b, t): [] for b in loads for t in threads}
    for r in range(repeat + 1):  # the first round warms up and is not counted
        for b in loads:
            with busy(b):
                for t in threads:
                    torch.set_num_threads(t)
                    row = run_ours(model, ids, tokens if r else 8, s, True, r)
                    if r:
                        rates[b, t].append(row["decode_tokens_per_s"])
    return {k: statistics.median(v) for k, v in rates.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="builtin,0.1b")
    ap.add_argument("--threads", default=f"1,{DEFAULT}" if DEFAULT > 1 else "1,2")
    ap.add_argument("--busy", type=int, default=0, help="also measure with this many spinning processes")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    threads = sorted({int(t) for t in args.threads.split(",")} | {DEFAULT})
    loads = [0, args.busy] if args.busy else [0]
    print(f"{os.cpu_count()} cores, torch default {DEFAULT} threads; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name in args.models.split(","):
        model, tmp = load(name)
        try:
            med = measure(model, threads, loads, args.tokens, args.repeat)
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
        print(f"{name} ({model.info.parameters / 1e6:.1f}M params), decode tok/s with the trace, "
              f"median of {args.repeat}; ratio to {DEFAULT} threads (torch's default) in the same conditions:")
        for b in loads:
            cells = [f"{t} thr {med[b, t]:7.1f} ({med[b, t] / med[b, DEFAULT]:.2f}x)" for t in threads]
            print(f"  {'as is' if not b else f'+{b} spinning':12} " + "   ".join(cells))
        print(f"  load average now: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
