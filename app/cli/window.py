"""`logitlab` with no command: the window, opened on the model and settings its flags give. Its picture flags,
`--screenshot FILE` and `--size WxH`, are checked before it opens: a screenshot goes to a folder that exists, as a
format named by its extension (`PICTURE_TYPES`), at the size asked (`DEFAULT_SIZE` unless given), within
`SIZE_RANGE`. Qt loads only as the window opens (`app.ui.main`): `logitlab --help` answers without it.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path

from app.cli.arguments import Parser, check_base_url, fail, nonempty, text_arg
from app.cli.flags import add_model_args, add_sampler_args, settings_from, spec_from
from app.core.settings import SettingsError

USAGE = """logitlab [options]             open the window
       logitlab generate [options]    stream a completion to standard output
       logitlab sweep [options]       N samples under each cell of a grid of settings, with statistics
       logitlab bench [options]       time generation against a baseline
       logitlab models [options]      list the models you have (built-in, HF cache, the window's model folders)
       logitlab diff [options]        compare two variants of a model token by token (KL, top-1 agreement)
       logitlab probe --base-url URL  what an OpenAI-compatible server really applies (a report card)
       logitlab serve [options]       serve a model over an OpenAI-compatible API; every request a run"""
PICTURE_TYPES = (".png", ".jpg", ".jpeg")  # what --screenshot writes (Qt's image writers, always built in)
DEFAULT_SIZE = (1400, 860)  # the window's first size, and a screenshot's unless --size says otherwise
SIZE_RANGE = ((900, 500), (7680, 4320))  # (smallest, largest) width and height: above the window's own minimum


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="logitlab", usage=USAGE, description="Logit Lab: watch a language model choose each token. "
               "With no command, the window opens; see logitlab COMMAND -h.")
    add_model_args(p)
    p.add_argument("--prompt", type=text_arg, help="start with this prompt")
    add_screenshot_args(p)
    p.add_argument("--open", type=nonempty, metavar="FILE", help="show a saved session or run (a --trace file); no "
                   "model is loaded until you generate")
    add_sampler_args(p)
    return p


def main(argv: Sequence[str]) -> int:
    """Open the window (and run its event loop) on what the flags say; 2 with one line where they cannot be."""
    args = parser().parse_args(argv)
    try:
        settings = settings_from(args)
        check_base_url(args.base_url)
    except SettingsError as e:
        return fail(str(e), 2)
    from app.ui.main import run_window as open_window  # (Qt: only once the window opens)

    return open_window(spec_from(args), settings, prompt=args.prompt, screenshot=args.screenshot,
                       open_path=args.open, size=args.size or (DEFAULT_SIZE if args.screenshot else None))


def add_screenshot_args(p: argparse.ArgumentParser) -> None:
    (w0, h0), (w1, h1) = SIZE_RANGE
    p.add_argument("--screenshot", type=picture_path, metavar="FILE", help="run one generation (or show --open's "
                   f"file), save a picture of the window to FILE ({', '.join(PICTURE_TYPES)}) and exit; your "
                   "preferences are neither read nor written")
    p.add_argument("--size", type=window_size, metavar="WxH", help="the window's size in pixels, width from "
                   f"{w0} to {w1} and height from {h0} to {h1} (default: {size_text(DEFAULT_SIZE)} with --screenshot, "
                   "else the size you left it at)")


def picture_path(text: str) -> str:
    """--screenshot: a file in a folder that exists, of a picture type Logit Lab writes."""
    path = Path(text).expanduser()
    if path.suffix.lower() not in PICTURE_TYPES:
        why = f"{path.suffix!r} is not a picture type" if path.suffix else "no extension names its type"
        raise argparse.ArgumentTypeError(f"cannot save a picture as {text!r}: {why}; end the name in "
                                         f"{', '.join(PICTURE_TYPES[:-1])} or {PICTURE_TYPES[-1]}")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot save a picture in {str(path.parent)!r}: no such folder")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: name a file in it, e.g. {str(path / 'shot.png')!r}")
    return str(path)


def window_size(text: str) -> tuple[int, int]:
    """--size: WIDTHxHEIGHT in pixels, each within `SIZE_RANGE`."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text)
    (w0, h0), (w1, h1) = SIZE_RANGE
    if m is None:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT in pixels, e.g. {size_text(DEFAULT_SIZE)}, "
                                         f"got {text!r}")
    w, h = int(m[1]), int(m[2])
    if not (w0 <= w <= w1 and h0 <= h <= h1):
        raise argparse.ArgumentTypeError(f"the width must be from {w0} to {w1} and the height from {h0} to {h1}, "
                                         f"got {size_text((w, h))}")
    return w, h


def size_text(size: tuple[int, int]) -> str:
    return f"{size[0]}x{size[1]}"
