"""`logitlab`: the command that `argv` names (`COMMANDS`), each run by its own module (`generate`, `sweep`,
`bench`, `models`, `diff`, `probe`, `serve`, `lens`, `attention`, `multiverse`, `steer`), imported only when it runs so
that `--help` and a bad flag answer at once; with none, the window (`window`). Standard output that cannot be written is
one line in any of them. The command modules never import this one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from app.cli.arguments import OutputError, emit, output_failed

# each as argv begins with it
COMMANDS = (["generate"], ["sweep"], ["bench"], ["models"], ["diff"], ["probe"], ["serve"], ["lens"],
            ["attention"], ["multiverse"], ["steer"])


# the commands that load a model: their process ends once their output is flushed (`entry`)
QUICK_EXIT = {"generate", "sweep", "bench", "diff", "probe", "lens", "attention", "steer", "multiverse"}


def entry() -> None:
    """The `logitlab` console script and `python -m app`: `main`, and after a command that loaded a model the process
    ends as soon as its output is flushed (os._exit: the frameworks' interpreter teardown takes about a second and
    writes nothing; every file was written and closed inside `main`). `main` itself returns, for callers in the same
    process."""
    code = main()
    if sys.argv[1:2] and sys.argv[1] in QUICK_EXIT:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            sys.exit(code)  # (a stream that cannot be flushed: the interpreter's own exit says so)
        os._exit(code)
    sys.exit(code)


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
    verb, rest = (argv[0], argv[1:]) if argv else ("", [])
    if verb == "generate":
        from app.cli.generate import main as generate

        return generate(rest)
    if verb == "sweep":
        from app.cli.sweep import main as sweep

        return sweep(rest)
    if verb == "bench":
        from app.cli.bench.command import main as bench

        return bench(rest)
    if verb == "models":
        from app.cli.models import main as models

        return models(rest)
    if verb == "diff":
        from app.cli.diff import main as diff

        return diff(rest)
    if verb == "probe":
        from app.cli.probe import main as probe

        return probe(rest)
    if verb == "lens":
        from app.cli.inside.lens import main as lens

        return lens(rest)
    if verb == "attention":
        from app.cli.inside.attention import main as attention

        return attention(rest)
    if verb == "steer":
        from app.cli.inside.steer import main as steer

        return steer(rest)
    if verb == "multiverse":
        from app.cli.multiverse import main as multiverse

        return multiverse(rest)
    if verb == "serve":
        from app.cli.serve import main as serve

        return serve(rest)
    from app.cli.window import main as window

    return window(argv)
