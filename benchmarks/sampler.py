"""The sampler alone: milliseconds per step at real vocabulary sizes, ours against the frameworks' own samplers.

Ours: `start_sample(...).result()`, the whole step including the host transfer, with the trace's record (1)
and without it (2). Baseline (3), in the same run on the same logits: what the usual tools do per step,
`mlx_lm`'s `make_sampler` after its `logsumexp` on MLX, transformers' logits warpers + softmax + multinomial
(argmax when greedy) on torch's CPU, where our sampler runs on numpy.
Vocabularies: the built-in model's 4,096, Llama-2's 32,000, Qwen2's 151,936.

`--cold` reads a 32 MB buffer before each timed call, as a model's forward does between two steps: a step's
numpy calls then find the interpreter's and numpy's code and data out of the caches, and each costs several
times its warm figure (what the decode loop sees; the call count matters more than the arithmetic). The times
are then the CPU time of this process (MLX's stream threads included), which other processes on a busy
machine move less than wall time.

`--batch` measures the step of B rows sharing settings (N samples) instead, on the built-in model's real logits
(V = 4,096; row i the model's logits at position i of a prompt, each row its own penalty history): per step, B
calls of `start_sample` (the per-row loop `decode` ran) against one `start_samples` (one mapped graph, one read),
for B = 1, 8, 16, on numpy (the torch backend's CPU executor: no vmap, so both are the loop), torch tensors on the
CPU, MLX on the CPU, and torch on CUDA where there is one (eager, and compiled as with `--compile`).

    python benchmarks/sampler.py [--backend mlx|torch] [--repeat 30] [--cold]
    python benchmarks/sampler.py --batch [--repeat 30]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from app.core.sampler.batch_sampling import start_samples
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import start_sample
from app.core.settings import SamplerSettings
from backends.ops import NUMPY

VOCABS = (4096, 32_000, 151_936)
SETTINGS = {"greedy": SamplerSettings(temperature=0.0), "top-k 40": SamplerSettings(temperature=0.8, top_k=40),
            "top-p 0.95": SamplerSettings(temperature=0.8, top_p=0.95)}


EVICT = np.ones(4 << 20)  # 32 MB: more than the caches hold, about what a small model's forward reads


def per_call_ms(fn: Callable[[], object], repeat: int, cold: bool = False) -> float:
    fn()
    clock = time.process_time if cold else time.perf_counter  # cold: with the MLX stream thread's work
    times = []
    for _ in range(repeat):
        if cold:
            EVICT.sum()
        t = clock()
        fn()
        times.append(clock() - t)
    return statistics.median(times) * 1e3


def mlx_setup(logits: np.ndarray) -> tuple[object, object, Callable[[SamplerSettings], Callable[[], object]]]:
    import mlx.core as mx
    from mlx_lm.sample_utils import make_sampler

    from backends.mlx.backend import MlxOps

    x = mx.array(logits)

    def baseline(s: SamplerSettings) -> Callable[[], object]:
        sampler = make_sampler(temp=s.temperature, top_p=s.top_p if s.top_p < 1 else 0.0, top_k=s.top_k)

        def step() -> int:
            logprobs = x - mx.logsumexp(x, keepdims=True)  # as mlx_lm.generate_step does every step
            return sampler(logprobs[None]).item()

        return step

    return MlxOps(), x, baseline


def torch_setup(logits: np.ndarray) -> tuple[object, object, Callable[[SamplerSettings], Callable[[], object]]]:
    import torch
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    x = torch.from_numpy(logits)
    ids = torch.zeros((1, 1), dtype=torch.long)

    def baseline(s: SamplerSettings) -> Callable[[], object]:
        warpers = LogitsProcessorList()
        if s.temperature:
            warpers.append(TemperatureLogitsWarper(s.temperature))
        if s.top_k:
            warpers.append(TopKLogitsWarper(s.top_k))
        if s.top_p < 1:
            warpers.append(TopPLogitsWarper(s.top_p))

        def step() -> int:  # what model.generate does with the last row of logits
            if not s.temperature:
                return int(torch.argmax(x))
            scores = warpers(ids, x[None].clone())
            return int(torch.multinomial(torch.softmax(scores, dim=-1), 1))

        return step

    return NUMPY, logits, baseline  # as TorchModel on a CPU: the sampler on numpy over the logits' memory


def ours_step(ops: object, x: object, s: SamplerSettings, record: bool) -> object:
    return start_sample(ops, x, s, 0.5, record=record).result()


BATCHES = (1, 8, 16)
BATCH_SETTINGS = {"top-p 0.95 min-p": SamplerSettings(temperature=0.8, top_p=0.95, min_p=0.02),
                  "+ penalties": SamplerSettings(temperature=0.8, top_p=0.95, min_p=0.02, repetition_penalty=1.1)}
PROMPT = "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"


def builtin_logits(rows: int) -> tuple[np.ndarray, list[int]]:
    """(rows, V) float32: the built-in model's logits at the prompt's first `rows` positions, and the prompt's ids."""
    from app.core.models.sources import BUILTIN_PATH
    from backends import get_backend
    from backends.base import LoadOptions

    model = get_backend("torch").load(BUILTIN_PATH, LoadOptions(device="cpu", dtype="float32"))
    ids = model.tokenizer.encode(PROMPT)[:rows]
    logits = np.asarray(model.forward([ids], model.new_cache(), positions="all"), dtype=np.float32)[0]
    assert logits.shape[0] == rows, f"the prompt has {logits.shape[0]} tokens, {rows} are needed"
    return np.ascontiguousarray(logits), ids


