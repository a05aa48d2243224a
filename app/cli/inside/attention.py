"""`logitlab attention --prompt … --step K [--layer L]`: the attention of the position that predicts step K, over its
context. Text: per layer, the head-mean's most attended positions; with --layer, each head's (and which heads share a
KV head). `--json`: every weight (a layer's, with --layer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from app.cli.arguments import add_count, emit, fail, to_json
from app.cli.inside.looking import parser as base_parser
from app.cli.inside.looking import run_and_look

PROG = "logitlab attention"
SHOWN = 4  # positions per row in the text


def parser() -> Any:
    p = base_parser(PROG, "The attention of one step's position over its context, per layer and head.")
    add_count(p, "--layer", 1, None, None, "one layer (1 = the first): its heads one by one")
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    code, amap = run_and_look(args, "attention", PROG)
    if amap is None:
        return code
    if args.layer is not None and args.layer > amap.layers:
        return fail(f"--layer {args.layer}: this model has {amap.layers} layers", 2, PROG)
    layer = None if args.layer is None else args.layer - 1
    if args.json:
        emit(to_json(amap.to_json(layer)))
        return 0
    for line in table(amap, layer):
        emit(line)
    return 0


def table(amap: Any, layer: int | None) -> list[str]:
    """A row per layer (the head mean), or per head of `layer`: its most attended positions."""
    ctx = amap.context_texts
    group = f"; heads share KV heads in groups of {amap.group}" if amap.group > 1 else ""
    lines = [f"step {amap.step} (position {amap.position}): {amap.layers} layers × {amap.heads} heads{group}"]
    if layer is None:
        for i, row in enumerate(amap.head_mean()):
            lines.append(f"layer {i + 1:<3}{_window(amap, i)} {_most(row, ctx)}")
        return lines
    lines.append(f"layer {layer + 1}{_window(amap, layer)}")
    for h, row in enumerate(amap.weights[layer]):
        kv = f" (KV head {amap.kv_head_of(h)})" if amap.group > 1 else ""
        lines.append(f"head {h:<3}{kv} {_most(row, ctx)}")
    return lines


def _window(amap: Any, layer: int) -> str:
    w = amap.windows[layer]
    return f" (sliding window: the last {w} positions)" if w else ""


def _most(row: np.ndarray, ctx: Sequence[str]) -> str:
    order = np.argsort(-row, kind="stable")[:SHOWN]
    return " · ".join(f"{int(t)}:{ctx[t]!r} {row[t]:.3f}" for t in order)
