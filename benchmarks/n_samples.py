"""`--n` on torch (a benchmark, not a test): N samples of one prompt in one batch against N single runs one after
another, and against the same batch with the old per-row sampler (numpy without a vmap: each row's step alone).

    PYTHONPATH=. python benchmarks/n_samples.py                      # built-in model, 16 samples x 64 tokens
    PYTHONPATH=. python benchmarks/n_samples.py --n 8 --tokens 128 --repeat 7

Every variant records the full trace (the window's and `--json`'s path), draws with seed + i for sample i and ignores
EOS, so each decodes --tokens tokens; the variants alternate round by round after a warm-up round, and the figures are
medians. Printed: tokens/s of each and the ratios (the batch's throughput over the single runs', and over the batch
with the per-row sampler).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

from app.core.decoding.generation import generate
from app.core.events import Finished, Request
from app.core.models.sources import BUILTIN_PATH
from app.core.settings import SamplerSettings
from backends import get_backend
from backends.base import LoadOptions
from backends.numpy_rows import NUMPY_ROWS
from backends.ops import NUMPY

PROMPT = "import os\nimport sys\n\ndef main():\n    "
SETTINGS = SamplerSettings(temperature=0.8, top_p=0.95)


def run(model: Any, n: int, tokens: int, seed: int) -> tuple[float, float]:
    """Wall and CPU seconds for one request of `n` samples (prefill included)."""
    req = Request(prompt=PROMPT, settings=SETTINGS.with_(max_tokens=tokens, seed=seed), ignore_eos=True, n=n)
    t, cpu = time.perf_counter(), time.process_time()
    fins = [e for e in generate(model, req, threading.Event()) if isinstance(e, Finished)]
    seconds = time.perf_counter() - t, time.process_time() - cpu
    assert len(fins) == n and all(f.metrics.generated_tokens == tokens for f in fins), "a sample ended early"
    return seconds


def batched(model: Any, n: int, tokens: int, seed: int) -> tuple[float, float]:
    model.ops = NUMPY_ROWS
    return run(model, n, tokens, seed)


def per_row_sampler(model: Any, n: int, tokens: int, seed: int) -> tuple[float, float]:
    """The baseline before the batched numpy step: the same batch, each row's sampler step run alone."""
    model.ops = NUMPY
    try:
        return run(model, n, tokens, seed)
    finally:
        model.ops = NUMPY_ROWS


def one_at_a_time(model: Any, n: int, tokens: int, seed: int) -> tuple[float, float]:
    model.ops = NUMPY_ROWS
    runs = [run(model, 1, tokens, seed + i) for i in range(n)]
    return sum(w for w, _ in runs), sum(c for _, c in runs)


VARIANTS = {"batch, batched sampler": batched, "batch, per-row sampler": per_row_sampler,
            "one at a time": one_at_a_time}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    model = get_backend("torch", BUILTIN_PATH).load(BUILTIN_PATH, LoadOptions(device="cpu", dtype="float32"))
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    for r in range(args.repeat + 1):  # round 0 warms up
        for name, fn in VARIANTS.items():
            s = fn(model, args.n, args.tokens, r)
            if r:
                times[name].append(s)
    total = args.n * args.tokens
    print(f"built-in model, torch CPU, {args.n} samples x {args.tokens} tokens, T 0.8 top-p 0.95, trace on, "
          f"medians of {args.repeat}; wall tokens/s, and tokens per CPU second (the process's, every thread's: on "
          "a machine others load, wall time moves with them)")
    for i, clock in enumerate(("wall", "CPU")):
        rate = {name: total / statistics.median(t[i] for t in ts) for name, ts in times.items()}
        for name, tps in rate.items():
            print(f"  {clock:4s} {name:24s} {tps:8.1f} tok/s")
        one, old = rate["one at a time"], rate["batch, per-row sampler"]
        new = rate["batch, batched sampler"]
        print(f"  {clock}: batched sampler {new / one:.2f}x one at a time, {new / old:.2f}x the per-row sampler; "
              f"per-row sampler {old / one:.2f}x one at a time")

if __name__ == "__main__":
    main()
