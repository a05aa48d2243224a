"""The lean torch forward's weight layout on a CPU (a benchmark, not a test): decode steps per second of the same
random model in float32 and bfloat16, one row and two (and --rows more), with the weights input-major, (in, out)
(the old layout: `x @ w`), and in `F.linear`'s (out, in) layout (a transposed view: `x @ w.t()`); and llama.cpp's
own forward over the same weights as an F16 GGUF (llama-cpp-python, where installed), one row.

    PYTHONPATH=. python benchmarks/layout.py                          # a random ~75M Llama (hidden 1024, 8 layers)
    PYTHONPATH=. python benchmarks/layout.py --hidden 2048 --layers 6 --rows 1,2,4,16 --repeat 9
    PYTHONPATH=. python benchmarks/layout.py --builtin                # the built-in 5.5M model

Forward only (no sampler): each figure is a decode step of `rows` rows over a 64-token prompt's cache, the median of
--repeat rounds in which every variant runs `--steps` steps in turn. Threads: torch's count as Logit Lab sets it for
the model's size (`backends.threads`), and llama.cpp gets the same number.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from app.core.models.sources import BUILTIN_PATH
from backends.threads import choose_threads
from backends.torch.fast import FastLlama
from tests.tiny import make_model

PROMPT = list(range(3, 67))


def lean(path: Path, dtype: torch.dtype, input_major: bool) -> FastLlama:
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()  # (transformers' own loader: both alike)
    return FastLlama(hf, input_major=input_major)


def steps_per_s(model: FastLlama, rows: int, steps: int) -> tuple[float, float]:
    """Decode steps per wall second and per CPU second (the process's, every thread's)."""
    cache = model.new_cache()
    model.forward([PROMPT] * rows, cache)
    t, cpu = time.perf_counter(), time.process_time()
    for i in range(steps):
        model.forward([[5 + i % 50]] * rows, cache)
    return steps / (time.perf_counter() - t), steps / (time.process_time() - cpu)


def llama_cpp_steps(gguf: Path, threads: int, steps: int) -> Any:
    """A function timing `steps` one-row decode steps of llama.cpp's own forward (Llama.eval) on `gguf`."""
    from llama_cpp import Llama

    llm = Llama(str(gguf), n_ctx=512, n_threads=threads, n_threads_batch=threads, verbose=False)

    def run() -> tuple[float, float]:
        llm.reset()
        llm.eval(PROMPT)
        t, cpu = time.perf_counter(), time.process_time()
        for i in range(steps):
            llm.eval([5 + i % 50])
        return steps / (time.perf_counter() - t), steps / (time.process_time() - cpu)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--builtin", action="store_true", help="the built-in model instead of a random one")
    ap.add_argument("--rows", default="1,2", help="rows per step, comma-separated")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="threads for both (default: Logit Lab's rule)")
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    hf_logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as tmp:
        path = BUILTIN_PATH if args.builtin else make_model(Path(tmp) / "random", hidden=args.hidden,
                                                            layers=args.layers, seed=0)
        models = {(dt, major): lean(path, dt, major) for dt in (torch.float32, torch.bfloat16)
                  for major in (True, False)}
        params = sum(p.numel() for p in models[torch.float32, True].hf.parameters())
        threads = choose_threads(params, args.threads, torch.get_num_threads())
        torch.set_num_threads(threads)
        variants = {(dt, major, r): (lambda m=m, r=r: steps_per_s(m, r, args.steps))
                    for (dt, major), m in models.items() for r in rows}
        peer = _llama_cpp(path, Path(tmp), threads, args.steps)
        if peer is not None:
            variants["llama.cpp F16"] = peer
        rates: dict[Any, list[tuple[float, float]]] = {k: [] for k in variants}
        for r in range(args.repeat + 1):  # round 0 warms up
            for k, fn in variants.items():
                v = fn()
                if r:
                    rates[k].append(v)
        for i, clock in enumerate(("wall", "CPU")):
            _report({k: statistics.median(v[i] for v in vs) for k, vs in rates.items()}, rows, params, threads,
                    args, clock)


def _llama_cpp(path: Path, tmp: Path, threads: int, steps: int) -> Any:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("(llama-cpp-python is not installed: no llama.cpp figure)")
        return None
    from tests.gguf_files import write_gguf

    return llama_cpp_steps(write_gguf(path, tmp / "f16.gguf", "F16"), threads, steps)


def _report(med: dict[Any, float], rows: list[int], params: int, threads: int, args: argparse.Namespace,
            clock: str) -> None:
    name = "built-in model" if args.builtin else f"random Llama, hidden {args.hidden}, {args.layers} layers"
    print(f"\n{name}: {params / 1e6:.1f}M parameters, {threads} thread(s), decode steps per {clock} second "
          f"(x rows = tokens/s), medians of {args.repeat}")
    print("| dtype | rows | input-major (old) | (out, in) (new) | new / old | rows cost vs 1 row (old, new) |")
    print("|---|---|---|---|---|---|")
    for dt in (torch.float32, torch.bfloat16):
        for r in rows:
            old, new = med[dt, True, r], med[dt, False, r]
            cost = f"{med[dt, True, 1] / old:.2f}x, {med[dt, False, 1] / new:.2f}x" if 1 in rows else ""
            print(f"| {str(dt)[6:]} | {r} | {old:.1f} | {new:.1f} | {new / old:.2f} | {cost} |")
    if 1 in rows:
        f32, bf16 = med[torch.float32, True, 1], med[torch.bfloat16, False, 1]
        print(f"bfloat16 (new) / float32 (old), one row: {bf16 / f32:.2f}")
        if "llama.cpp F16" in med:
            cpp = med["llama.cpp F16"]
            print(f"llama.cpp F16, one row: {cpp:.1f} steps/s; ours bfloat16 (new) / llama.cpp F16: {bf16 / cpp:.2f}; "
                  f"ours float32 / llama.cpp F16: {f32 / cpp:.2f}")


if __name__ == "__main__":
    main()
