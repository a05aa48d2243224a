"""`logitlab lens --prompt … --step K`: the logit lens at step K of a run: per layer (the embeddings, then each layer's
output) its top tokens through the model's final norm and head, the drawn token's probability and rank, and the layer
where it first leads. Text by default (a row per layer), `--json` the whole grid. An approximation, said so: the
intermediate layers are read through the last layer's head.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.cli.arguments import add_count, emit, to_json
from app.cli.inside.looking import parser as base_parser
from app.cli.inside.looking import run_and_look

PROG = "logitlab lens"
SHOWN = 5  # top tokens per row in the text table


def parser() -> Any:
    p = base_parser(PROG, "The logit lens at one step of a run: each layer's residual stream read through the model's "
                    "final norm and output head (its top tokens, the drawn token's probability and rank).")
    add_count(p, "--candidates", 1, 100, 10, "top tokens per layer")
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    code, grid = run_and_look(args, "lens", PROG, args.candidates)
    if grid is None:
        return code
    if args.json:
        emit(to_json(grid.to_json()))
        return 0
    for line in table(grid, min(SHOWN, args.candidates)):
        emit(line)
    return 0


def table(grid: Any, shown: int) -> list[str]:
    """The lens as lines: a header, a row per layer, where the token first leads."""
    from app.core.decoding.inside import APPROXIMATION

    token = repr(grid.token_text)
    lines = [f"step {grid.step} (position {grid.position}): the model drew {token}", f"({APPROXIMATION})",
             f"{'layer':<11} {'p(drawn)':>9} {'rank':>6}   top tokens"]
    for i, name in enumerate(grid.layer_names):
        top = " · ".join(f"{t!r} {p:.3f}" for t, p in zip(grid.top_texts[i][:shown], grid.top_probs[i][:shown],
                                                          strict=True))
        lines.append(f"{name:<11} {grid.token_probs[i]:>9.4f} {grid.token_ranks[i]:>6}   {top}")
    at = grid.appears
    lines.append(f"{token} never leads" if at is None else f"{token} first leads at layer {grid.layer_names[at]}")
    return lines
