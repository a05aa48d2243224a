"""The command line's shared pieces, below every command (`cli`, `bench`, `remote_cli`, `terminal`): argparse
with one-line errors, checked whole-number flags, the flags naming a server, and how a command fails or prints
JSON. It imports no command module: the commands import it, never the other way round.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from app.core.settings import SettingsError
from backends.remote_http import RemoteError, normalize_url, where
from backends.threads import ThreadsError, check_threads

COMPILE_HELP = ("torch, Llama-family: a static KV cache and a torch.compile'd decode step (~2x decode on a CPU). "
                "The first decode step compiles: a minute or more on a CPU the first time (cached for later runs)")
DEBUG_ENV = "LOGITLAB_DEBUG"  # set: an unexpected error prints its traceback, not only its one line


class Parser(argparse.ArgumentParser):
    """argparse, with a bad flag's error as one line (no usage block above it); exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def whole(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from `lo` to `hi` (None: no upper limit)."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if n < lo or (hi is not None and n > hi):
            raise argparse.ArgumentTypeError(f"must be {span(lo, hi)}, got {n}")
        return n

    return parse


def span(lo: int, hi: int | None) -> str:
    return f"{lo} or more" if hi is None else f"from {lo} to {hi}"


def add_count(p: argparse.ArgumentParser, flag: str, lo: int, hi: int | None, default: int | None, text: str) -> None:
    """A whole-number flag: its range, checked by argparse, is the one its help states."""
    shown = "" if default is None else f", default {default}"
    p.add_argument(flag, type=whole(lo, hi), default=default, metavar="N", help=f"{text} [{span(lo, hi)}{shown}]")


def add_server_args(p: argparse.ArgumentParser) -> None:
    """--base-url and --api-key-env: the server a command talks to, and where its API key is."""
    p.add_argument("--base-url", help="remote: an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    p.add_argument("--api-key-env", metavar="VAR", help="remote: read the API key from this environment variable "
                   "(default: the key saved in the keychain for this server, else none)")


def thread_count(text: str) -> int:
    try:
        return check_threads(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    except ThreadsError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def backend_of(args: argparse.Namespace) -> str:
    """--backend, where "auto" with a --base-url means the server it names."""
    return "remote" if args.base_url and args.backend == "auto" else args.backend


def check_base_url(url: str | None) -> None:
    """A --base-url that cannot name a server is refused before anything starts (RemoteError: one line)."""
    if url:
        try:
            normalize_url(url)
            where(url)  # it reads the port: one out of range raises
        except RemoteError as e:
            raise SettingsError(str(e)) from None
        except ValueError as e:  # urllib's own: a bad IPv6 address, a port out of range
            raise SettingsError(f"the base URL cannot name a server: {e}") from None


def fail(message: str, code: int = 1, prog: str = "logitlab") -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code


def to_json(obj: Any, indent: int | None = None) -> str:
    """JSON text that every JSON reader takes: NaN and the infinities (which JSON has not) as null."""
    return json.dumps(_finite(obj), ensure_ascii=False, indent=indent, allow_nan=False)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def read_prompt(args: argparse.Namespace) -> str:
    """The text of `--prompt`, `--prompt-file` or standard input; SettingsError (one line) when there is none or it
    is not UTF-8."""
    if args.prompt is not None:
        return args.prompt
    if args.prompt_file:
        try:
            with open(args.prompt_file, "rb") as f:
                return utf8(f.read(), args.prompt_file)
        except OSError as e:
            raise SettingsError(f"cannot read the prompt file: {e.strerror}: {args.prompt_file}") from e
    if sys.stdin is None or sys.stdin.isatty():
        raise SettingsError("no prompt: pass --prompt, --prompt-file, or pipe text on standard input")
    return utf8(sys.stdin.buffer.read(), "standard input")


def utf8(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SettingsError(f"{where} is not UTF-8 text (byte {e.start}: {data[e.start:e.start + 1]!r}); "
                            "save it as UTF-8") from e
