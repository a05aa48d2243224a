"""Tokens/s through `logitlab serve` with the official `openai` client against `logitlab generate`'s path in-process
(a `ModelThread` job streamed, as the command runs it) on the same model and settings, at 1, 4 and 16 concurrent
clients; prints the ratios. Not a test. End of text is biased away so that every run has the same length.

    python benchmarks/serve.py [--model builtin] [--tokens 64] [--requests 16]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from openai import OpenAI

from app.core.events import Request
from app.core.models.sources import ModelSpec
from app.core.runs.jobs import Job, stream
from app.core.settings import SamplerSettings
from app.serve.host import Host
from app.serve.server import Server
from backends.base import LoadOptions

PROMPT = "import "


def in_process(host: Host, settings: SamplerSettings, requests: int) -> float:
    """Tokens/s of `requests` runs one after another on the model thread, read as `logitlab generate` reads them."""
    tokens, start = 0, time.perf_counter()
    for i in range(requests):
        job = host.thread.start(Job("plain", (Request(model=host.spec, prompt=PROMPT,
                                                      settings=settings.with_(seed=i)),)))
        tokens += sum(1 for e in stream(job) if type(e).__name__ == "Step")
    return tokens / (time.perf_counter() - start)


def served(url: str, settings: SamplerSettings, eos: int, requests: int, clients: int) -> float:
    client = OpenAI(base_url=url, api_key="none", max_retries=0)

    def one(i: int) -> int:
        r = client.completions.create(model="any", prompt=PROMPT, max_tokens=settings.max_tokens, seed=i,
                                      temperature=settings.temperature, logit_bias={str(eos): -100})
        return r.usage.completion_tokens

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        tokens = sum(pool.map(one, range(requests)))
    return tokens / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="builtin")
    p.add_argument("--backend", default="auto")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--requests", type=int, default=16)
    args = p.parse_args()
    host = Host(ModelSpec(source=args.model, backend=args.backend, options=LoadOptions()))
    host.load()
    eos = min(host.tokenizer.eos_ids)
    settings = SamplerSettings(temperature=1.0, max_tokens=args.tokens, logit_bias=((eos, -100.0),))
    server = Server(host).start()
    try:
        in_process(host, settings, 2)  # (warm-up)
        base = in_process(host, settings, args.requests)
        print(f"{host.name}: {args.requests} requests of {args.tokens} tokens")
        print(f"  generate, in-process: {base:8.1f} tokens/s")
        for clients in (1, 4, 16):
            rate = served(server.url, settings, eos, args.requests, clients)
            print(f"  serve, {clients:2d} client(s):   {rate:8.1f} tokens/s  ({rate / base:.2f}x)")
    finally:
        server.stop()
        host.close()


if __name__ == "__main__":
    main()
