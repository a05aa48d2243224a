"""`logitlab bench`: Logit Lab's generation loop against the baseline a user would otherwise run, side by side.

Modes, interleaved run by run on the same loaded model and prompt: (1) our loop with the full per-step trace,
(2) our loop with trace capture off, (3) the baseline (`model.generate` on torch, `mlx_lm.stream_generate` on
MLX), and on CUDA (4) `model.generate` with transformers' static cache, which it compiles. Greedy and one
sampling setting; medians over repeats after one warm-up run of each. Prints prefill and decode tokens/s, TTFT,
the ratios (1)/(3) and (2)/(3), and the trace's memory per generated token. With --compile on CUDA it counts
inductor's CUDA-graph skips, and fails (exit 3) if our compiled step was not captured. Loading is said on stderr,
in the model thread's words.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

from app.cli.arguments import (
    COMPILE_HELP,
    DEBUG_ENV,
    Parser,
    add_count,
    add_server_args,
    backend_of,
    check_base_url,
    emit,
    fail,
    nonempty,
    thread_count,
    to_json,
)
from app.cli.bench.remote import bench_main as bench_remote
from app.cli.bench.samples import line as samples_line
from app.cli.bench.samples import samples_vs_one
from app.cli.bench.speculative import line as speculative_line
from app.cli.bench.speculative import speculative_vs_plain
from app.cli.bench.table import OURS, graph_report, print_table
from app.core.decoding.generation import Prefix, generate
from app.core.events import Compiling, Finished, Request
from app.core.metrics import Metrics
from app.core.models.sources import model_label, resolve
from app.core.settings import FIELD_BY_NAME, SamplerSettings, SettingsError
from backends import ModelLoadError, get_backend
from backends.base import CompileNote, LoadOptions, watch_compiles
from backends.baselines import (
    BASELINE_NAMES,
    baseline,
    plain_model,
    read_bandwidth,
    save_random_llama,
    watch_graph_skips,
    weight_bytes_read,
)

SETTINGS = {"greedy": SamplerSettings(temperature=0.0), "sampling": SamplerSettings(temperature=0.8, top_p=0.95)}
MODES = ("trace", "no-trace", "baseline", "baseline-static")
RANDOM_CONFIGS = {  # Llama shapes for "the model's own work dominates" runs, random weights made on the fly
    "0.1b": {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 12,
             "num_key_value_heads": 4},
    "0.3b": {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 20, "num_attention_heads": 16,
             "num_key_value_heads": 8},
    "1b": {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
           "num_key_value_heads": 4},
    "7b": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 32},  # Llama-2-7B's shape
}


PROG = "logitlab bench"
CHUNK_CHARS = 1000  # the prompt's text is encoded this much at a time: less than any model's context in tokens


def make_prompt(tokenizer: Any, n: int) -> tuple[int, ...]:
    """`n` token ids of any long, freely shipped text: the stdlib's own source, encoded a piece at a time (the
    whole file at once is longer than the model's context, and transformers warns about that)."""
    text = Path(threading.__file__).read_text()
    ids: list[int] = []
    while len(ids) < n:
        for start in range(0, len(text), CHUNK_CHARS):
            ids += tokenizer.encode(text[start : start + CHUNK_CHARS])
            if len(ids) >= n:
                break
    return tuple(ids[:n])


def random_model(size: str, tokenizer_from: Path, dtype: str) -> Path:
    """Save a random-weight Llama of `size` with the built-in tokenizer (vocabulary padded to 32k)."""
    out = Path(tempfile.mkdtemp(prefix=f"logitlab-bench-{size}-"))
    return save_random_llama(out, RANDOM_CONFIGS[size], tokenizer_from, dtype)


def run_ours(model: Any, ids: tuple[int, ...], n: int, s: SamplerSettings, record: bool, seed: int) -> dict:
    req = Request(prompt_ids=ids, settings=s.with_(max_tokens=n, seed=seed), record=record, ignore_eos=True,
                  top_n=20)
    fin = [e for e in generate(model, req, threading.Event()) if isinstance(e, Finished)][-1]
    return _row(fin.metrics)


def _row(m: Metrics) -> dict[str, float | None]:
    return {"ttft_s": m.ttft_s, "prefill_tokens_per_s": m.prefill_tokens_per_s,
            "decode_tokens_per_s": m.decode_tokens_per_s, "tokens": m.generated_tokens}


