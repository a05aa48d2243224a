"""Compile time of the torch decode step (`--compile`) at a first start and at a second one, which finds torch's
compile caches that the first left in Logit Lab's cache folder (`backends.torch.static.compile_cache_dir`).

One random-weight Llama, then two fresh processes in turn, each loading it, prefilling 8 tokens and timing its
first decode step (the compile) and a later one. `--cache-dir` defaults to a new empty folder, so the first
start is a cold one.

    PYTHONPATH=. python benchmarks/compile_start.py [--random 0.1b] [--device cpu] [--dtype float32]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

CHILD = """
import json, sys, time
from pathlib import Path
from backends.torch.backend import TorchBackend
from backends.base import LoadOptions
from torch._dynamo.utils import counters
path, device, dtype = sys.argv[1:4]
t = time.perf_counter()
model = TorchBackend().load(Path(path), LoadOptions(device=device, dtype=dtype, compile_len=64))
loaded = time.perf_counter() - t
cache = model.new_cache()
model.forward([list(range(1, 9))], cache)
times = []
for token in range(4):
    t = time.perf_counter()
    out = model.forward([[token + 10]], cache)
    float(out[0, 0])  # waits for the device
    times.append(time.perf_counter() - t)
print(json.dumps({"load_s": loaded, "first_step_s": times[0], "later_step_ms": 1000 * min(times[1:]),
                  "inductor": {k: v for k, v in counters["inductor"].items() if "cache" in k}}))
"""


def main() -> None:
    from app.cli.bench.command import random_model
    from app.core.models.sources import resolve

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--random", default="0.1b")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--cache-dir", help="torch's compile caches (default: a new empty folder)")
    args = p.parse_args()
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="logitlab-compile-cache-")
    path = random_model(args.random, resolve("builtin"), args.dtype)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache_dir, "TRITON_CACHE_DIR": os.path.join(cache_dir, "triton")}
    try:
        for start in ("first", "second"):
            t = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", CHILD, str(path), args.device, args.dtype], env=env,
                                 capture_output=True, text=True, check=True).stdout.splitlines()[-1]
            r = json.loads(out)
            print(f"{start} start: process {time.perf_counter() - t:.1f} s, load {r['load_s']:.1f} s, first decode "
                  f"step (compiling) {r['first_step_s']:.1f} s, later steps {r['later_step_ms']:.1f} ms; "
                  f"caches {r['inductor']}", flush=True)
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if not args.cache_dir:
            shutil.rmtree(cache_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