def batch_executors() -> list[tuple[str, object]]:
    """(label, executor) for every executor this machine runs."""
    out: list[tuple[str, object]] = [("numpy (torch on CPU)", NUMPY)]
    try:
        import torch

        from backends.torch.backend import TorchOps

        out.append(("torch CPU tensors", TorchOps(torch.device("cpu"))))
        if torch.cuda.is_available():
            out.append(("torch CUDA", TorchOps(torch.device("cuda"))))
            out.append(("torch CUDA compiled", TorchOps(torch.device("cuda"), compile_steps=True)))
    except ImportError:
        pass
    try:
        from backends.mlx.backend import MlxOps

        out.append(("MLX CPU" if MlxOps().host_record else "MLX GPU", MlxOps()))
    except ImportError:
        pass
    return out


def histories(ops: object, s: SamplerSettings, ids: list[int], rows: int) -> list[History | None]:
    """Row i's history: the prompt's first i + 1 tokens (the rows' penalty counts differ)."""
    return [History.start(ops, 4096, ids[: i + 1]) for i in range(rows)] if s.needs_history else [None] * rows


def batch_step(ops: object, x: object, s: SamplerSettings, us: list[float], hs: list, batched: bool) -> object:
    """One step of len(us) rows, read back: one mapped step, or one step per row (`decode`'s loop)."""
    if batched:
        return start_samples(ops, x, s, us, histories=hs).results()
    pending = [start_sample(ops, x[i], s, u, history=h) for i, (u, h) in enumerate(zip(us, hs, strict=True))]
    return [p.result() for p in pending]


def batch_main(repeat: int) -> None:
    logits, ids = builtin_logits(max(BATCHES))
    print(f"sampler step for B rows sharing settings, the trace recorded, ms per step (median of {repeat}); built-in "
          f"model's logits, V = {logits.shape[1]:,}; loop = B x start_sample, batched = start_samples")
    print(f"{'executor':22} {'setting':17} {'B':>3} {'loop':>9} {'batched':>9} {'loop/batched':>12} "
          f"{'batched/B=1':>11}")
    us = np.random.default_rng(0).random(max(BATCHES)).tolist()
    for label, ops in batch_executors():
        for name, s in BATCH_SETTINGS.items():
            one = None
            for b in BATCHES:
                x = ops.f32(logits[:b])
                loop = per_call_ms(partial(batch_step, ops, x, s, us[:b], histories(ops, s, ids, b), False), repeat)
                mapped = per_call_ms(partial(batch_step, ops, x, s, us[:b], histories(ops, s, ids, b), True), repeat)
                one = mapped if one is None else one
                print(f"{label:22} {name:17} {b:3} {loop:9.3f} {mapped:9.3f} {loop / mapped:12.2f} "
                      f"{mapped / one:11.2f}")
    print("loop/batched above 1: the batched step is faster; batched/B=1: its cost against one row's.")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=["mlx", "torch"], default="mlx")
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--cold", action="store_true", help="evict the caches before each call (CPU time)")
    p.add_argument("--batch", action="store_true", help="B rows sharing settings: per-row loop vs batched step")
    args = p.parse_args()
    if args.batch:
        batch_main(args.repeat)
        return
    setup = mlx_setup if args.backend == "mlx" else torch_setup
    base = "mlx_lm logsumexp + make_sampler" if args.backend == "mlx" else "transformers warpers + multinomial"
    kind = "CPU ms per step, caches evicted before each" if args.cold else "ms per step"
    print(f"sampler step on {args.backend}, {kind} (median of {args.repeat}); baseline (3) = {base}")
    print(f"{'vocabulary':>10} {'setting':11} {'(1) trace':>10} {'(2) no trace':>12} {'(3) baseline':>12} "
          f"{'(1)/(3)':>8} {'(2)/(3)':>8}")
    rng = np.random.default_rng(0)
    for vocab in VOCABS:
        logits = (rng.standard_normal(vocab) * 3).astype(np.float32)
        ops, x, baseline = setup(logits)
        for name, s in SETTINGS.items():
            ours = [per_call_ms(partial(ours_step, ops, x, s, record), args.repeat, args.cold)
                    for record in (True, False)]
            ref = per_call_ms(baseline(s), args.repeat, args.cold)
            print(f"{vocab:10,} {name:11} {ours[0]:10.3f} {ours[1]:12.3f} {ref:12.3f} "
                  f"{ref / ours[0]:8.2f} {ref / ours[1]:8.2f}")
    print("(1)/(3) and (2)/(3) are speed ratios: above 1, ours is faster.")


if __name__ == "__main__":
    main()
