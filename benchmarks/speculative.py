"""Speculative decoding against plain decoding of the same target, timed in the same request (a benchmark, not a
test): acceptance rate, tokens per target forward, the adaptive run's plain steps, tokens/s of each and their ratio,
in wall time and in the model thread's CPU time (on a machine others load, wall time moves with them).

    PYTHONPATH=. python benchmarks/speculative.py                # the built-in model with its shipped draft
    PYTHONPATH=. python benchmarks/speculative.py --random-pair  # also a random ~0.1B target, ~10M draft
    PYTHONPATH=. python benchmarks/speculative.py --backend mlx --tokens 64 --record

Both sides pay the same path (`--compare-plain`'s): the speculative run's seconds after its prefill, without the time
its events wait for a reader, against plain `generate` of as many tokens read at once. The random pair's acceptance
is meaningless (random weights): it shows what a draft that never pays costs. Every draw is seeded; EOS is ignored
so that every run decodes --tokens tokens.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
from pathlib import Path

from app.core.events import Request, Speculated
from app.core.models.drafts import BUILTIN_DRAFT_PATH
from app.core.models.sources import BUILTIN_PATH
from app.core.runs.speculative_run import run_speculative
from app.core.settings import SamplerSettings
from backends import get_backend
from backends.base import LoadOptions
from tests.tiny import make_model

PROMPTS = ("import os\nimport sys\n\n\ndef main(", "class Stack:\n    def __init__(self):\n        self.",
           "    for i in range(len(items)):\n        if ", '"""Return the number of')
SETTINGS = {"greedy": SamplerSettings(temperature=0, seed=0),
            "sampled (T 0.8, top-k 40)": SamplerSettings(temperature=0.8, top_k=40, seed=0)}


def measure(target, draft, prompt: str, settings: SamplerSettings, k: int, tokens: int, record: bool) -> dict:
    request = Request(prompt=prompt, settings=settings.with_(max_tokens=tokens), draft_k=k, compare_plain=True,
                      record=record, ignore_eos=True)
    [s] = [e.summary for e in run_speculative(target, draft, request, threading.Event()) if isinstance(e, Speculated)]
    return {"accepted": s.stats.accepted, "drafted": s.stats.drafted, "tokens": s.stats.tokens,
            "forwards": s.stats.target_forwards, "plain_rounds": s.stats.plain_rounds, "spec_s": s.decode_s,
            "plain_s": s.plain_decode_s, "spec_cpu": s.decode_cpu_s, "plain_cpu": s.plain_decode_cpu_s,
            "plain_tokens": s.plain_tokens}


def table(name: str, target, draft, ks: list[int], tokens: int, prompts: tuple[str, ...], repeat: int,
          record: bool) -> None:
    """One row per (settings, k): totals over the prompts; the speeds' ratio per pass, median over the passes."""
    print(f"\n{name}: target {target.info.parameters / 1e6:.1f}M, draft {draft.info.parameters / 1e6:.2f}M, "
          f"{target.info.backend} on {target.info.device}, {tokens} tokens x {len(prompts)} prompts, "
          f"{'with' if record else 'without'} the trace, medians of {repeat} passes")
    print("| settings | k | acceptance | tokens / target forward | plain steps | speculative tok/s | plain tok/s "
          "| ratio | CPU ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    measure(target, draft, prompts[0], SamplerSettings(temperature=0), 2, 8, record)  # warm-up
    for label, settings in SETTINGS.items():
        passes: dict[int, list[dict]] = {k: [] for k in ks}
        for _ in range(repeat):  # (the k's alternate, pass by pass: a machine's load moves them alike)
            for k in ks:
                rows = [measure(target, draft, p, settings, k, tokens, record) for p in prompts]
                passes[k].append({key: sum(r[key] for r in rows) for key in rows[0]})
        for k, runs in passes.items():
            t = runs[0]  # (acceptance and rounds are seeded: the same every pass, up to the pace's timing)
            spec = [r["tokens"] / r["spec_s"] for r in runs]
            plain = [r["plain_tokens"] / r["plain_s"] for r in runs]
            wall = statistics.median(r["tokens"] / r["spec_s"] / (r["plain_tokens"] / r["plain_s"]) for r in runs)
            cpu = statistics.median(r["tokens"] / r["spec_cpu"] / (r["plain_tokens"] / r["plain_cpu"]) for r in runs)
            print(f"| {label} | {k or 'adaptive'} | {t['accepted'] / max(1, t['drafted']):.0%} | "
                  f"{t['tokens'] / t['forwards']:.2f} | {t['plain_rounds']} | {statistics.median(spec):.1f} | "
                  f"{statistics.median(plain):.1f} | {wall:.2f} | {cpu:.2f} |", flush=True)


def random_pair(folder: Path):
    target = make_model(folder / "target-0.1b", hidden=1024, layers=10, seed=0)
    draft = make_model(folder / "draft-10m", hidden=384, layers=6, seed=1)
    return target, draft


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="torch", choices=["torch", "mlx"])
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--k", default="2,4,0", help="draft lengths, comma-separated (0: adaptive)")
    ap.add_argument("--repeat", type=int, default=3, help="passes over the prompts; ratios are their medians")
    ap.add_argument("--record", action="store_true", help="record every step's trace (the window's path)")
    ap.add_argument("--random-pair", action="store_true")
    args = ap.parse_args()
    ks = [int(k) for k in args.k.split(",")]
    backend = get_backend(args.backend)
    opts = LoadOptions(device="cpu", dtype="float32") if args.backend == "torch" else LoadOptions(dtype="float32")
    target, draft = backend.load(BUILTIN_PATH, opts), backend.load(BUILTIN_DRAFT_PATH, opts)
    table("built-in pair", target, draft, ks, args.tokens, PROMPTS, args.repeat, args.record)
    if args.random_pair:
        with tempfile.TemporaryDirectory() as tmp:
            t, d = random_pair(Path(tmp))
            table("random pair (acceptance meaningless)", backend.load(t, opts), backend.load(d, opts), ks,
                  args.tokens // 2, PROMPTS[:2], args.repeat, args.record)

if __name__ == "__main__":
    main()
