"""`logitlab sweep`: its flags, read into a `SweepPlan` (each prompt under each cell of a grid of settings, N samples
each) that `compare.sweep_to_terminal` runs. Bad input exits 2 with one line before anything loads; the model
thread's modules are imported only when the sweep runs.
"""

from __future__ import annotations

import argparse
import secrets
from collections.abc import Sequence

from app.cli.arguments import Parser, add_count, check_base_url, fail, nonempty, read_prompt, text_arg
from app.cli.flags import MAX_SAMPLES, add_model_args, add_sampler_args, add_stats_args, settings_from, spec_from
from app.core.compare.prompt_sets import read_prompt_set
from app.core.compare.statistics import Axis, compile_pattern, make_grid, parse_axis
from app.core.events import Request
from app.core.settings import MAX_SEED, SettingsError


def parser() -> argparse.ArgumentParser:
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


def main(argv: Sequence[str]) -> int:
    """Run the sweep the flags describe; 2 with one line where they cannot be read."""
    from app.cli.compare import SweepPlan, sweep_to_terminal  # (the model thread's modules: not for --help)

    args = parser().parse_args(argv)
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
