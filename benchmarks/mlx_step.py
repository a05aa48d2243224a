"""MLX's per-step cost in one process: Logit Lab's decode against mlx_lm's own `generate_step` loop.

Same loaded model, same prompt, alternated run by run, medians after a warm-up of each: (1) Logit Lab's
`generate` with the full per-step trace, (2) without it, (3) baseline: mlx_lm's `generate_step` (its
`make_sampler`), the loop mlx_lm's `generate` runs. Decode tokens/s is the tokens after the first over the time
from the first to the last; the host µs per step is the CPU time of the thread that runs the loop over the same
span (what Python does per step: MLX computes on its own stream thread), so (1) - (3) is what Logit Lab adds.
Models: a tiny random Qwen2 (0.3M parameters, the built-in model's 4,096-token vocabulary: the host's cost
dominates) and a ~60M random Qwen2 (32,000 tokens: the forward dominates), made here with numpy.

    python benchmarks/mlx_step.py [--tokens N] [--repeat 5] [--models tiny,60m] [--profile tiny]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from app.core.decoding.generation import generate
from app.core.events import Request, Step
from app.core.models.sources import BUILTIN_PATH
from app.core.settings import SamplerSettings
from backends import get_backend
from backends.base import LoadOptions

SHAPES = {  # hidden, intermediate, layers, heads, kv heads, vocabulary
    "tiny": (64, 128, 2, 4, 2, 4096),
    "60m": (512, 1536, 16, 8, 2, 32_000),
}
TOKENS = {"tiny": 200, "60m": 40}  # per model, unless --tokens says
SETTINGS = {"greedy": SamplerSettings(temperature=0.0), "sampling": SamplerSettings(temperature=0.8, top_p=0.95)}
PROMPT = "def fibonacci(n):"


def random_qwen2(out: Path, name: str) -> Path:
    """A random-weight Qwen2 of the shape `SHAPES[name]` (numpy's seeded draws) with the built-in tokenizer."""
    from safetensors.numpy import save_file

    hidden, inner, layers, heads, kv_heads, vocab = SHAPES[name]
    head_dim = hidden // heads
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    for i in range(layers):
        at, mlp = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        q, kv = heads * head_dim, kv_heads * head_dim
        shapes.update({at + "q_proj.weight": (q, hidden), at + "q_proj.bias": (q,), at + "k_proj.weight": (kv, hidden),
                       at + "k_proj.bias": (kv,), at + "v_proj.weight": (kv, hidden), at + "v_proj.bias": (kv,),
                       at + "o_proj.weight": (hidden, q), mlp + "gate_proj.weight": (inner, hidden),
                       mlp + "up_proj.weight": (inner, hidden), mlp + "down_proj.weight": (hidden, inner),
                       f"model.layers.{i}.input_layernorm.weight": (hidden,),
                       f"model.layers.{i}.post_attention_layernorm.weight": (hidden,)})
    rng = np.random.default_rng(0)
    weights = {k: (rng.normal(0, 0.05, s) if len(s) == 2 else np.ones(s) if "norm" in k else np.zeros(s))
               .astype(np.float32) for k, s in shapes.items()}
    out.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": hidden,
              "intermediate_size": inner, "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv_heads, "vocab_size": vocab, "max_position_embeddings": 4096,
              "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0, "tie_word_embeddings": True, "hidden_act": "silu",
              "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32"}
    (out / "config.json").write_text(json.dumps(config, indent=1))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(BUILTIN_PATH / f, out / f)
    return out


class Span:
    """Wall and thread-CPU clocks at the first and the last token of a run."""

    def __init__(self) -> None:
        self.stamps: list[tuple[float, float]] = []

    def mark(self) -> None:
        self.stamps.append((time.perf_counter(), time.thread_time(), time.process_time()))

    def figures(self) -> tuple[float, float, float]:
        """Decode tokens/s, the loop's thread's CPU µs per step, and the process's (every thread's) per step."""
        (w0, c0, p0), (w1, c1, p1) = self.stamps[0], self.stamps[-1]
        steps = len(self.stamps) - 1
        return steps / (w1 - w0), (c1 - c0) / steps * 1e6, (p1 - p0) / steps * 1e6