def run_mode(mode: str, backend: str, model: Any, ids: tuple[int, ...], n: int, s: SamplerSettings,
             seed: int) -> dict:
    if mode.startswith("baseline"):  # the baseline's own generate, timed from outside: prefill is its TTFT
        r = baseline(backend, static=mode == "baseline-static")(model, ids, n, s.temperature, s.top_p, seed)
        return _row(Metrics(prompt_tokens=r["prompt_tokens"], generated_tokens=r["tokens"], ttft_s=r["ttft_s"],
                            prefill_s=r["ttft_s"], decode_s=r["decode_s"]))
    return run_ours(model, ids, n, s, mode == "trace", seed)


def trace_bytes_per_token(model: Any, ids: tuple[int, ...], n: int) -> float:
    tracemalloc.start()
    req = Request(prompt_ids=ids, settings=SamplerSettings(max_tokens=n, seed=0), ignore_eos=True)
    events = list(generate(model, req, threading.Event()))
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return size / max(1, events[-1].metrics.generated_tokens)


def prefix_reuse(model: Any, prompt_tokens: int = 1000, repeat: int = 2) -> dict[str, float]:
    """TTFT of a first run on a `prompt_tokens` prompt against a re-run of the same prompt, which keeps the
    first run's KV cache and prefills only the last token (medians)."""
    ids = make_prompt(model.tokenizer, min(prompt_tokens, (model.info.context_length or 4096) - 8))
    req = Request(prompt_ids=ids, settings=SamplerSettings(temperature=0, max_tokens=1, seed=0), ignore_eos=True)
    first, again = [], []
    for _ in range(repeat):
        prefix = Prefix()
        for out in (first, again):
            fin = [e for e in generate(model, req, threading.Event(), prefix) if isinstance(e, Finished)][-1]
            out.append(fin.metrics.ttft_s)
    return {"prompt_tokens": len(ids), "ttft_first_s": statistics.median(first),
            "ttft_rerun_s": statistics.median(again)}


def batched(model: Any, ids: tuple[int, ...], tokens: int, n: int = 8, repeat: int = 3) -> dict[str, float]:
    """Decode tokens/s summed over n samples of one prompt in one batch, against one sample (with the trace)."""
    rates: dict[int, list[float]] = {1: [], n: []}
    s = SETTINGS["sampling"]
    for r in range(repeat + 1):  # the first of each is a warm-up
        for k in rates:
            req = Request(prompt_ids=ids, settings=s.with_(max_tokens=tokens, seed=r), ignore_eos=True, n=k)
            fins = [e for e in generate(model, req, threading.Event()) if isinstance(e, Finished)]
            if r:
                rates[k].append(sum(f.metrics.decode_tokens_per_s for f in fins))
    return {"n": n, "tokens_per_s_1": statistics.median(rates[1]), "tokens_per_s_n": statistics.median(rates[n])}


class Phase:
    """What the bench is running now, for a `GraphSkips` watch to file a skip under (no watch: a no-op)."""

    def __init__(self, watch: Any = None) -> None:
        self.watch = watch

    def __call__(self, name: str) -> None:
        if self.watch is not None:
            self.watch.phase = name


NO_PHASE = Phase()


