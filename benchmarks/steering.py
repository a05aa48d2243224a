"""What steering costs per decode step, as ratios to a plain run of the same model measured in the same process.

Three runs of the same greedy request (64 tokens after a 32-token prompt, recorded, in turn, each repeated and its
median decode time per token kept): plain (the baseline); the vector's add alone (the model steered for a plain
one-row run: what the residual hook costs in a step); and a steered run as `--steer` makes it (its unsteered twin
row in the same batched forward, and each step measured against it: KL, moved tokens, the twin's draw).

    PYTHONPATH=. python benchmarks/steering.py [--model builtin] [--backend torch] [--random 0.1b] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
from pathlib import Path

import numpy as np

from app.core.control_vectors import ControlVector, write_vector
from app.core.decoding.generation import generate
from app.core.decoding.steering.steered import plan_for
from app.core.events import Finished, Request
from app.core.models.sources import resolve
from app.core.settings import SamplerSettings
from app.core.stage_inputs import Steering
from backends import get_backend
from backends.base import LoadOptions


def per_token_ms(model, request: Request) -> float:
    fin = [e for e in generate(model, request, threading.Event()) if isinstance(e, Finished)][-1]
    return 1000 / fin.metrics.decode_tokens_per_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="builtin")
    p.add_argument("--random", help="a random-weight Llama of this size instead (0.1b, 0.5b: `logitlab bench`'s)")
    p.add_argument("--backend", default="torch")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--tokens", type=int, default=64)
    args = p.parse_args()
    if args.random:
        from app.cli.bench.command import random_model

        path = random_model(args.random, resolve("builtin"), "float32")
    else:
        path = resolve(args.model)
    model = get_backend(args.backend, path).load(path, LoadOptions(device="cpu" if args.backend == "torch" else None,
                                                                   dtype="float32"))
    info = model.info
    layer = info.layers // 2
    folder = tempfile.TemporaryDirectory(prefix="logitlab-steer-bench-")
    vector = Path(folder.name) / "v.gguf"
    direction = np.random.default_rng(0).normal(size=info.hidden_size).astype(np.float32)
    write_vector(vector, ControlVector({layer: direction}, info.name))
    base = SamplerSettings(temperature=0, max_tokens=args.tokens, seed=1)
    steered = base.with_(steering=Steering(str(vector), (layer,), 1.0))
    prompt = tuple(int(i) for i in np.random.default_rng(1).integers(1, info.vocab_size, 32))

    def request(s: SamplerSettings) -> Request:
        return Request(prompt_ids=prompt, settings=s, ignore_eos=True, record=True)

    add = plan_for(model, steered.steering).steer([1.0])
    runs: dict[str, list[float]] = {"plain": [], "the add alone": [], "steered, with its twin": []}
    per_token_ms(model, request(base))  # warm-up
    for _ in range(args.repeat):
        runs["plain"].append(per_token_ms(model, request(base)))
        model.steer(add)
        try:
            runs["the add alone"].append(per_token_ms(model, request(base)))
        finally:
            model.steer(None)
        runs["steered, with its twin"].append(per_token_ms(model, request(steered)))
    plain = statistics.median(runs["plain"])
    print(f"{info.name} ({info.backend}, {info.layers} layers, hidden {info.hidden_size}, vocabulary "
          f"{info.vocab_size:,}), steering layer {layer}: plain {plain:.2f} ms/token (the baseline)")
    for name, times in runs.items():
        ms = statistics.median(times)
        print(f"  {name:24s} {ms:6.2f} ms/token  {ms / plain:5.2f}x")
    folder.cleanup()


if __name__ == "__main__":
    main()
