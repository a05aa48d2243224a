"""`logitlab multiverse`: where a prompt could go, best first by path probability, through the model thread. Text: a
line per node, likeliest first (p(path), the other space's, depth, the path, the stage that cut it); `--json`: the
whole `Multiverse.to_dict` with each depth's columns. Then, on stderr, each depth's explored share. `--sampled` ranks
by the probability after the sampler flags' chain. Bad input exits 2 with one line, a server's model 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from app.cli.arguments import (
    Parser,
    add_count,
    emit,
    fail,
    nonempty,
    read_prompt,
    run_job,
    status_line,
    text_arg,
    to_json,
)
from app.cli.flags import add_model_args, add_sampler_args, settings_from, spec_from
from app.core.decoding.multiverse import MAX_BUDGET, MAX_DEPTH, MAX_ROWS, MAX_WIDTH, LookAhead
from app.core.events import ExploreDone, Failed, Message
from app.core.record.multiverse import Multiverse, Space
from app.core.settings import SettingsError

PROG = "logitlab multiverse"


def parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="Look ahead from a prompt: its likely continuations, expanded best first by "
               "path probability under a node budget and a depth limit, as a table (or JSON).")
    add_model_args(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", type=text_arg, help="the prompt (default: --prompt-file, else standard input)")
    src.add_argument("--prompt-file", type=nonempty, help="read the prompt from this file")
    p.add_argument("--chat", action="store_true", help="send the prompt as a user message (chat template)")
    add_count(p, "--depth", 1, MAX_DEPTH, 6, "tokens to look ahead")
    add_count(p, "--budget", 1, MAX_BUDGET, 200, "nodes in the tree")
    add_count(p, "--width", 1, MAX_WIDTH, 10, "children considered per node: its likeliest tokens under the model")
    add_count(p, "--rows", 1, MAX_ROWS, 32, "nodes expanded together in one forward (1: one at a time)")
    p.add_argument("--sampled", action="store_true", help="rank by the probability after the sampler flags' chain "
                   "(what your sampler would do: a child a stage cuts has 0 and is listed with the stage) instead "
                   "of the model's own")
    p.add_argument("--json", action="store_true", help="write the multiverse as one JSON object")
    add_sampler_args(p)
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    try:
        settings = settings_from(args)
        look = LookAhead(args.budget, args.depth, args.width, "sampled" if args.sampled else "model", args.rows)
        prompt = read_prompt(args)
    except SettingsError as e:
        return fail(str(e), 2, PROG)
    from app.core.runs.multiverse_run import ExploreRequest  # (the core's heavy modules: not for --help)

    messages = (Message("user", prompt),) if args.chat else None
    request = ExploreRequest(model=spec_from(args), prompt=prompt, messages=messages, settings=settings, look=look)
    return run_job("multiverse", request, lambda events: _print_all(events, args.json))


def _print_all(events: Iterable[object], json_out: bool) -> int:
    """Loading on stderr, then the finished tree; the exit status."""
    for ev in events:
        if isinstance(ev, Failed):
            return fail(ev.message, 1, PROG)
        if (line := status_line(ev)) is not None:
            print(line, file=sys.stderr, flush=True)
        elif isinstance(ev, ExploreDone):
            mv = ev.multiverse
            for line in [to_json(json_object(mv))] if json_out else table(mv):
                emit(line)
            print(summary(mv), file=sys.stderr)
            return 130 if mv.reason == "cancelled" else 0
    return 130  # ended with no tree: its model's download was cancelled


def json_object(mv: Multiverse) -> dict[str, Any]:
    """The multiverse's record, with each depth's explored share and remainder in both spaces."""
    return {"type": "multiverse", **mv.to_dict(),
            "columns": {space: [{"depth": c.depth, "explored": c.explored, "remainder": c.remainder}
                                for c in mv.columns(space)] for space in ("model", "sampled")}}


def table(mv: Multiverse) -> list[str]:
    """A line per node, likeliest first in the space it was ranked by: p(path), the other space's, depth, text."""
    space: Space = mv.space
    other: Space = "sampled" if space == "model" else "model"
    order = sorted(mv.nodes[1:], key=lambda n: (-n.path_prob(space), -n.path, n.id))
    head = f"{'p(path)':>9}  {other + ' p':>9}  {'depth':>5}  path"
    return [head] + [f"{n.path_prob(space):9.4%}  {n.path_prob(other):9.4%}  {n.depth:>5}  {mv.path_text(n.id)!r}"
                     + (f"  (cut by {n.cut_by})" if n.cut_by else "") + ("  (end of text)" if n.end else "")
                     for n in order]


def summary(mv: Multiverse) -> str:
    why = {"budget": "the budget is spent", "done": "nothing left within the depth", "cancelled": "stopped",
           "running": "running"}[mv.reason]
    cols = ", ".join(f"{c.explored:.0%}" for c in mv.columns(mv.space))
    return (f"({mv.ranked} nodes ranked by the {mv.space} probability, {mv.expanded} expanded, {why}; "
            f"explored per depth: {cols})")
