"""The `logitlab` command: the window by default, `generate` to stream a completion in the terminal.

Arguments map one-to-one onto the core's `Request`; generation goes through the same `ModelThread` the
window uses. Bad input exits non-zero with one line on stderr. Each command's module (and the window) is imported
when that command runs, so that `--help` and a bad flag answer at once; those modules import only
`app.arguments` from here down, never this module.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from app.arguments import (
    COMPILE_HELP,
    Parser,
    add_count,
    add_server_args,
    backend_of,
    check_base_url,
    fail,
    thread_count,
)
from app.core.events import Message, Request
from app.core.models import ModelSpec
from app.core.sampling import RECORD_K
from app.core.settings import FIELDS, MAX_SEED, SamplerSettings, SettingsError, StageOrder, read_escapes
from backends.base import LoadOptions

USAGE = """logitlab [options]             open the window
       logitlab generate [options]    stream a completion to standard output
       logitlab bench [options]       time generation against a baseline
       logitlab models [options]      list the models you have (built-in, HF cache, the window's model folders)"""
MAX_SAMPLES = 64  # --n, and so the requests at once that --concurrency may ask for
COMPILE_LEN = 1024  # the static cache's length: every compiled step attends over all of it (masked)


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="builtin", help="a local folder, a hub id (owner/name), or 'builtin' "
                   "(remote: the server's model name; 'builtin': the one it serves)")
    p.add_argument("--backend", choices=["auto", "mlx", "torch", "remote"], default="auto",
                   help="auto: MLX on Apple Silicon, else torch (torch for a .gguf); remote: an OpenAI-compatible "
                        "server (--base-url)")
    add_remote_args(p)
    p.add_argument("--device", choices=["cuda", "mps", "cpu"], help="torch device (default: best available)")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], help="default: float32 on a CPU; on a "
                   "GPU bfloat16 / float16 (torch) or the file's own (MLX)")
    p.add_argument("--quantize", type=int, choices=[4, 8], help="MLX: quantize the weights on load")
    p.add_argument("--trust-remote-code", action="store_true", help="allow code from the model's repository")
    p.add_argument("--allow-pickle", action="store_true", help="allow non-safetensors weights (weights_only)")
    p.add_argument("--compile", action="store_true", help=f"{COMPILE_HELP}. The cache holds {COMPILE_LEN:,} "
                   "positions: longer runs go on uncompiled")
    p.add_argument("--threads", type=thread_count, metavar="N", help="torch: CPU threads (default: 1 for a model "
                   "under 50M parameters, else torch's default; OMP_NUM_THREADS also sets it)")


def add_remote_args(p: argparse.ArgumentParser) -> None:
    add_server_args(p)
    add_count(p, "--concurrency", 1, MAX_SAMPLES, 4, "remote: at most this many requests at once (--n)")


def add_sampler_args(p: argparse.ArgumentParser) -> None:
    for f in FIELDS:
        flag = "--" + f.name.replace("_", "-")
        p.add_argument(flag, type=int if f.integer else float, default=f.default,
                       help=f"{f.help} [{f.lo:g}..{f.hi:g}, default {f.default:g}]")
    add_count(p, "--seed", 0, MAX_SEED, None, "random seed (default: a new one each run, reported)")
    p.add_argument("--stop", action="append", default=[], help=r"stop string (repeatable), not shown; \n is a "
                   r"newline, \t a tab, \r a carriage return, \\ a backslash (as in the window's box)")
    p.add_argument("--order", choices=[o.value for o in StageOrder], default=StageOrder.TEMPERATURE_FIRST.value,
                   help="temperature before the filters (transformers, vLLM) or after them (llama.cpp, mlx-lm)")
    add_count(p, "--top-n", 1, RECORD_K, 20, "candidates recorded per step")


def settings_from(args: argparse.Namespace) -> SamplerSettings:
    values = {f.name: getattr(args, f.name) for f in FIELDS}
    return SamplerSettings(**values, seed=args.seed, stop=tuple(read_escapes(s) for s in args.stop),
                           order=StageOrder(args.order))


def spec_from(args: argparse.Namespace) -> ModelSpec:
    opts = LoadOptions(device=args.device, dtype=args.dtype, quantize_bits=args.quantize,
                       trust_remote_code=args.trust_remote_code, allow_pickle=args.allow_pickle,
                       compile_len=COMPILE_LEN if args.compile else None, threads=args.threads)
    return ModelSpec(source=args.model, backend=backend_of(args), options=opts, base_url=args.base_url or "",
                     api_key_env=args.api_key_env, concurrency=args.concurrency)


def generate_parser() -> argparse.ArgumentParser:
    p = Parser(prog="logitlab generate", description="Stream a completion to stdout.")
    add_model_args(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="the prompt (default: --prompt-file, else standard input)")
    src.add_argument("--prompt-file", help="read the prompt from this file")
    p.add_argument("--chat", action="store_true", help="send the prompt as a user message (chat template)")
    p.add_argument("--system", help="system message in chat mode")
    add_sampler_args(p)
    add_count(p, "--n", 1, MAX_SAMPLES, 1, "samples of the prompt, decoded together in one batch from one prefill "
              "(remote: concurrent requests); sample i draws with seed + i and prints in that order")
    p.add_argument("--trace", help="save the run's trace to this file (JSON Lines; `logitlab --open FILE` shows it); "
                   "with --n, one file per sample: NAME.0.jsonl, NAME.1.jsonl, ...")
    p.add_argument("--json", action="store_true", help="write JSON Lines to stdout instead of text")
    return p