def bench(model: Any, plain: Any, backend: str, prompt_tokens: int, tokens: int, repeat: int,
          modes: tuple[str, ...] = MODES[:3], quick: bool = False, phase: Phase = NO_PHASE) -> dict:
    """`plain`: the model as the baseline loads it (see `plain_model`); `quick`: the decode modes only."""
    ids = make_prompt(model.tokenizer, prompt_tokens)
    compiled = getattr(getattr(model, "fast", None), "static_len", None) is not None
    first: dict[str, float] = {}  # seconds of each mode's first run: compiling, where it compiles
    out: dict[str, Any] = {"model": model.info.name, "backend": backend, "device": model.info.device,
                           "threads": model.info.threads,
                           "compiled": compiled,
                           "dtype": model.info.dtype, "parameters": model.info.parameters,
                           "prompt_tokens": prompt_tokens, "tokens": tokens, "repeat": repeat,
                           "baseline": BASELINE_NAMES[backend], "modes": list(modes), "settings": {},
                           "first_run_s": first}
    subject = {m: model if m in OURS else plain for m in modes}
    watch_compiles(model, say_compiling)  # it may take minutes: stderr says so as it starts, and how long it took
    for name, s in SETTINGS.items():
        for mode in modes:  # warm-up, not counted (the static baseline's at full length: it compiles for it)
            phase(mode)
            warm = first_run(mode, backend, subject[mode], ids, tokens if mode == "baseline-static" else
                             min(tokens, 16), s)
            first.setdefault(mode, warm)
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        for r in range(repeat):
            for mode in modes:
                phase(mode)
                runs[mode].append(run_mode(mode, backend, subject[mode], ids, tokens, s, r + 1))
        out["settings"][name] = medians(runs)
    if not quick:
        phase("extras")
        out["trace_bytes_per_token"] = trace_bytes_per_token(model, ids, tokens)
        out["prefix_reuse"] = prefix_reuse(model)
        out["batched"] = batched(model, ids, tokens, repeat=repeat)
        out["samples"] = samples_vs_one(model, ids, 16, tokens, repeat)  # "16 samples x 128 tokens vs 1 sample"
    out.update(roofline(model, backend, prompt_tokens + tokens // 2))
    for med in out["settings"].values():
        for m in modes:
            med[m]["fraction_of_roofline"] = out["floor_s_per_token"] * med[m]["decode_tokens_per_s"]
    return out


def say_compiling(note: CompileNote) -> None:
    """Our decode step compiling, or done, on stderr in the window's words."""
    print(Compiling(0, note.rows, note.seconds).message, file=sys.stderr, flush=True)


def first_run(mode: str, backend: str, model: Any, ids: tuple[int, ...], n: int, s: SamplerSettings) -> float:
    """A warm-up run and its seconds (where it compiles our step, `say_compiling` says so)."""
    t = time.perf_counter()
    run_mode(mode, backend, model, ids, n, s, 0)
    return time.perf_counter() - t


def medians(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Per mode, the median of each figure over its runs; ours with their ratios to the baselines run."""
    med = {m: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for m, rs in runs.items()}
    for m in OURS:
        for base, suffix in (("baseline", ""), ("baseline-static", "_static")):
            if m in med and base in med:
                for what in ("decode", "prefill"):
                    key = f"{what}_tokens_per_s"
                    med[m][f"ratio_{what}_vs_baseline{suffix}"] = _ratio(med[m][key], med[base][key])
    return med


def _ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None where either was not measured."""
    return a / b if a is not None and b else None


def roofline(model: Any, backend: str, context: int) -> dict[str, float]:
    """The memory-bandwidth floor of one decode step: weights + the KV cache at mid-run, over read bandwidth."""
    read = weight_bytes_read(backend, model) + model.info.kv_bytes_per_token * context
    bandwidth = read_bandwidth(backend, model.info.device)
    return {"bytes_read_per_token": read, "read_bandwidth_bytes_per_s": bandwidth,
            "floor_s_per_token": read / bandwidth}


def parser() -> Parser:
    p = Parser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--model", type=nonempty, default="builtin", help="a local folder, a hub id (owner/name) or "
                   "'builtin' (default)")
    p.add_argument("--random", choices=sorted(RANDOM_CONFIGS), help="bench a random-weight Llama of this size")
    p.add_argument("--backend", choices=["auto", "mlx", "torch", "remote"], default="auto",
                   help="auto: MLX on Apple Silicon, else torch (torch for a .gguf; default); remote: a server's "
                        "tokens/s at concurrency 1, 4, 16 (--base-url)")
    add_server_args(p)
    p.add_argument("--device", choices=["cuda", "mps", "cpu"], help="torch device (default: best available)")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], help="default: float32 on a CPU; on a "
                   "GPU bfloat16 / float16 (torch) or the file's own (MLX)")
    add_count(p, "--prompt-tokens", 1, None, 128, "tokens of the prompt prefilled (with --tokens, within the "
              "model's context)")
    add_count(p, "--tokens", 2, int(FIELD_BY_NAME["max_tokens"].hi), 128, "tokens generated per run (decode "
              "speed is timed between tokens: at least 2)")
    add_count(p, "--repeat", 1, None, 3, "timed runs per mode, after a warm-up; the median is reported")
    p.add_argument("--compile", action="store_true", help=COMPILE_HELP)
    p.add_argument("--modes", type=modes_of, default=None, metavar="M,M", help="the modes to run, of "
                   f"{', '.join(MODES)} (default: all; baseline-static on CUDA only: transformers compiles it there)")
    p.add_argument("--quick", action="store_true", help="the decode modes only: no trace memory, prefix reuse or "
                   "batched runs")
    p.add_argument("--threads", type=thread_count, metavar="N", help="torch: CPU threads (default: 1 for a model "
                   "under 50M parameters, else torch's default)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    return p


def modes_of(text: str) -> tuple[str, ...]:
    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(f"{', '.join(unknown) or 'none given'}; choose from {', '.join(MODES)}")
    return modes


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        check_base_url(args.base_url)
    except SettingsError as e:
        return fail(str(e), 2, PROG)
    if backend_of(args) == "remote":  # a server: its throughput as we drive it
        return bench_remote(args)
    try:
        backend, model, plain, path = load(args)
    except ModelLoadError as e:
        return fail(str(e), 1, PROG)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # an unexpected load error: one line; its traceback with LOGITLAB_DEBUG set
        if os.environ.get(DEBUG_ENV):
            raise
        return fail(f"loading {args.model} failed: {type(e).__name__}: {e} ({DEBUG_ENV}=1 prints the traceback)",
                    1, PROG)
    try:
        context = model.info.context_length
        if context and args.prompt_tokens + args.tokens > context:
            return fail(f"--prompt-tokens {args.prompt_tokens} + --tokens {args.tokens} do not fit the model's "
                        f"context of {context:,} tokens", 2, PROG)
        result = run_bench(args, backend, model, plain)
    except KeyboardInterrupt:
        return 130
    finally:
        if args.random:
            shutil.rmtree(path, ignore_errors=True)  # hundreds of MB of random weights
    if args.json:
        emit(to_json(result, indent=1))
    else:
        print_table(result)
        if "samples" in result:
            emit(samples_line(result["samples"]))
        if "speculative" in result:
            emit(speculative_line(result["speculative"]))
    return graphs_verdict(result)


def run_bench(args: Any, backend: str, model: Any, plain: Any) -> dict:
    """`bench` with the modes this device runs; on CUDA under a watch of inductor's CUDA-graph skips."""
    cuda = backend == "torch" and model.info.device.startswith("cuda")
    modes = args.modes or (MODES if cuda else MODES[:3])
    modes = tuple(m for m in modes if m != "baseline-static" or backend == "torch")
    with watch_graph_skips(cuda) as watch:
        result = bench(model, plain, backend, args.prompt_tokens, args.tokens, args.repeat, modes, args.quick,
                       Phase(watch))
    if watch is not None:
        result["cuda_graphs"] = graph_report(watch)
    if not args.quick and args.model == "builtin" and not args.random and backend != "llamacpp":  # (its draft)
        result["speculative"] = speculative_vs_plain(model, backend, args.tokens, args.repeat)
    return result


def graphs_verdict(result: dict) -> int:
    """3, said on stderr, when our compiled step ran on CUDA without its CUDA graph; else 0."""
    g = result.get("cuda_graphs")
    if not result["compiled"] or g is None or not (g["skips_ours"] or g["skips_unattributed"]):
        return 0
    print(f"{PROG}: CUDA graphs were SKIPPED for the compiled decode step ({g['skips_ours']} skips, "
          f"{g['skips_unattributed']} without a reason): {'; '.join(g['reasons']) or 'see torch log'}",
          file=sys.stderr)
    return 3


def load(args: Any) -> tuple[str, Any, Any, Path]:
    """The backend's name, the model as Logit Lab and as the baseline load it, and its folder (a random model's:
    removed after)."""
    print(f"Finding {model_label(args.model)}…", file=sys.stderr, flush=True)
    backend = get_backend(args.backend, args.model)  # auto: torch for a .gguf file
    path = resolve(args.model)
    print(f"Loading {model_label(args.model)} with {backend.name}…", file=sys.stderr, flush=True)
    if args.random:
        path = random_model(args.random, path, args.dtype or "float32")
    compile_len = args.prompt_tokens + args.tokens + 16 if args.compile else None
    try:
        model = backend.load(path, LoadOptions(device=args.device, dtype=args.dtype, compile_len=compile_len,
                                                  threads=args.threads))
        no_baseline = args.modes is not None and not any(m.startswith("baseline") for m in args.modes)
        return backend.name, model, model if no_baseline else plain_model(backend.name, path, model), path
    except BaseException:
        if args.random:
            shutil.rmtree(path, ignore_errors=True)
        raise
