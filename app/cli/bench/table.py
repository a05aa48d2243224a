"""`logitlab bench`'s results as a person reads them: the table of modes, the roofline, the extras and the CUDA-graph
verdict (the JSON of `--json` is the same dict, printed whole)."""

from __future__ import annotations

from typing import Any

from app.cli.arguments import emit

LABELS = {"trace": "(1) trace", "no-trace": "(2) no trace", "baseline": "(3) baseline",
          "baseline-static": "(4) static"}
OURS = ("trace", "no-trace")


def print_table(r: dict) -> None:
    mode = " (static cache + torch.compile)" if r["compiled"] else ""
    n = r.get("threads")
    threads = f" ({n} thread{'s' * (n != 1)})" if n else ""
    emit(f"{r['model']} ({r['parameters'] / 1e6:.1f}M params) on {r['backend']}{mode} / {r['device']}{threads} / "
          f"{r['dtype']}, "
          f"prompt {r['prompt_tokens']} tokens, {r['tokens']} generated, median of {r['repeat']}; "
          f"baseline (3) = {r['baseline']}" + (", (4) = the same with its static cache, compiled"
                                                 if "baseline-static" in r["modes"] else ""))
    ratios = [k for k, m in (("", "baseline"), ("_static", "baseline-static")) if m in r["modes"]]
    emit(f"{'setting':9} {'mode':14} {'prefill tok/s':>13} {'decode tok/s':>12} {'TTFT ms':>8}"
          + "".join(f" {'decode ÷ (4)' if k else 'decode ÷ (3)':>12}" for k in ratios))
    for name, med in r["settings"].items():
        for m in r["modes"]:
            x = med[m]
            emit(f"{name:9} {LABELS[m]:14} {x['prefill_tokens_per_s']:13.0f} {x['decode_tokens_per_s']:12.1f} "
                  f"{x['ttft_s'] * 1000:8.1f}" + "".join(f" {_ratio_text(x, m, k):>12}" for k in ratios))
    emit("first run of each mode (compiling, where it compiles): "
          + ", ".join(f"{LABELS[m]} {t:.1f} s" for m, t in r["first_run_s"].items()))
    print_roofline(r)
    if "trace_bytes_per_token" in r:
        print_extras(r)
    if "cuda_graphs" in r:
        print_graphs(r["cuda_graphs"])


def _ratio_text(x: dict, mode: str, suffix: str) -> str:
    ratio = x.get(f"ratio_decode_vs_baseline{suffix}")
    return "" if mode not in OURS else "n/a" if ratio is None else f"{ratio:.3f}"


def print_extras(r: dict) -> None:
    emit(f"trace memory: {r['trace_bytes_per_token'] / 1024:.2f} KiB per generated token")
    pr = r["prefix_reuse"]
    emit(f"prefix reuse: TTFT on a {pr['prompt_tokens']}-token prompt {pr['ttft_first_s'] * 1000:.1f} ms, re-run of "
          f"the same prompt {pr['ttft_rerun_s'] * 1000:.1f} ms ({pr['ttft_first_s'] / pr['ttft_rerun_s']:.1f}x faster)")
    b = r["batched"]
    emit(f"batched: {b['n']} samples of one prompt decode {b['tokens_per_s_n']:.0f} tok/s in all, one sample "
          f"{b['tokens_per_s_1']:.0f} tok/s ({b['tokens_per_s_n'] / b['tokens_per_s_1']:.2f}x)")


def print_roofline(r: dict) -> None:
    reached = [f"{name} " + " ".join(f"{LABELS[m][:3]} {med[m]['fraction_of_roofline']:.0%}" for m in r["modes"])
               for name, med in r["settings"].items()]
    emit(f"roofline: {r['bytes_read_per_token'] / 1e6:.1f} MB read per token (weights + KV at mid-run) at "
          f"{r['read_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s ({r['backend']} summing 1 GiB on this device) = "
          f"{r['floor_s_per_token'] * 1000:.2f} ms per token at best; reached: " + ", ".join(reached))


def graph_report(watch: Any) -> dict[str, Any]:
    """The CUDA-graph skips a `GraphSkips` watch saw: ours (any phase but a baseline's), the static baseline's,
    those torch counted without a reason, and each distinct (phase, reason)."""
    ours = sum(watch.count(p) for p in {p for p, _ in watch.reasons} if not p.startswith("baseline"))
    return {"skips_ours": ours, "skips_baseline_static": watch.count("baseline-static"),
            "skips_unattributed": watch.unattributed, "reasons": sorted({f"{p}: {why}" for p, why in watch.reasons})}


def print_graphs(g: dict[str, Any]) -> None:
    ok = not g["skips_ours"] and not g["skips_unattributed"]
    emit(f"CUDA graphs: {'captured' if ok else 'SKIPPED'} in our compiled step ({g['skips_ours']} skips, "
          f"{g['skips_unattributed']} counted by torch without a reason); transformers' static generate: "
          f"{g['skips_baseline_static']} skips")
    for reason in g["reasons"]:
        emit(f"  {reason}")
