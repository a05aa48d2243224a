"""The `logitlab` command: the window by default, `generate` to stream a completion in the terminal.

Arguments map one-to-one onto the core's `Request`; generation goes through the same `ModelThread` the
window uses. Bad input exits non-zero with one line on stderr. Each command's module (and the window) is imported
when that command runs, so that `--help` and a bad flag answer at once; those modules import only
`app.cli.arguments` from here down, never this module.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from app.cli.arguments import (
    COMPILE_HELP,
    OutputError,
    Parser,
    add_count,
    add_server_args,
    backend_of,
    check_base_url,
    emit,
    fail,
    nonempty,
    output_failed,
    read_prompt,
    text_arg,
    thread_count,
)
from app.cli.beam import add_beam_args, run_beams
from app.cli.screenshot_args import DEFAULT_SIZE, add_screenshot_args
from app.cli.speculative import add_draft_args, run_draft
from app.core.compare.prompt_sets import read_prompt_set
from app.core.compare.statistics import Axis, compile_pattern, make_grid, parse_axis
from app.core.events import Message, Request
from app.core.files import parse_json, typed
from app.core.models.sources import ModelSpec
from app.core.sampler.logit_bias import BiasEntry, parse_entry
from app.core.sampler.sampling import RECORD_K
from app.core.settings import (
    DRY_BREAKERS,
    ENGINE_CHAINS,
    FIELDS,
    MAX_BIAS,
    MAX_SEED,
    STAGES,
    Field,
    SamplerSettings,
    SettingsError,
    StageOrder,
    parse_order,
    read_escapes,
)
from backends.base import LoadOptions

USAGE = """logitlab [options]             open the window
       logitlab generate [options]    stream a completion to standard output
       logitlab sweep [options]       N samples under each cell of a grid of settings, with statistics
       logitlab bench [options]       time generation against a baseline
       logitlab models [options]      list the models you have (built-in, HF cache, the window's model folders)
       logitlab diff [options]        compare two variants of a model token by token (KL, top-1 agreement)"""
COMMANDS = (["generate"], ["sweep"], ["bench"], ["models"], ["diff"])  # each as argv begins with it
MAX_SAMPLES = 64  # --n, and so the requests at once that --concurrency may ask for
COMPILE_LEN = 1024  # the static cache's length: every compiled step attends over all of it (masked)


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=nonempty, default="builtin", help="a local folder, a hub id (owner/name), or "
                   "'builtin' (remote: the server's model name; 'builtin': the one it serves)")
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
        p.add_argument(flag_of(f), type=field_value(f), default=f.default,
                       help=f"{f.help} [{f.span}, default {f.default:g}]")
    add_count(p, "--seed", 0, MAX_SEED, None, "random seed (default: a new one each run, reported)")
    p.add_argument("--stop", type=stop_text, action="append", default=[], help=r"stop string (repeatable), not "
                   r"shown; \n is a newline, \t a tab, \r a carriage return, \\ a backslash (as in the window's box)")
    p.add_argument("--order", type=stage_order, default=stage_order(StageOrder.TEMPERATURE_FIRST.value),
                   metavar="ORDER", help="the stages' order: temperature-first (default) or temperature-last, an "
                   f"engine's ({', '.join(ENGINE_CHAINS)}), or stage names with commas ({','.join(STAGES)}); the "
                   "stages it leaves out follow in the default order")
    p.add_argument("--logit-bias", type=bias_entry, action="append", default=[], metavar="TOKEN=VALUE",
                   help=f"add VALUE (±{MAX_BIAS:g}) to a token's logit: TOKEN is its id or its text, found in the "
                        "model's vocabulary once it is loaded (quote it to keep spaces: '\" the\"=-5'; \\n is a "
                        "newline); repeatable")
    p.add_argument("--dry-breakers", type=breaker_list, default=DRY_BREAKERS, metavar="JSON",
                   help="DRY's sequence breakers, a JSON list of strings: a token holding one ends a repeat "
                        '(default: ["\\n", ":", "\\"", "*"], as llama.cpp)')
    add_count(p, "--top-n", 1, RECORD_K, 20, "candidates recorded per step")


def flag_of(f: Field) -> str:
    """The flag of a setting of the `FIELDS` table: --top-k for top_k."""
    return "--" + f.name.replace("_", "-")


def field_value(f: Field) -> Callable[[str], float]:
    """An argparse type for a setting: its number, in the range the table gives it (argparse names the flag)."""

    def parse(text: str) -> float:
        value = (int if f.integer else float)(text)  # ValueError: argparse says "invalid int value: '1e9'"
        if why := f.refusal(value):
            raise argparse.ArgumentTypeError(why)
        return value

    parse.__name__ = "int" if f.integer else "float"
    return parse


def stop_text(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("a stop string cannot be empty")
    return text


def settings_from(args: argparse.Namespace, by_text: bool = False) -> SamplerSettings:
    """The settings the flags give; --logit-bias by id only, unless `by_text` (the caller finds each token in the
    loaded model's vocabulary: `app.core.sampler.logit_bias.resolve`)."""
    values = {f.name: getattr(args, f.name) for f in FIELDS}
    texts = [e.token for e in args.logit_bias if isinstance(e.token, str)]
    if texts and not by_text:
        raise SettingsError(f"--logit-bias by text ({typed(texts[0])}) is for a plain `logitlab generate` (not "
                            "--beams, --draft-model, --stats, sweep or the window): give the token's id")
    ids = tuple((e.token, e.value) for e in args.logit_bias if isinstance(e.token, int))
    return SamplerSettings(**values, seed=args.seed, stop=tuple(read_escapes(s) for s in args.stop),
                           order=args.order[0], chain=args.order[1], logit_bias=ids,
                           dry_breakers=args.dry_breakers)


def stage_order(text: str) -> tuple[StageOrder, tuple[str, ...]]:
    """--order's value, read by the settings' own `parse_order` (its message on a bad name)."""
    try:
        return parse_order(text)
    except SettingsError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def breaker_list(text: str) -> tuple[str, ...]:
    """--dry-breakers: a JSON list of non-empty strings (read by `parse_json`: JSON nested too deeply is refused)."""
    try:
        value = parse_json(text)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(b, str) and b for b in value):
        raise argparse.ArgumentTypeError('expected a JSON list of non-empty strings, e.g. ["\\n", ":"], got '
                                         f"{typed(text)}")
    return tuple(value)


def bias_entry(text: str) -> BiasEntry:
    """--logit-bias TOKEN=VALUE, read by `app.core.sampler.logit_bias.parse_entry` (its message when it cannot be)."""
    try:
        return parse_entry(text)
    except SettingsError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def spec_from(args: argparse.Namespace) -> ModelSpec:
    opts = LoadOptions(device=args.device, dtype=args.dtype, quantize_bits=args.quantize,
                       trust_remote_code=args.trust_remote_code, allow_pickle=args.allow_pickle,
                       compile_len=COMPILE_LEN if args.compile else None, threads=args.threads)
    return ModelSpec(source=args.model, backend=backend_of(args), options=opts, base_url=args.base_url or "",
                     api_key_env=args.api_key_env, concurrency=args.concurrency, deadline=args.deadline)


def generate_parser() -> argparse.ArgumentParser:
    p = Parser(prog="logitlab generate", description="Stream a completion to stdout.")
    add_model_args(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", type=text_arg, help="the prompt (default: --prompt-file, else standard input)")
    src.add_argument("--prompt-file", type=nonempty, help="read the prompt from this file")
    p.add_argument("--chat", action="store_true", help="send the prompt as a user message (chat template)")
    p.add_argument("--system", type=text_arg, help="system message in chat mode")
    add_sampler_args(p)
    add_count(p, "--n", 1, MAX_SAMPLES, 1, "samples of the prompt, decoded together in one batch from one prefill "
              "(remote: concurrent requests); sample i draws with seed + i and prints in that order")
    p.add_argument("--trace", type=nonempty, help="save the run's trace to this file (JSON Lines; `logitlab --open "
                   "FILE` shows it); with --n, one file per sample: NAME.0.jsonl, NAME.1.jsonl, ...")
    p.add_argument("--json", action="store_true", help="write JSON Lines to stdout instead of text")
    add_stats_args(p)
    add_beam_args(p)
    add_draft_args(p)
    return p


def add_stats_args(p: argparse.ArgumentParser) -> None:
    """--stats (generate) and --match: the samples' statistics (`app.core.compare.statistics`), as JSON Lines."""
    p.add_argument("--stats", action="store_true", help="JSON Lines: a line per sample (length, mean log-probability, "
                   "perplexity, text), then the set's statistics (distinct-1/2, unique completions, agreement...)")
    p.add_argument("--match", metavar="REGEX", help="with --stats or sweep: also the share of samples whose text "
                   "this regular expression matches (re.search)")


def sweep_parser() -> argparse.ArgumentParser:
    p = Parser(prog="logitlab sweep", description="N samples of a prompt under each cell of a grid of settings; "
               "a line of statistics per cell (JSON Lines, or CSV).")
    add_model_args(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", type=text_arg, help="the prompt (default: --prompt-file, else standard input)")
    src.add_argument("--prompt-file", type=nonempty, help="read the prompt from this file")
    src.add_argument("--prompt-set", type=nonempty, metavar="FILE", help="run every prompt of this file: CSV (a "
                     "'prompt' column, else the first) or JSON Lines (objects with a 'prompt' field, or strings)")
    add_sampler_args(p)
    p.add_argument("--grid", action="append", type=grid_axis, required=True, metavar="NAME=V1,V2,...",
                   help="a swept setting and its values (once or twice: rows, then columns), e.g. "
                        "--grid temperature=0.2,0.7,1.2 --grid top_p=0.8,0.95,1")
    add_count(p, "--n", 1, MAX_SAMPLES, 8, "samples per cell, decoded together in one batch")
    p.add_argument("--format", choices=["jsonl", "csv"], default="jsonl", help="a JSON line or a CSV row per cell")
    add_stats_args(p)
    return p


def grid_axis(text: str) -> Axis:
    try:
        return parse_axis(text)
    except SettingsError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def run_sweep(argv: Sequence[str]) -> int:
    from app.cli.compare import SweepPlan, sweep_to_terminal

    args = sweep_parser().parse_args(argv)
    try:
        settings = settings_from(args)
        if settings.seed is None:  # one seed for every cell, reported: the cells differ by their settings alone
            settings = settings.with_(seed=secrets.randbelow(MAX_SEED + 1))
        check_base_url(args.base_url)
        cells = tuple(make_grid(settings, args.grid))
        pattern = compile_pattern(args.match).pattern if args.match else None
        prompts = read_prompt_set(args.prompt_set) if args.prompt_set else (read_prompt(args),)
    except SettingsError as e:
        return fail(str(e), 2, "logitlab sweep")
    templates = tuple(Request(model=spec_from(args), prompt=text, settings=settings, top_n=args.top_n, n=args.n)
                      for text in prompts)
    plan = SweepPlan(templates, cells, tuple(a.name for a in args.grid), pattern, args.format == "csv")
    return sweep_to_terminal(plan)


def window_parser() -> argparse.ArgumentParser:
    p = Parser(prog="logitlab", usage=USAGE, description="Logit Lab: watch a language model choose each token. "
               "With no command, the window opens; see logitlab COMMAND -h.")
    add_model_args(p)
    p.add_argument("--prompt", type=text_arg, help="start with this prompt")
    add_screenshot_args(p)
    p.add_argument("--open", type=nonempty, metavar="FILE", help="show a saved session or run (a --trace file); no "
                   "model is loaded until you generate")
    add_sampler_args(p)
    return p


def check_trace_path(trace: str | None, prompt_file: str | None) -> None:
    """Refuse a trace path that cannot be written, or that names the prompt file (it would be replaced)."""
    if not trace:
        return
    path = Path(trace)
    if not path.parent.resolve().is_dir():
        raise SettingsError(f"cannot write the trace: no folder {path.parent}")
    if path.is_dir():
        raise SettingsError(f"--trace names a folder, {trace}: give a file's name")
    if prompt_file and path.exists() and Path(prompt_file).exists() and path.samefile(prompt_file):
        raise SettingsError(f"--trace names the prompt file {prompt_file}: choose another file")


def run_generate(argv: Sequence[str]) -> int:
    from app.cli.terminal import stream_to_terminal

    args = generate_parser().parse_args(argv)
    plain = not (args.beams or args.draft_model or args.stats or args.match)  # where a bias by text is found
    try:
        settings = settings_from(args, by_text=plain)
        check_base_url(args.base_url)
        prompt = read_prompt(args)
        check_trace_path(args.trace, args.prompt_file)
    except SettingsError as e:
        return fail(str(e), 2, "logitlab generate")
    messages = None
    if args.chat:
        messages = ((Message("system", args.system),) if args.system else ()) + (Message("user", prompt),)
    request = Request(model=spec_from(args), prompt=prompt, messages=messages, settings=settings,
                      top_n=args.top_n, n=args.n)
    if args.beams:
        return run_beams(args, request.model, prompt, messages)
    if args.draft_model:
        return run_draft(request, args)
    if args.stats or args.match:
        return run_stats(request, args)
    return stream_to_terminal(request, json_out=args.json, trace_path=args.trace, bias=args.logit_bias)


def run_stats(request: Request, args: argparse.Namespace) -> int:
    from app.cli.compare import stats_to_terminal

    if args.json:
        return fail("--stats writes its own JSON Lines: leave out --json", 2, "logitlab generate")
    try:
        pattern = compile_pattern(args.match).pattern if args.match else None
    except SettingsError as e:
        return fail(str(e), 2, "logitlab generate")
    return stats_to_terminal(request, pattern, args.trace)


def main(argv: Sequence[str] | None = None) -> int:
    """The command `argv` names; standard output that cannot be written (a full disk, a closed pipe), in any command
    and in --help, is one line and exit 1 (every command writes through `emit`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            return run_command(argv)
        finally:
            emit("", end="")  # what print() left in the buffer (argparse's --help): a failure is that line too
    except OutputError as e:
        return output_failed(e, " ".join(["logitlab", *argv[:1]]) if argv[:1] in COMMANDS else "logitlab")


def run_command(argv: list[str]) -> int:
    if argv and argv[0] == "generate":
        return run_generate(argv[1:])
    if argv and argv[0] == "sweep":
        return run_sweep(argv[1:])
    if argv and argv[0] == "bench":
        from app.cli.bench import main as bench_main

        return bench_main(argv[1:])
    if argv and argv[0] == "models":
        return run_models(argv[1:])
    if argv and argv[0] == "diff":
        from app.cli.diff import main as diff_main

        return diff_main(argv[1:])
    args = window_parser().parse_args(argv)
    try:
        settings = settings_from(args)
        check_base_url(args.base_url)
    except SettingsError as e:
        return fail(str(e), 2)
    from app.ui.main import run_window

    return run_window(spec_from(args), settings, prompt=args.prompt, screenshot=args.screenshot, open_path=args.open,
                      size=args.size or (DEFAULT_SIZE if args.screenshot else None))


def models_parser() -> Parser:
    """`logitlab models`: the local models (`app.core.models.catalog`), or a server's with --base-url."""
    from app.core.models.catalog import FOLDER_DEPTH

    p = Parser(prog="logitlab models", description="List the models you have: the built-in one, the Hugging Face "
               "cache (model folders and .gguf files), the folders given with --folder and the window's model "
               "folders; or, with --base-url, the models an OpenAI-compatible server serves (its /v1/models).")
    p.add_argument("--cache-dir", type=nonempty, help="another cache folder (default: the standard HF cache)")
    p.add_argument("--folder", type=nonempty, action="append", default=[], help="also list the model folders and "
                   f".gguf files in this folder, up to {FOLDER_DEPTH} levels down (repeatable; e.g. "
                   "~/.lmstudio/models)")
    add_server_args(p)
    p.add_argument("--json", action="store_true", help="one JSON array of the entries (remote: the server's list)")
    return p


def run_models(argv: Sequence[str]) -> int:
    args = models_parser().parse_args(argv)
    if args.base_url is None:
        if args.api_key_env or args.deadline is not None:
            flag = "--api-key-env" if args.api_key_env else "--deadline"
            return fail(f"{flag} is for a server: give its --base-url too", 2, "logitlab models")
        from app.core.models.catalog import main as local_models

        return local_models([*argv, *saved_folder_args(argv)], emit)
    if args.cache_dir or args.folder:
        return fail("--cache-dir and --folder list local models, not a server's (--base-url)", 2, "logitlab models")
    try:
        check_base_url(args.base_url)
    except SettingsError as e:
        return fail(str(e), 2, "logitlab models")
    from app.cli.remote import models_main as remote_models

    return remote_models(args)


def saved_folder_args(argv: Sequence[str]) -> list[str]:
    """`--folder F` for each folder of models added in the window's picker (its preferences) that still exists and
    is not given already: `logitlab models` lists what the picker lists."""
    from app.ui.files.preferences import Preferences

    given = {str(Path(a).expanduser().resolve()) for a in argv}
    return [a for f in Preferences().get("model_folders")
            if Path(f).is_dir() and str(Path(f).resolve()) not in given for a in ("--folder", f)]
