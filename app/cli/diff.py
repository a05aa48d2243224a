"""`logitlab diff`: one text teacher-forced through two variants of a model, compared token by token.

B is --model-b (default: --model again) with A's load options but for --dtype-b / --quantize-b / --backend-b, so
`--dtype-b bfloat16` or `--quantize-b 4` compares a model with itself in another precision. Both are named as
every command names a model (`app.core.models.sources`: 'builtin', 'builtin-draft', a folder, a file, a hub id), and
both names are checked before either model loads. Writes JSON Lines to
stdout: one line per position (the token, KL(A‖B) in nats, each variant's log-probability of it and top-1 token,
whether they agree), then a `summary` line (mean and max KL, agreement, each variant's perplexity). Progress goes
to stderr; bad input exits 2 with one line. Runs on the same `ModelThread` as the window. Imports only
`app.cli.arguments` of the command line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, replace
from typing import Any

from app.cli.arguments import (
    Parser,
    emit,
    fail,
    nonempty,
    read_prompt,
    run_job,
    status_line,
    text_arg,
    thread_count,
    to_json,
)
from app.core.decoding.quant_diff import Diffed, DiffProgress, DiffRequest, QuantDiff
from app.core.events import Failed
from app.core.models.sources import ModelSpec, check_source
from app.core.settings import SettingsError
from backends.base import LoadOptions, ModelLoadError

PROG = "logitlab diff"
DTYPES = ["float32", "float16", "bfloat16"]


def parser() -> Parser:
    p = Parser(prog=PROG, description="Teacher-force one text through two variants of a model (float32 and "
               "bfloat16, float and 4-bit, a GGUF file and its float source) and compare them at every token: "
               "KL(A||B), top-1 agreement, each one's log-probability of the actual token (JSON Lines).")
    p.add_argument("--model", type=nonempty, default="builtin", help="variant A: a local folder, a .gguf file, a hub "
                   "id, 'builtin' or 'builtin-draft'")
    p.add_argument("--model-b", type=nonempty, help="variant B, named as --model (default: --model, in another "
                   "--dtype-b / --quantize-b)")
    p.add_argument("--backend", choices=["auto", "mlx", "torch", "llamacpp"], default="auto", help="A's backend "
                   "(auto: MLX on Apple Silicon, else torch; a .gguf file: llamacpp where installed, else torch)")
    p.add_argument("--backend-b", choices=["auto", "mlx", "torch", "llamacpp"], help="B's backend (default: mlx with "
                   "--quantize-b, which only MLX does; else --backend)")
    p.add_argument("--device", choices=["cuda", "mps", "cpu"], help="torch device, both variants (default: best)")
    p.add_argument("--dtype", choices=DTYPES, help="A's precision (default: float32 on a CPU)")
    p.add_argument("--dtype-b", choices=DTYPES, help="B's precision (default: --dtype)")
    p.add_argument("--quantize", type=int, choices=[4, 8], help="MLX: quantize A's weights on load")
    p.add_argument("--quantize-b", type=int, choices=[4, 8], help="MLX: quantize B's weights on load")
    p.add_argument("--trust-remote-code", action="store_true", help="allow code from the models' repositories")
    p.add_argument("--allow-pickle", action="store_true", help="allow non-safetensors weights (weights_only)")
    p.add_argument("--threads", type=thread_count, metavar="N", help="torch: CPU threads")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", type=text_arg, help="the text (default: --prompt-file, else standard input)")
    src.add_argument("--prompt-file", type=nonempty, help="read the text from this file (UTF-8)")
    return p


def specs(args: argparse.Namespace) -> tuple[ModelSpec, ModelSpec]:
    """A's and B's model specs: B is A but for what its own flags say (MLX when B is quantized on load)."""
    a = LoadOptions(device=args.device, dtype=args.dtype, quantize_bits=args.quantize,
                    trust_remote_code=args.trust_remote_code, allow_pickle=args.allow_pickle, threads=args.threads)
    b = replace(a, dtype=args.dtype_b or args.dtype, quantize_bits=args.quantize_b)
    return (ModelSpec(args.model, args.backend, a),
            ModelSpec(args.model_b or args.model, args.backend_b or ("mlx" if args.quantize_b else args.backend), b))


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    a, b = specs(args)
    try:
        for flag, source in (("--model-b", args.model_b), ("--model", args.model)):  # B first: it fails fast
            if source is not None:
                check_model(flag, source)
        text = read_prompt(args)
    except SettingsError as e:
        return fail(str(e), 2, PROG)
    return run_job("diff", DiffRequest(model=a, model_b=b, prompt=text), _print_all)


def check_model(flag: str, source: str) -> None:
    """A SettingsError naming the flag when `source` cannot name a model (no network: a hub id passes)."""
    try:
        check_source(source)
    except ModelLoadError as e:
        raise SettingsError(f"{flag}: {e}") from None


def _print_all(events: Iterable[object]) -> int:
    """Print the diff's events: loading and progress on stderr, then its JSON Lines; its exit status."""
    for ev in events:
        if isinstance(ev, Failed):
            return fail(ev.message, 1, PROG)
        if (status := status_line(ev)) is not None:
            print(status, file=sys.stderr, flush=True)
        elif isinstance(ev, DiffProgress):
            print(ev.message, file=sys.stderr, flush=True)
        elif isinstance(ev, Diffed):
            if ev.diff is None:
                return fail("cancelled", 1, PROG)
            for line in lines(ev.diff):
                emit(to_json(line))
            return 0
    return fail("cancelled", 1, PROG)  # ended with no diff: A's download was cancelled


def lines(d: QuantDiff) -> list[dict[str, Any]]:
    """The JSON Lines: a line per position (row t: the token at position t + 1), then the summary."""
    rows = [{**asdict(r), "agree": r.agree} for r in d.rows()]
    return [*rows, {"summary": True, "a": d.label_a, "b": d.label_b, **asdict(d.summary()), "b_beside_a": d.beside}]
