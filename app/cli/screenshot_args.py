"""The window's picture flags, `--screenshot FILE` and `--size WxH`, checked before the window opens.

A screenshot goes to a folder that exists, as a format named by its extension (`PICTURE_TYPES`); anything else
is refused by argparse with one line. The size is the window's in pixels, within `SIZE_RANGE`: a screenshot
always comes out at the size asked (`DEFAULT_SIZE` unless given), whatever the window was left at. No Qt here:
`logitlab --help` answers without it.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

PICTURE_TYPES = (".png", ".jpg", ".jpeg")  # what --screenshot writes (Qt's image writers, always built in)
DEFAULT_SIZE = (1400, 860)  # the window's first size, and a screenshot's unless --size says otherwise
SIZE_RANGE = ((900, 500), (7680, 4320))  # (smallest, largest) width and height: above the window's own minimum


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
