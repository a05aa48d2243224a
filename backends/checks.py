"""Checks a model folder before any framework touches it, so a broken or unsafe folder gets a clear message.

No framework imports: reads config.json, the safetensors headers and file names only. Enforces the safe
defaults: no remote code without opt-in, safetensors unless pickle weights are explicitly allowed.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from backends.base import LoadOptions, ModelLoadError, PickleRefusedError, RemoteCodeRefusedError

PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt")


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, bytes_per_value: float) -> int:
    """Keys and values, every layer: 2 × layers × KV heads × head dim × bytes."""
    return int(2 * layers * kv_heads * head_dim * bytes_per_value)


def read_config(path: Path) -> dict:
    if not path.is_dir():
        raise ModelLoadError(f"{path} is not a folder")
    f = path / "config.json"
    if not f.exists():
        raise ModelLoadError(f"{path} has no config.json: is this a Hugging Face model folder?")
    try:
        return json.loads(f.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"{f} is not valid JSON ({e})") from e


def check_folder(path: Path, options: LoadOptions) -> dict:
    """config.json as a dict, after checking remote code, weight format and truncation."""
    config = read_config(path)
    if "auto_map" in config and not options.trust_remote_code:
        raise RemoteCodeRefusedError(
            f"{path.name} needs code from its repository to run (trust_remote_code). It is off for safety: "
            "allow it for this model only if you trust its authors."
        )
    safetensors = sorted(path.glob("*.safetensors"))
    if not safetensors:
        pickles = [p for pat in PICKLE_PATTERNS for p in path.glob(pat)]
        if not pickles:
            raise ModelLoadError(f"{path} has no weights (no *.safetensors file)")
        if not options.allow_pickle:
            raise PickleRefusedError(
                f"{path.name} has only pickle weights ({pickles[0].name}), which can run code when loaded. "
                "Allow pickle weights for this model to load them with weights_only=True."
            )
    for f in safetensors:
        check_safetensors(f)
    return config


def safetensors_header(f: Path) -> tuple[dict, int]:
    """The tensor table of a .safetensors file and the header's length, read without loading any tensor."""
    size = f.stat().st_size
    with f.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ModelLoadError(f"{f.name} is truncated or empty ({size} bytes)")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise ModelLoadError(f"{f.name} is truncated: its header alone needs {n} bytes")
        try:
            header = json.loads(fh.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ModelLoadError(f"{f.name} has a damaged header ({e})") from e
    header.pop("__metadata__", None)
    return header, n


def check_safetensors(f: Path) -> None:
    header, n = safetensors_header(f)
    end = max((v["data_offsets"][1] for v in header.values()), default=0)
    size = f.stat().st_size
    if 8 + n + end > size:
        raise ModelLoadError(f"{f.name} is truncated: {size:,} bytes on disk, {8 + n + end:,} expected")
