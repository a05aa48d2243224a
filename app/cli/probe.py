"""`logitlab probe --base-url URL`: what an OpenAI-compatible server really applies of the sampling fields it is
sent (`app.core.remote.probe`), printed as a table (Markdown, so it pastes into notes) or as JSON (--json). The
command exposes `add_parser(subparsers)` and `run(args)`; `python -m app.cli.probe` runs it alone. A server that
cannot be reached or reports no log-probabilities is one line on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from app.cli.arguments import Parser, add_count, add_server_args, check_base_url, emit, fail, text_arg, to_json
from app.core.settings import MAX_SEED, SettingsError

PROG = "logitlab probe"
MAX_BUDGET = 5000


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """The `probe` verb's parser, with `run` as its `run` default."""
    from app.core.remote.probe_stats import ALPHA, BUDGET, DEADLINE_S, MIN_BUDGET  # (the probe itself loads later)

    p = subparsers.add_parser("probe", help="what an OpenAI-compatible server really applies", description=(
        "Check what an OpenAI-compatible server really applies: temperature 0 and top_k 1 greedy, temperature, "
        "top_p, min_p, penalties, seed, stop, logit_bias, n, echo, top_logprobs, and whether its log-probabilities "
        "are the model's or the sampled distribution's; each a short test on the server's own log-probabilities."))
    add_server_args(p)
    p.set_defaults(deadline=DEADLINE_S)
    for action in p._actions:  # (argparse has no public way to reword a shared flag's help)
        if action.dest == "deadline":
            action.help = f"the longest one request may take, from start to last byte (default {DEADLINE_S:g})"
    p.add_argument("--model", default="", metavar="NAME", help="the served model (default: the one it serves)")
    p.add_argument("--prompt", type=text_arg, help="the prompt every check continues (default: the flattest of a "
                   "few short ones)")
    add_count(p, "--budget", MIN_BUDGET, MAX_BUDGET, BUDGET, "requests at most")
    p.add_argument("--alpha", type=alpha_value, default=ALPHA, help=f"the false-alarm bound of each statistical "
                   f"verdict (1e-12 to 0.01, default {ALPHA:g})")
    add_count(p, "--seed", 0, MAX_SEED, 0, "the probe's requests send seeds from this on")
    p.add_argument("--tokenizer", metavar="FOLDER", help="the model's tokenizer folder ('builtin': the built-in "
                   "model's), for token ids where the server names none (logit_bias needs them)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    p.set_defaults(run=run)
    return p


def alpha_value(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text[:40]!r}") from None
    if not 1e-12 <= value <= 0.01:  # (NaN too)
        raise argparse.ArgumentTypeError(f"must be from 1e-12 to 0.01, got {text[:40]}")
    return value


def run(args: argparse.Namespace) -> int:
    from app.core.remote.probe import connect, probe
    from backends.base import ModelLoadError

    try:
        if not args.base_url:
            raise SettingsError("give the server's --base-url, e.g. http://127.0.0.1:8080/v1")
        check_base_url(args.base_url)
    except SettingsError as e:
        return fail(str(e), 2, PROG)
    try:
        model = connect(args.base_url, args.model, args.api_key_env, args.deadline, args.tokenizer)
    except ModelLoadError as e:
        return fail(str(e), 1, PROG)
    try:
        report = probe(model, budget=args.budget, alpha=args.alpha, seed=args.seed,
                       **({"prompts": (args.prompt,)} if args.prompt else {}))
    except ModelLoadError as e:
        return fail(str(e), 1, PROG)
    except KeyboardInterrupt:
        return 130
    finally:
        model.close()
    emit(to_json(report.to_dict(), indent=1) if args.json else table(report))
    return 0


def table(report: Any) -> str:
    """The report as a heading and a Markdown table, its columns padded to line up."""
    head = (f"{report.model} at {report.server} ({report.dialect}), {report.date}: {report.requests} requests, "
            f"prompt {report.prompt!r}, false alarms ≤ {report.alpha:g}"
            + (f", fingerprint {report.fingerprint}" if report.fingerprint else ""))
    sums = [f"ignored: {', '.join(report.ignored) or 'none'}", f"log-probabilities: {report.logprobs}"]
    if report.fields("refused"):
        sums.append(f"refused: {', '.join(report.fields('refused'))}")
    rows = [("check", "verdict", "sent", "seen", "confidence")]
    rows += [(v.check, v.verdict, v.sent, v.detail, v.confidence) for v in report.verdicts]
    rows = [tuple(c.replace("|", "\\|").replace("\n", " ") for c in r) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join([head, "; ".join(sums), "", *lines])


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m app.cli.probe ...`: the verb alone (as `logitlab probe ...` runs it)."""
    parser = Parser(prog="logitlab")
    add_parser(parser.add_subparsers(parser_class=Parser))
    args = parser.parse_args(["probe", *(sys.argv[1:] if argv is None else argv)])
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
