"""`logitlab models`: the models you have (the built-in ones, the Hugging Face cache, the folders given and the
window's model folders: `app.core.models.catalog`), or with --base-url a server's (`remote`). A flag for the other
kind of list exits 2 with one line; a server that cannot answer is one line, exit 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from app.cli.arguments import Parser, add_server_args, check_base_url, emit, fail, nonempty, to_json
from app.core.settings import SettingsError
from backends.base import ModelLoadError
from backends.remote.http import where


def parser() -> Parser:
    """`logitlab models`: the local models (`app.core.models.catalog`), or a server's with --base-url."""
    from app.core.models.catalog import FOLDER_DEPTH

    p = Parser(prog="logitlab models", description="List the models you have: the built-in one, the Hugging Face "
               "cache (model folders and .gguf files), the folders given with --folder and the window's model "
               "folders; or, with --base-url, the models an OpenAI-compatible server serves (its /v1/models).")
    p.add_argument("--cache-dir", type=nonempty, help="another cache folder (default: the standard HF cache)")
    p.add_argument("--folder", type=nonempty, action="append", default=[], help="also list the model folders and "
                   f".gguf files in this folder, up to {FOLDER_DEPTH} levels down (repeatable; e.g. "
                   "~/.lmstudio/models)")
    add_server_args(p)
    p.add_argument("--json", action="store_true", help="one JSON array of the entries (remote: the server's list)")
    return p


def main(argv: Sequence[str]) -> int:
    """List the models; 2 with one line for a flag of the other kind of list."""
    args = parser().parse_args(argv)
    if args.base_url is None:
        if args.api_key_env or args.deadline is not None:
            flag = "--api-key-env" if args.api_key_env else "--deadline"
            return fail(f"{flag} is for a server: give its --base-url too", 2, "logitlab models")
        from app.core.models.catalog import main as local_models

        return local_models([*argv, *saved_folder_args(argv)], emit)
    if args.cache_dir or args.folder:
        return fail("--cache-dir and --folder list local models, not a server's (--base-url)", 2, "logitlab models")
    try:
        check_base_url(args.base_url)
    except SettingsError as e:
        return fail(str(e), 2, "logitlab models")
    return served(args)


def saved_folder_args(argv: Sequence[str]) -> list[str]:
    """`--folder F` for each folder of models added in the window's picker (its preferences) that still exists and
    is not given already: `logitlab models` lists what the picker lists."""
    from app.ui.files.preferences import Preferences

    given = {str(Path(a).expanduser().resolve()) for a in argv}
    return [a for f in Preferences().get("model_folders")
            if Path(f).is_dir() and str(Path(f).resolve()) not in given for a in ("--folder", f)]


def served(args: argparse.Namespace) -> int:
    """`logitlab models --base-url URL`: the server's models (its /v1/models), one a line or as JSON."""
    from app.core.remote.remote_run import served_models  # (the HTTP client: only for a server)

    try:
        listed = served_models(args.base_url or "", args.api_key_env, deadline=args.deadline)
    except ModelLoadError as e:
        print(f"logitlab models: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        emit(to_json(listed, indent=1))
    elif not listed:
        emit(f"{where(args.base_url)} serves no models.")
    for m in listed if not args.json else ():
        ctx = m.get("max_model_len") or m.get("context_length")
        emit(m["id"] + (f"  (context {ctx:,})" if isinstance(ctx, int) else ""))
    return 0
