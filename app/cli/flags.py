"""The flags of a request, shared by the verbs that run one (`generate`, `sweep`, the window): the model and how
it loads (or the server it is on), the sampler settings (one flag per row of the settings' `FIELDS` table), and
`--stats`/`--match`; `settings_from` and `spec_from` read them into the core's `SamplerSettings` and `ModelSpec`.
A bad value is argparse's one line, naming the flag. It runs nothing.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from app.cli.arguments import COMPILE_HELP, add_count, add_server_args, backend_of, nonempty, thread_count
from app.core.control_vectors import parse_layers
from app.core.files import parse_json, typed
from app.core.models.sources import ModelSpec
from app.core.sampler.constraint import check
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
from app.core.stage_inputs import CONSTRAINT_PLACES, Constraint, Steering
from backends.base import LoadOptions

MAX_SAMPLES = 64  # --n, and so the requests at once that --concurrency may ask for
COMPILE_LEN = 1024  # the static cache's length: every compiled step attends over all of it (masked)


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=nonempty, default="builtin", help="a local folder, a hub id (owner/name), "
                   "'builtin', or 'builtin-thinking' (a tiny model that thinks before it answers: addition) "
                   "(remote: the server's model name; 'builtin': the one it serves)")
    p.add_argument("--backend", choices=["auto", "mlx", "torch", "llamacpp", "remote"], default="auto",
                   help="auto: MLX on Apple Silicon, else torch (a .gguf file: llamacpp where llama-cpp-python is "
                        "installed, else torch); remote: an OpenAI-compatible server (--base-url)")
    add_remote_args(p)
    p.add_argument("--device", choices=["cuda", "mps", "cpu"], help="torch device (default: best available); "
                   "llama.cpp: cpu keeps every layer on the CPU")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], help="default: float32 on a CPU; on a "
                   "GPU bfloat16 / float16 (torch) or the file's own (MLX)")
    p.add_argument("--quantize", type=int, choices=[4, 8], help="MLX: quantize the weights on load")
    p.add_argument("--trust-remote-code", action="store_true", help="allow code from the model's repository")
    p.add_argument("--allow-pickle", action="store_true", help="allow non-safetensors weights (weights_only)")
    p.add_argument("--compile", action="store_true", help=f"{COMPILE_HELP}. The cache holds {COMPILE_LEN:,} "
                   "positions: longer runs go on uncompiled")
    p.add_argument("--threads", type=thread_count, metavar="N", help="torch and llama.cpp: CPU threads (default: 1 "
                   "for a model under 50M parameters, else the framework's default; OMP_NUM_THREADS also sets it)")


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
    p.add_argument("--think-soft", action="store_true", help="with --think-budget: raise the closing marker's logit "
                   "as the budget nears (a stage) rather than forcing it at the budget")
    p.add_argument("--no-think", action="store_true", help="a thinking model answers without thinking: its chat "
                   "template is told enable_thinking=false (Qwen3's switch), and a think span it opens anyway is "
                   "closed at once")
    p.add_argument("--think-markers", nargs=2, metavar=("OPEN", "CLOSE"), type=nonempty, default=(),
                   help="a thinking model's reasoning markers, where its tokenizer's are not found (default: <think> "
                        "and </think>, or gpt-oss's channels, when the tokenizer has them)")
    p.add_argument("--steer", type=steer_value, metavar="FILE:LAYERS:STRENGTH",
                   help="add a steering vector (llama.cpp's control-vector GGUF, as `logitlab steer make` writes) to "
                        "the residual stream after LAYERS (3,4 or 2-5; empty: every layer the file has) times "
                        "STRENGTH; each step then records the KL from the unsteered model and the tokens it moved")
    add_constraint_args(p)
    add_count(p, "--top-n", 1, RECORD_K, 20, "candidates recorded per step")


def add_constraint_args(p: argparse.ArgumentParser) -> None:
    """The constraint flags (at most one of them): what the output must match, checked as it is read."""
    one = p.add_mutually_exclusive_group()
    one.add_argument("--json-schema", dest="constraint", type=constraint_value("json_schema"), metavar="FILE",
                     help="the output is JSON valid under this JSON schema (a file)")
    one.add_argument("--regex", dest="constraint", type=constraint_value("regex"), metavar="RE",
                     help="the whole output matches this regular expression (Rust regex syntax)")
    one.add_argument("--grammar", dest="constraint", type=constraint_value("grammar"), metavar="FILE",
                     help="the output follows this grammar: a Lark file, or llama.cpp's GBNF (.gbnf, or ::= rules)")
    one.add_argument("--choices", dest="constraint", type=constraint_value("choices"), metavar="A,B,C",
                     help="the output is one of these texts")
    p.add_argument("--constraint-place", choices=CONSTRAINT_PLACES, default="first",
                   help="first: the grammar cuts before every other stage; on_reject: llama.cpp's way, the chain runs "
                        "unconstrained and only a drawn token the grammar refuses is drawn again with it first")


def constraint_value(kind: str) -> Callable[[str], Constraint]:
    """A constraint flag's value as a constraint (placed first: `settings_from` places it), compiled to check it."""
    def parse(text: str) -> Constraint:
        try:
            c = _constraint(kind, text)
            check(c)
        except (ValueError, OSError) as e:  # (ConstraintError names the position)
            raise argparse.ArgumentTypeError(str(e)) from None
        return c

    return parse


def _constraint(kind: str, text: str) -> Constraint:
    if kind == "regex":
        return Constraint("regex", text)
    if kind == "choices":
        return Constraint("choices", "\n".join(c.strip() for c in text.split(",") if c.strip()))
    try:
        content = Path(text).read_text(encoding="utf-8")
    except OSError as e:
        raise OSError(f"cannot read {text}: {e.strerror or e}") from None
    if kind == "grammar":
        gbnf = text.endswith(".gbnf") or (not text.endswith(".lark") and "::=" in content)
        return Constraint("gbnf" if gbnf else "lark", content)
    return Constraint(kind, content)


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
                           dry_breakers=args.dry_breakers, think_soft=args.think_soft,
                           think_markers=tuple(args.think_markers), steering=getattr(args, "steer", None),
                           think=not getattr(args, "no_think", False),
                           constraint=args.constraint and replace(args.constraint, place=args.constraint_place))


def steer_value(text: str) -> Steering:
    """--steer FILE:LAYERS:STRENGTH (the file's name may hold colons: the last two fields are split off)."""
    path, layers, strength = ([""] * 3 + text.rsplit(":", 2))[-3:]
    try:
        value = float(strength)
        if not math.isfinite(value):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FILE:LAYERS:STRENGTH with a number for STRENGTH, got "
                                         f"{typed(text)}") from None
    if not path:
        raise argparse.ArgumentTypeError(f"expected FILE:LAYERS:STRENGTH, got {typed(text)}")
    try:
        return Steering(path, parse_layers(layers) if layers.strip() else (), value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


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


def add_stats_args(p: argparse.ArgumentParser) -> None:
    """--stats (generate) and --match: the samples' statistics (`app.core.compare.statistics`), as JSON Lines."""
    p.add_argument("--stats", action="store_true", help="JSON Lines: a line per sample (length, mean log-probability, "
                   "perplexity, text), then the set's statistics (distinct-1/2, unique completions, agreement...)")
    p.add_argument("--match", metavar="REGEX", help="with --stats or sweep: also the share of samples whose text "
                   "this regular expression matches (re.search)")
