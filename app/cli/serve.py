"""`logitlab serve --model M [--port P] [--host H] [--session FILE]`: an OpenAI-compatible server on this machine
over the one model thread (`app.serve`). Every request becomes a run; with --session each is kept in a session file
as it finishes (and at exit), which `logitlab --open FILE` shows. 127.0.0.1 unless --host says otherwise, and then an
API key is needed (--api-key-env, else the keychain's for this address). Bad input exits 2 with one line; Ctrl+C
stops cleanly (exit 0).
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.arguments import Parser, add_count, emit, fail, nonempty
from app.cli.flags import add_model_args, spec_from

if TYPE_CHECKING:
    from app.serve.host import Host

PROG = "logitlab serve"


def parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="Serve a model over an OpenAI-compatible API (/v1/chat/completions, "
               "/v1/completions, /v1/responses, /v1/models); every request becomes a run you can open.")
    add_model_args(p)
    for action in p._actions:  # (argparse has no public way to reword a shared flag's help)
        if action.dest == "api_key_env":
            action.help = "the API key clients must send (Authorization: Bearer KEY) is in this environment variable"
    p.add_argument("--host", default="127.0.0.1", type=nonempty, help="the address to listen on (default 127.0.0.1: "
                   "this machine only; any other needs an API key)")
    add_count(p, "--port", 0, 65535, 8000, "the port (0: any free one)")
    p.add_argument("--session", type=nonempty, metavar="FILE", help="keep every request's run in this session file "
                   "(written as each finishes and at exit; `logitlab --open FILE` shows them)")
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    if args.backend == "remote" or args.base_url:
        return fail("serve runs a local model: a remote one is served already", 2, PROG)
    session = Path(args.session).expanduser() if args.session else None
    if session is not None and (session.is_dir() or not session.parent.resolve().is_dir()):
        return fail(f"cannot write the session file {args.session}: name a file in a folder that exists", 2, PROG)
    from app.core.remote.secrets import api_key  # (the server's modules: not for --help)
    from app.serve.host import Host, Keeper
    from app.serve.server import check_exposure
    from backends.base import ModelLoadError

    spec = spec_from(argparse.Namespace(**{**vars(args), "api_key_env": None}))
    try:
        key = api_key(f"http://{args.host}:{args.port}", args.api_key_env)
        check_exposure(args.host, key)
    except (ValueError, ModelLoadError) as e:
        return fail(str(e), 2, PROG)
    host = Host(spec, Keeper(session, spec))
    try:
        return _serve(host, args, key, session)
    except ModelLoadError as e:
        return fail(str(e), 1, PROG)
    finally:
        host.close()
        host.keeper.write()


def _serve(host: Host, args: argparse.Namespace, key: str | None, session: Path | None) -> int:
    """Load, listen, wait for Ctrl+C (or the server's end), stop."""
    from app.serve.server import Server

    host.load()
    try:
        server = Server(host, args.host, args.port, key).start()
    except (ValueError, RuntimeError) as e:
        return fail(str(e), 1, PROG)
    kept = f", runs kept in {session}" if session else ""
    emit(f"Serving {host.name} at {server.url}{kept} (Ctrl+C stops)")
    try:
        while server.thread.is_alive():
            threading.Event().wait(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