def window_parser() -> argparse.ArgumentParser:
    p = Parser(prog="logitlab", usage=USAGE, description="Logit Lab: watch a language model choose each token. "
               "With no command, the window opens; see logitlab COMMAND -h.")
    add_model_args(p)
    p.add_argument("--prompt", help="start with this prompt")
    p.add_argument("--screenshot", help="run one generation, save a screenshot of the window here, and exit")
    p.add_argument("--open", metavar="FILE", help="show a saved session or run (a --trace file); no model is loaded "
                   "until you generate")
    add_sampler_args(p)
    return p


def read_prompt(args: argparse.Namespace) -> str:
    if args.prompt is not None:
        return args.prompt
    if args.prompt_file:
        try:
            with open(args.prompt_file, "rb") as f:
                return utf8(f.read(), args.prompt_file)
        except OSError as e:
            raise SettingsError(f"cannot read the prompt file: {e.strerror}: {args.prompt_file}") from e
    if sys.stdin is None or sys.stdin.isatty():
        raise SettingsError("no prompt: pass --prompt, --prompt-file, or pipe text on standard input")
    return utf8(sys.stdin.buffer.read(), "standard input")


def utf8(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SettingsError(f"{where} is not UTF-8 text (byte {e.start}: {data[e.start:e.start + 1]!r}); "
                            "save it as UTF-8") from e


def check_trace_path(trace: str | None, prompt_file: str | None) -> None:
    """Refuse a trace path that cannot be written, or that names the prompt file (it would be replaced)."""
    if not trace:
        return
    path = Path(trace)
    if not path.parent.resolve().is_dir():
        raise SettingsError(f"cannot write the trace: no folder {path.parent}")
    if prompt_file and path.exists() and Path(prompt_file).exists() and path.samefile(prompt_file):
        raise SettingsError(f"--trace names the prompt file {prompt_file}: choose another file")


def run_generate(argv: Sequence[str]) -> int:
    from app.terminal import stream_to_terminal

    args = generate_parser().parse_args(argv)
    try:
        settings = settings_from(args)
        check_base_url(args.base_url)
        prompt = read_prompt(args)
        check_trace_path(args.trace, args.prompt_file)
    except SettingsError as e:
        return fail(str(e), 2)
    messages = None
    if args.chat:
        messages = ((Message("system", args.system),) if args.system else ()) + (Message("user", prompt),)
    request = Request(model=spec_from(args), prompt=prompt, messages=messages, settings=settings,
                      top_n=args.top_n, n=args.n)
    return stream_to_terminal(request, json_out=args.json, trace_path=args.trace)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "generate":
        return run_generate(argv[1:])
    if argv and argv[0] == "bench":
        from app.bench import main as bench_main

        return bench_main(argv[1:])
    if argv and argv[0] == "models":
        return run_models(argv[1:])
    args = window_parser().parse_args(argv)
    try:
        settings = settings_from(args)
        check_base_url(args.base_url)
    except SettingsError as e:
        return fail(str(e), 2)
    from app.ui.main import run_window

    return run_window(spec_from(args), settings, prompt=args.prompt, screenshot=args.screenshot, open_path=args.open)


def models_parser() -> Parser:
    """`logitlab models`: the local models (`app.core.catalog`), or a server's with --base-url."""
    from app.core.catalog import FOLDER_DEPTH

    p = Parser(prog="logitlab models", description="List the models you have: the built-in one, the Hugging Face "
               "cache (model folders and .gguf files), the folders given with --folder and the window's model "
               "folders; or, with --base-url, the models an OpenAI-compatible server serves (its /v1/models).")
    p.add_argument("--cache-dir", help="another cache folder (default: the standard HF cache)")
    p.add_argument("--folder", action="append", default=[], help="also list the model folders and .gguf files in "
                   f"this folder, up to {FOLDER_DEPTH} levels down (repeatable; e.g. ~/.lmstudio/models)")
    add_server_args(p)
    p.add_argument("--json", action="store_true", help="one JSON array of the entries (remote: the server's list)")
    return p


def run_models(argv: Sequence[str]) -> int:
    args = models_parser().parse_args(argv)
    if args.base_url is None:
        if args.api_key_env:
            return fail("--api-key-env is for a server: give its --base-url too", 2, "logitlab models")
        from app.core.catalog import main as local_models

        return local_models([*argv, *saved_folder_args(argv)])
    if args.cache_dir or args.folder:
        return fail("--cache-dir and --folder list local models, not a server's (--base-url)", 2, "logitlab models")
    try:
        check_base_url(args.base_url)
    except SettingsError as e:
        return fail(str(e), 2, "logitlab models")
    from app.remote_cli import models_main as remote_models

    return remote_models(args)


def saved_folder_args(argv: Sequence[str]) -> list[str]:
    """`--folder F` for each folder of models added in the window's picker (its preferences) that still exists and
    is not given already: `logitlab models` lists what the picker lists."""
    from app.ui.preferences import Preferences

    given = {str(Path(a).expanduser().resolve()) for a in argv}
    return [a for f in Preferences().get("model_folders")
            if Path(f).is_dir() and str(Path(f).resolve()) not in given for a in ("--folder", f)]
