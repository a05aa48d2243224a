"""What looking inside the model costs, against a plain run of the same model measured in the same process.

Per model (the built-in one and a random-weight Qwen2 of Qwen2.5-0.5B's shape made on the fly): a greedy recorded run
(64 tokens after a 32-token prompt) plain and with the live lens on (8 candidates a step), interleaved run by run, the
median decode time per token of each and their ratio (aim: at most 1.2×; also the ratio of the fastest runs, steadier
on a machine busy with other work); then the full lens and attention on click
at a step near the end of that run, warm (the run's cache kept, as in the window after a run: one position computed)
and cold (a fresh cache: the whole context prefilled first), each the median of a few clicks (aim: under a second).

    PYTHONPATH=. python benchmarks/inside.py [--models builtin,qwen0.5b] [--backend torch] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from app.core.decoding.generation import Prefix, generate
from app.core.decoding.inside import LIVE_K, InsideRequest, look, watching
from app.core.events import Finished, Request
from app.core.models.sources import resolve
from app.core.settings import SamplerSettings
from backends import get_backend
from backends.base import LoadOptions

QWEN_05B = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
            "num_key_value_heads": 2, "vocab_size": 151936}


def random_qwen2(shape: dict, tokenizer_from: Path) -> Path:
    """A Qwen2 of `shape` (tied embeddings, q/k/v biases) with seeded random float32 weights and the built-in
    tokenizer, saved to a temporary folder."""
    from safetensors.numpy import save_file
    from transformers import Qwen2Config

    out = Path(tempfile.mkdtemp(prefix="logitlab-inside-qwen2-"))
    h, n, kv = shape["hidden_size"], shape["num_attention_heads"], shape["num_key_value_heads"]
    d = h // n
    config = Qwen2Config(**shape, tie_word_embeddings=True, max_position_embeddings=4096, rope_theta=1e6,
                         architectures=["Qwen2ForCausalLM"], torch_dtype="float32")
    rng = np.random.default_rng(0)
    w = {"model.embed_tokens.weight": (shape["vocab_size"], h), "model.norm.weight": (h,)}
    for i in range(shape["num_hidden_layers"]):
        at, mlp = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        w.update({at + "q_proj.weight": (h, h), at + "k_proj.weight": (kv * d, h), at + "v_proj.weight": (kv * d, h),
                  at + "q_proj.bias": (h,), at + "k_proj.bias": (kv * d,), at + "v_proj.bias": (kv * d,),
                  at + "o_proj.weight": (h, h), mlp + "gate_proj.weight": (shape["intermediate_size"], h),
                  mlp + "up_proj.weight": (shape["intermediate_size"], h),
                  mlp + "down_proj.weight": (h, shape["intermediate_size"]),
                  f"model.layers.{i}.input_layernorm.weight": (h,),
                  f"model.layers.{i}.post_attention_layernorm.weight": (h,)})
    tensors = {k: (np.ones(s, np.float32) if k.endswith("norm.weight") else
                   (rng.standard_normal(s, np.float32) * 0.02)) for k, s in w.items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out)
    cfg = json.loads((out / "config.json").read_text())
    cfg["rope_theta"] = 1e6  # (mlx-lm reads this name)
    (out / "config.json").write_text(json.dumps(cfg))
    for f in tokenizer_from.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, out / f.name)
    return out


def per_token_ms(model: object, request: Request, prefix: Prefix) -> float:
    with watching(model, request.lens):
        fin = [e for e in generate(model, request, threading.Event(), prefix) if isinstance(e, Finished)][-1]
    return 1000 / fin.metrics.decode_tokens_per_s


def lens_work_ms(model: object, prompt: tuple[int, ...], repeat: int) -> float:
    """The median time of what the live lens adds to a step, alone (its reads queued and read back): steadier than
    the difference of two whole runs on a busy machine."""
    from app.core.decoding.loop import _lensed, _start_lens
    from app.core.sampler.sampling import sample

    with watching(model, LIVE_K):
        logits = model.forward([list(prompt)], model.new_cache())
        drawn = sample(model.ops, logits[0], SamplerSettings(temperature=0), 0.5)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            _lensed(model.ops, _start_lens(model, logits, LIVE_K), [drawn])
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def click_s(model: object, request: InsideRequest, kind: str, prefix: Prefix | None, repeat: int) -> float:
    """The median seconds of a click: `prefix` warm (holding the run), or None: a fresh cache each time."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        list(look(model, request, kind, threading.Event(), prefix if prefix is not None else Prefix()))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(name: str, path: Path, backend: str, repeat: int, tokens: int) -> None:
    options = LoadOptions(device="cpu" if backend == "torch" else None, dtype="float32")
    model = get_backend(backend, path).load(path, options)
    info = model.info
    prompt = tuple(int(i) for i in np.random.default_rng(1).integers(1, min(info.vocab_size, 4000), 32))
    base = Request(prompt_ids=prompt, settings=SamplerSettings(temperature=0, max_tokens=tokens, seed=1),
                   ignore_eos=True, top_n=20)
    prefix = Prefix()
    per_token_ms(model, base, prefix)  # warm-up
    plain, live = [], []
    for _ in range(repeat):  # interleaved: both see the same machine load
        plain.append(per_token_ms(model, base, Prefix()))
        live.append(per_token_ms(model, Request(prompt_ids=prompt, settings=base.settings, ignore_eos=True,
                                                top_n=20, lens=LIVE_K), Prefix()))
    fin = [e for e in generate(model, base, threading.Event(), prefix) if isinstance(e, Finished)][-1]
    ask = InsideRequest(prompt_ids=prompt, tokens=tuple(fin.trace.token_ids), step=tokens - 2)
    p, lv = statistics.median(plain), statistics.median(live)
    alone = lens_work_ms(model, prompt, repeat * 10)
    print(f"{name} ({info.parameters / 1e6:.0f}M, {info.layers} layers, {backend}, threads {info.threads}): "
          f"plain {p:.2f} ms/token, live lens {lv:.2f} ms/token: {lv / p:.3f}× plain (medians; fastest runs: "
          f"{min(live) / min(plain):.3f}×); the lens's own work {alone:.3f} ms a step: {1 + alone / p:.3f}× plain")
    for kind in ("lens", "attention"):
        warm = click_s(model, ask, kind, prefix, repeat)
        cold = click_s(model, ask, kind, None, max(1, repeat // 2))
        print(f"  {kind} on click at step {ask.step} ({len(ask.context)} tokens of context): warm {warm:.3f} s "
              f"({warm * 1000 / p:.1f} plain steps), cold {cold:.3f} s")
    model.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="builtin,qwen0.5b")
    p.add_argument("--backend", default="torch")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--tokens", type=int, default=64)
    args = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for name in args.models.split(","):
        path = resolve("builtin") if name == "builtin" else random_qwen2(QWEN_05B, resolve("builtin"))
        try:
            bench(name, path, args.backend, args.repeat, args.tokens)
        finally:
            if name != "builtin":
                shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
