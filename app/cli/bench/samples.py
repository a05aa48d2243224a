"""`logitlab bench`'s line "16 samples x 128 tokens vs 1 sample": the time of N samples of one prompt in one
batch (one prefill, batched decode, every step recorded) against the time of one sample, interleaved run by run,
medians after a warm-up. Also runnable alone: `python -m app.cli.bench.samples [torch|mlx] [N] [TOKENS] [REPEAT]`
on the built-in model.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from typing import Any

from app.core.decoding.generation import generate
from app.core.events import Finished, Request
from app.core.settings import SamplerSettings

SETTINGS = SamplerSettings(temperature=0.8, top_p=0.95)


def timed(model: Any, ids: tuple[int, ...], n: int, tokens: int, seed: int) -> float:
    """Seconds for one request of `n` samples of `tokens` tokens each (prefill included), the trace recorded."""
    req = Request(prompt_ids=ids, settings=SETTINGS.with_(max_tokens=tokens, seed=seed), ignore_eos=True, n=n)
    t = time.perf_counter()
    fins = [e for e in generate(model, req, threading.Event()) if isinstance(e, Finished)]
    seconds = time.perf_counter() - t
    assert all(f.metrics.generated_tokens == tokens for f in fins), "a sample ended early"
    return seconds


def samples_vs_one(model: Any, ids: tuple[int, ...], n: int = 16, tokens: int = 128,
                   repeat: int = 3) -> dict[str, float]:
    """{"n", "tokens", "seconds_1", "seconds_n", "time_ratio"}: N samples' time over one sample's (medians)."""
    times: dict[int, list[float]] = {1: [], n: []}
    for r in range(repeat + 1):  # the first of each is a warm-up
        for k in times:
            s = timed(model, ids, k, tokens, r)
            if r:
                times[k].append(s)
    one, many = statistics.median(times[1]), statistics.median(times[n])
    return {"n": n, "tokens": tokens, "seconds_1": one, "seconds_n": many, "time_ratio": many / one}


def line(r: dict[str, float]) -> str:
    return (f"{r['n']} samples x {r['tokens']} tokens vs 1 sample: {r['seconds_n']:.2f} s vs {r['seconds_1']:.2f} s, "
            f"{r['time_ratio']:.2f}x the time ({r['n'] / r['time_ratio']:.1f}x the tokens/s)")


def main(argv: list[str]) -> int:
    from app.core.models.sources import BUILTIN_PATH
    from backends import get_backend
    from backends.base import LoadOptions

    backend = argv[0] if argv else "torch"
    n, tokens, repeat = (int(a) for a in (argv[1:] + ["16", "128", "3"][len(argv[1:]):])[:3])
    model = get_backend(backend, BUILTIN_PATH).load(BUILTIN_PATH, LoadOptions(dtype="float32"))
    ids = tuple(model.tokenizer.encode("import os\nimport sys\n\ndef main():\n    "))
    print(f"{backend}: {line(samples_vs_one(model, ids, n, tokens, repeat))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
