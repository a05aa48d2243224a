"""`logitlab steer make`: a steering vector from contrastive prompt pairs, saved as llama.cpp's control-vector GGUF
(`llama-cli --control-vector FILE` runs it); `logitlab steer grid`: one prompt under a strength × layer grid of a
vector, each cell's text and its perplexity under the unsteered model, the cells where fluency broke marked. Both run
on one model thread; bad input is one line and exit 2 before anything loads, a failed run one line and exit 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from app.cli.arguments import Parser, add_count, emit, fail, nonempty, read_prompt, status_line, text_arg, to_json
from app.cli.flags import add_model_args, add_sampler_args, settings_from, spec_from
from app.core.control_vectors import (
    METHODS,
    ControlVector,
    VectorError,
    parse_layers,
    parse_strengths,
    read_vector,
)
from app.core.events import Failed, Finished
from app.core.settings import SettingsError

PROG = "logitlab steer"


def parser() -> Parser:
    p = Parser(prog=PROG, description="Steering vectors: make one from contrastive prompt pairs, or run one prompt "
               "under a grid of strengths and layers.")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="{make,grid}")
    make = verbs.add_parser("make", help="a vector from contrastive prompt pairs (llama.cpp's control-vector GGUF)",
                            description="The residual stream after each layer at each prompt's last token; per "
                                        "layer the mean of the pairs' differences (positive - negative), or their "
                                        "first principal component.")
    add_model_args(make)
    make.add_argument("--positive", action="append", type=text_arg, default=[], metavar="TEXT",
                      help="a prompt of the side to steer toward (repeatable; pairs with --negative in order)")
    make.add_argument("--negative", action="append", type=text_arg, default=[], metavar="TEXT",
                      help="its contrasting prompt (repeatable)")
    make.add_argument("--method", choices=METHODS, default="mean", help="mean difference, or first principal "
                      "component of the differences (default: mean)")
    make.add_argument("--layers", type=layers_arg, default=(), help="layers to make it for: 3,4 or 2-5 (default: "
                      "every layer from 1; llama.cpp never steers layer 0)")
    make.add_argument("-o", "--output", type=nonempty, required=True, metavar="FILE", help="the .gguf to write")
    make.add_argument("--json", action="store_true", help="write JSON instead of text")
    grid = verbs.add_parser("grid", help="one prompt under a strength × layer grid of a vector",
                            description="Each cell a steered run of the prompt (the same seed), with its text's "
                                        "perplexity under the unsteered model; strength 0, the unsteered text, is "
                                        "the first column and the baseline.")
    add_model_args(grid)
    src = grid.add_mutually_exclusive_group()
    src.add_argument("--prompt", type=text_arg, help="the prompt (default: --prompt-file, else standard input)")
    src.add_argument("--prompt-file", type=nonempty, help="read the prompt from this file")
    grid.add_argument("--vector", type=nonempty, required=True, metavar="FILE", help="the control vector (.gguf)")
    grid.add_argument("--strengths", type=strengths_arg, required=True, metavar="S1,S2,...",
                      help="the strengths (columns), e.g. 1,2,4,8")
    grid.add_argument("--layers", type=layers_arg, action="append", required=True, metavar="LAYERS",
                      help="a row: the layers steered together (3 or 2-5); repeatable")
    add_sampler_args(grid)
    add_count(grid, "--n", 1, 16, 1, "samples per cell (their perplexities averaged)")
    grid.add_argument("--json", action="store_true", help="a JSON line per cell instead of text")
    return p


def layers_arg(text: str) -> tuple[int, ...]:
    try:
        return parse_layers(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def strengths_arg(text: str) -> tuple[float, ...]:
    try:
        return parse_strengths(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    return make(args) if args.verb == "make" else grid(args)


def make(args: argparse.Namespace) -> int:
    if not args.positive or len(args.positive) != len(args.negative):
        return fail(f"give pairs: as many --positive as --negative (got {len(args.positive)} and "
                    f"{len(args.negative)})", 2, PROG)
    from app.core.decoding.steering.pairs import VectorMade, VectorRequest  # (the model thread's: not for --help)

    request = VectorRequest(model=spec_from(args), positive=tuple(args.positive), negative=tuple(args.negative),
                            layers=args.layers, method=args.method, path=args.output)
    code, made = _run("steer_vector", [request], VectorMade)
    if made:
        v = made[0].vector
        emit(to_json(vector_json(v, args.output)) if args.json else vector_text(v, args.output))
    return code


def vector_json(v: ControlVector, path: str) -> dict[str, Any]:
    return {"path": path, "method": v.method, "pairs": v.pairs, "model_hint": v.model_hint,
            "layers": [{"layer": n, "norm": float((v.directions[n] ** 2).sum() ** 0.5), "residual_norm": v.norms.get(n),
                        "relative_at_1": v.relative(n, 1.0)} for n in v.layers]}


def vector_text(v: ControlVector, path: str) -> str:
    """What was made, and what a strength means at each layer (a strength of 1 adds one direction)."""
    lines = [f"wrote {path}: {len(v.layers)} layer(s), {v.method} of {v.pairs} pair(s), for {v.model_hint}",
             "layer  |direction|  residual norm  strength 1 adds"]
    for n in v.layers:
        rel = v.relative(n, 1.0)
        norm = float((v.directions[n] ** 2).sum() ** 0.5)
        lines.append(f"{n:>5}  {norm:>11.4g}  {v.norms.get(n, float('nan')):>13.4g}  "
                     + ("?" if rel is None else f"{rel:.3g}× the norm"))
    lines.append("(fluency typically breaks near 2× the residual norm)")
    return "\n".join(lines)


def grid(args: argparse.Namespace) -> int:
    from app.core.compare.steer_grid import cell_result, make_grid, mark_broken  # (not for --help)
    from app.core.events import Request

    try:
        settings = settings_from(args)
        prompt = read_prompt(args)
        vector = read_vector(args.vector)
        cells = make_grid(settings, args.vector, args.layers, args.strengths)
    except (SettingsError, VectorError, ValueError) as e:
        return fail(str(e), 2, PROG)
    if settings.seed is None:  # one seed for every cell: they differ by their steering alone
        import secrets

        settings = settings.with_(seed=secrets.randbelow(2**32))
        cells = make_grid(settings, args.vector, args.layers, args.strengths)
    base = Request(model=spec_from(args), prompt=prompt, settings=settings, top_n=args.top_n, n=args.n)
    requests = [Request(model=base.model, prompt=prompt, settings=c.settings, top_n=args.top_n, n=args.n)
                for c in cells]
    code, finished = _run("plain", requests, Finished, each=True)
    by_request: dict[int, list[Any]] = {}
    for ev in finished:
        by_request.setdefault(ev.request_id, []).append(ev.trace)
    results = mark_broken([cell_result(c, [t for t in by_request.get(r.id, []) if t is not None], vector)
                           for c, r in zip(cells, requests, strict=True) if r.id in by_request])
    for r in results:
        emit(to_json(r.to_json()) if args.json else cell_text(r))
    return code


def cell_text(r: Any) -> str:
    rel = "" if r.relative is None else f" ({r.relative:.2g}× norm)"
    ppl = "?" if r.perplexity is None else f"{r.perplexity:.4g}"
    mark = "  BROKEN" if r.broken else ""
    text = r.text.replace("\n", "\\n")
    return (f"layers {','.join(map(str, r.cell.layers))} × {r.cell.strength:g}{rel}: perplexity {ppl}, KL "
            f"{r.mean_kl:.3g}{mark}\n    {text}")


def _run(kind: str, requests: Sequence[Any], wanted: type, each: bool = False) -> tuple[int, list[Any]]:
    """Run `requests` on a model thread (one job, or one job each); (exit status, their `wanted` events)."""
    from app.core.runs.jobs import Job, stream
    from app.core.runs.model_thread import ModelThread

    worker = ModelThread()
    got: list[Any] = []
    try:
        for job in ([Job(kind, (r,)) for r in requests] if each else [Job(kind, tuple(requests))]):
            for ev in _events(stream(worker.start(job))):
                if isinstance(ev, Failed):
                    return fail(ev.message, 1, PROG), got
                if isinstance(ev, wanted):
                    got.append(ev)
        return 0, got
    except KeyboardInterrupt:
        worker.cancel()
        return 130, got
    finally:
        worker.close()


def _events(events: Iterator[Any]) -> Iterator[Any]:
    """`events`, the loading ones said on stderr as they pass."""
    for ev in events:
        if (status := status_line(ev)) is not None:
            print(status, file=sys.stderr, flush=True)
        yield ev
