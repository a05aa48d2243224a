"""The command line's shared pieces, below every command: argparse with one-line errors, checked whole-number
flags, the flags naming a server, how a command fails (`logitlab VERB: error: ...`, as argparse's errors begin),
JSON, the line that says what the model thread is loading (`status_line`), and one job run on a model thread of its
own (`run_job`). `emit` is every command's one writer of standard output: a write that fails is one line
(`output_failed`), never a traceback. It imports no command module: the commands import it, never the other way round.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from app.core.events import Loaded, Loading
from app.core.files import typed
from app.core.settings import SettingsError
from backends import INSTALL_HINT, installed
from backends.remote.http import DEADLINE_S, RemoteError, normalize_url, where
from backends.threads import ThreadsError, check_threads

COMPILE_HELP = ("torch, Llama-family: a static KV cache and a torch.compile'd decode step (~2x decode on a CPU). "
                "The first decode step compiles: a minute or more on a CPU the first time (cached for later runs)")
DEBUG_ENV = "LOGITLAB_DEBUG"  # set: an unexpected error prints its traceback, not only its one line
ECHOED = 60  # a refusal quotes at most this many characters of what was typed (`typed`)
LONG_QUOTE = re.compile(f"'[^']{{{ECHOED},}}'|\"[^\"]{{{ECHOED},}}\"")  # a value quoted in argparse's error
MAX_DEADLINE_S = 86400.0  # --deadline: a day
MAX_PROMPT_BYTES = 64 << 20  # a prompt file or standard input: more is no prompt a model's context holds


class Parser(argparse.ArgumentParser):
    """argparse, with a bad flag's error as one line (no usage block above it); exit 2."""

    def error(self, message: str) -> NoReturn:
        message = LONG_QUOTE.sub(lambda m: f"{m[0][:ECHOED]}…{m[0][-1]}", message)  # argparse quotes values whole
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def whole(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from `lo` to `hi` (None: no upper limit)."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {typed(text)}") from None
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
    """--base-url, --api-key-env and --deadline: the server a command talks to, where its API key is, and how long
    one request to it may take."""
    p.add_argument("--base-url", type=nonempty, help="remote: an OpenAI-compatible server, e.g. "
                   "http://127.0.0.1:8080/v1")
    p.add_argument("--api-key-env", type=nonempty, metavar="VAR", help="remote: read the API key from this environment "
                   "variable (default: the key saved in the keychain for this server, else none)")
    p.add_argument("--deadline", type=seconds, metavar="SECONDS", help="remote: the longest one request may take "
                   f"from start to last byte, however slowly the server sends (above 0, at most {MAX_DEADLINE_S:g}; "
                   f"default {DEADLINE_S:g})")


def seconds(text: str) -> float:
    """An argparse type for a time limit: a number of seconds above 0, at most MAX_DEADLINE_S."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {typed(text)}") from None
    if not 0 < value <= MAX_DEADLINE_S:  # (NaN too)
        raise argparse.ArgumentTypeError(f"must be above 0 and at most {MAX_DEADLINE_S:g} seconds, got {typed(text)}")
    return value


def thread_count(text: str) -> int:
    try:
        return check_threads(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {typed(text)}") from None
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


class OutputError(Exception):
    """Standard output cannot be written (a full disk, a closed pipe or descriptor): `output_failed` says it."""


def emit(text: str = "", end: str = "\n") -> None:
    """Write `text` and `end` to standard output now (flushed): every command's one writer of its output, so that a
    failure to write is an `OutputError` wherever it happens, never a traceback."""
    try:
        sys.stdout.write(text + end)
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError) as e:  # (ValueError: closed; AttributeError: no stdout at all)
        raise OutputError(getattr(e, "strerror", None) or "standard output is closed") from None


def output_failed(e: OutputError, prog: str = "logitlab") -> int:
    """The one line of an `OutputError` (exit 1); from then on standard output is the null device (what is left in
    its buffer, and any later write, go nowhere: no second failure at exit)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no descriptor to redirect (closed, or None)
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - it lives as long as the process
    return fail(f"cannot write to standard output: {e}", 1, prog)


def nonempty(text: str) -> str:
    """An argparse type for a flag naming a model, file or folder: an empty value (`--model=`) is refused rather
    than read as the default."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty: give a value, or leave the flag out for its default")
    return text


def text_arg(text: str) -> str:
    """An argparse type for text a model reads (a prompt, a system message): a byte the command line could not
    read as UTF-8 (Python keeps it as a lone surrogate) is refused, as a prompt file's would be."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise argparse.ArgumentTypeError(f"not UTF-8 text (character {e.start}): pass UTF-8 text") from None
    return text


def loaded_line(ev: Loaded) -> str:
    """What was loaded, leaving out what is not known (a server reports no parameter count); a GGUF file that torch
    dequantized says what would run it on its own weights."""
    i = ev.info
    size = f"{i.parameters / 1e6:.1f}M parameters, " if i.parameters else ""
    line = f"loaded {i.name}: {size}{i.backend} on {i.device}, {i.quantization or i.dtype}, in {ev.seconds:.1f} s"
    if i.backend == "torch" and i.name.lower().endswith(".gguf") and not installed("llamacpp"):
        line += f" (dequantized; llama.cpp runs it on its own weights: {INSTALL_HINT['llamacpp']})"
    return line


def status_line(ev: object) -> str | None:
    """What a command says on stderr of a model thread's event while a model loads (finding it, loading it with
    a backend, what was loaded); None for any other event, and for a download's progress."""
    if isinstance(ev, Loading) and not ev.total:
        return ev.message
    return loaded_line(ev) if isinstance(ev, Loaded) else None


def run_job(kind: str, request: object, printer: Callable[[Iterable[object]], int]) -> int:
    """Run one `kind` job of `request` on a model thread of its own, its events handed to `printer`, whose exit
    status is the command's; Ctrl-C cancels it (130). The thread is closed either way."""
    from app.core.runs.jobs import Job, stream  # (the model thread loads the core's heavy modules: not for --help)
    from app.core.runs.model_thread import ModelThread

    worker = ModelThread()
    try:
        return printer(stream(worker.start(Job(kind, (request,)))))
    except KeyboardInterrupt:
        worker.cancel()
        return 130
    finally:
        worker.close()


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
                return utf8(read_bounded(f, args.prompt_file), args.prompt_file)
        except OSError as e:
            raise SettingsError(f"cannot read the prompt file: {e.strerror}: {args.prompt_file}") from e
    if sys.stdin is None or sys.stdin.isatty():
        raise SettingsError("no prompt: pass --prompt, --prompt-file, or pipe text on standard input")
    return utf8(read_bounded(sys.stdin.buffer, "standard input"), "standard input")


def read_bounded(f: Any, where: str) -> bytes:
    """All of `f`, up to `MAX_PROMPT_BYTES` (more is refused: /dev/zero or a runaway pipe never fills memory)."""
    data = f.read(MAX_PROMPT_BYTES + 1)
    if len(data) > MAX_PROMPT_BYTES:
        raise SettingsError(f"{where} holds more than {MAX_PROMPT_BYTES >> 20} MiB: far more than any model's "
                            "context; give a shorter prompt")
    return data


def utf8(data: bytes, where: str) -> str:
    """`data` as UTF-8 text; a byte-order mark (Windows editors write one) is not part of it."""
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        raise SettingsError(f"{where} is not UTF-8 text (byte {e.start}: {data[e.start:e.start + 1]!r}); "
                            "save it as UTF-8") from e
