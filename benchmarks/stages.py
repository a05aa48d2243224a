"""What each sampler stage costs per step, as a ratio to plain temperature sampling measured in the same run.

The whole step (`start_sample(...).result()`: the pipeline, the draw and the trace's record) on numpy, the executor
the torch backend's CPU path and the tests' reference use, on random logits of a real vocabulary size.

    PYTHONPATH=. python benchmarks/stages.py [--vocab 32000] [--repeat 50]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from app.core.sampler.pipeline import History
from app.core.sampler.sampling import start_sample
from app.core.settings import SamplerSettings, parse_order
from backends.ops import NUMPY

BASE = SamplerSettings(temperature=0.8)
CASES = {
    "top-k 40": BASE.with_(top_k=40), "top-p 0.95": BASE.with_(top_p=0.95), "min-p 0.05": BASE.with_(min_p=0.05),
    "typical-p 0.9": BASE.with_(typical_p=0.9), "top-n-sigma 1": BASE.with_(top_n_sigma=1.0),
    "XTC 0.1 / 1": BASE.with_(xtc_probability=1.0), "dynatemp 0.5": BASE.with_(dynatemp_range=0.5),
    "epsilon 3e-4": BASE.with_(epsilon_cutoff=3e-4), "eta 3e-4": BASE.with_(eta_cutoff=3e-4),
    "mirostat 5 / 0.1": BASE.with_(mirostat_tau=5.0),
    "DRY 0.8 (1,000-token context)": BASE.with_(dry_multiplier=0.8),
    "logit bias (2 tokens)": BASE.with_(logit_bias=((1, 2.0), (2, -5.0))),
    "llama.cpp chain, all on": BASE.with_(top_k=40, top_p=0.95, min_p=0.05, typical_p=0.9, top_n_sigma=2.0,
                                          xtc_probability=0.5, chain=parse_order("llama.cpp")[1]),
}


def per_step_ms(s: SamplerSettings, x: np.ndarray, repeat: int) -> float:
    rng = np.random.default_rng(0)
    context = np.random.default_rng(2).integers(0, 50, 1000).tolist()  # a repetitive 1,000-token context
    history = History.start(NUMPY, x.shape[0], context)
    start_sample(NUMPY, x, s, 0.5, history=history).result()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        start_sample(NUMPY, x, s, float(rng.random()), history=history).result()
        times.append(time.perf_counter() - t)
        history.ids, history.pending = list(context), None  # every step sees the same context
    return statistics.median(times) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocab", type=int, default=32_000)
    p.add_argument("--repeat", type=int, default=50)
    args = p.parse_args()
    x = (np.random.default_rng(1).normal(size=args.vocab) * 3).astype(np.float32)
    base = per_step_ms(BASE, x, args.repeat)
    print(f"vocabulary {args.vocab:,}: temperature alone {base:.2f} ms/step (the baseline)")
    for name, s in CASES.items():
        ms = per_step_ms(s, x, args.repeat)
        print(f"  {name:30s} {ms:6.2f} ms/step  {ms / base:5.2f}x")


if __name__ == "__main__":
    main()