def run_ours(model: object, ids: list[int], n: int, s: SamplerSettings, record: bool, seed: int) -> Span:
    req = Request(prompt_ids=tuple(ids), settings=s.with_(max_tokens=n, seed=seed), record=record, ignore_eos=True,
                  top_n=20)
    span = Span()
    for e in generate(model, req, threading.Event()):  # type: ignore[arg-type]
        if isinstance(e, Step):
            span.mark()
    return span


def run_mlx_lm(model: object, ids: list[int], n: int, s: SamplerSettings, seed: int) -> Span:
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.sample_utils import make_sampler

    mx.random.seed(seed)
    sampler = make_sampler(temp=s.temperature, top_p=s.top_p if s.temperature else 0.0)
    span = Span()
    for _, _ in zip(generate_step(mx.array(ids), model.model, max_tokens=n, sampler=sampler),  # type: ignore[attr-defined]
                    range(n), strict=False):
        span.mark()
    return span


MODES = ("mlx_lm", "trace", "no trace")


def run(mode: str, model: object, ids: list[int], n: int, s: SamplerSettings, seed: int) -> Span:
    if mode == "mlx_lm":
        return run_mlx_lm(model, ids, n, s, seed)
    return run_ours(model, ids, n, s, mode == "trace", seed)


def bench(model: object, ids: list[int], n: int, repeat: int) -> None:
    for name, s in SETTINGS.items():
        for mode in MODES:
            run(mode, model, ids, min(n, 16), s, 0)  # warm-up (compiles the sampler's step)
        rates: dict[str, list[float]] = {m: [] for m in MODES}
        host: dict[str, list[float]] = {m: [] for m in MODES}
        cpu: dict[str, list[float]] = {m: [] for m in MODES}
        for r in range(repeat):
            for mode in MODES:
                rate, us, all_us = run(mode, model, ids, n, s, r + 1).figures()
                rates[mode].append(rate)
                host[mode].append(us)
                cpu[mode].append(all_us)
        base = statistics.median(rates["mlx_lm"])
        for mode in MODES:
            rate = statistics.median(rates[mode])
            print(f"  {name:8s} {mode:8s} {rate:8.1f} tok/s  {rate / base:5.2f}x mlx_lm   host "
                  f"{statistics.median(host[mode]):6.0f} µs/step, all threads {statistics.median(cpu[mode]):6.0f}")


def profile(model: object, ids: list[int], n: int) -> None:
    s = SETTINGS["sampling"]
    run_ours(model, ids, 16, s, True, 0)
    prof = cProfile.Profile()
    prof.enable()
    run_ours(model, ids, n, s, True, 1)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, help="tokens per run (default: 200 on the tiny model, 40 on the 60M)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--models", default="tiny,60m")
    ap.add_argument("--profile", choices=sorted(SHAPES), help="cProfile our traced run on this model instead")
    args = ap.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    names = [args.profile] if args.profile else args.models.split(",")
    with tempfile.TemporaryDirectory(prefix="logitlab-mlx-step-") as tmp:
        for name in names:
            path = random_qwen2(Path(tmp) / name, name)
            model = get_backend("mlx").load(path, LoadOptions())
            ids = model.tokenizer.encode(PROMPT)
            tokens = args.tokens or TOKENS[name]
            if args.profile:
                profile(model, ids, tokens)
                continue
            print(f"{name}: {model.info.parameters / 1e6:.1f}M parameters, vocabulary {model.info.vocab_size}, "
                  f"{tokens} tokens, median of {args.repeat}")
            bench(model, ids, tokens, args.repeat)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
