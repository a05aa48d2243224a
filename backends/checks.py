"""Checks a model folder before any framework touches it, so a broken or unsafe folder gets a clear message.

No framework imports: reads config.json, the safetensors headers (through the `safetensors` library, which
maps the file and reads no tensor) and file names only. Enforces the safe defaults: no remote code without
opt-in, safetensors unless pickle weights are explicitly allowed. `ConfigShape` is the one reader of a
config's dimensions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open

from backends.base import LoadOptions, ModelLoadError, PickleRefusedError, RemoteCodeRefusedError

PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt")


@dataclass(frozen=True)
class ConfigShape:
    """A decoder's dimensions from its config (multimodal configs: their `text_config`); 0 where absent."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    vocab: int
    context: int

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ConfigShape:
        text = config.get("text_config") or config
        heads, hidden = text.get("num_attention_heads") or 0, text.get("hidden_size") or 0
        return cls(layers=text.get("num_hidden_layers") or 0, heads=heads,
                   kv_heads=text.get("num_key_value_heads") or heads,
                   head_dim=text.get("head_dim") or (hidden // heads if heads else 0), hidden=hidden,
                   vocab=text.get("vocab_size") or 0, context=text.get("max_position_embeddings") or 0)

    def kv_bytes_per_token(self, bytes_per_value: float) -> int:
        """Keys and values, every layer: 2 × layers × KV heads × head dim × bytes."""
        return int(2 * self.layers * self.kv_heads * self.head_dim * bytes_per_value)


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


def safetensors_header(f: Path) -> dict[str, dict[str, Any]]:
    """The tensor table of a .safetensors file, {name: {"dtype": "F32", "shape": [...]}}, read without loading
    any tensor. The library checks that the header is whole and that the file holds exactly what it lists."""
    try:
        with safe_open(f, framework="numpy") as st:
            slices = {name: st.get_slice(name) for name in st.keys()}  # noqa: SIM118 - a file handle, not iterable
            return {name: {"dtype": s.get_dtype(), "shape": s.get_shape()} for name, s in slices.items()}
    except SafetensorError as e:
        raise ModelLoadError(_safetensors_problem(f, str(e))) from e


def _safetensors_problem(f: Path, error: str) -> str:
    """The library's reason in words a person can act on: most damaged files are interrupted downloads."""
    reason = error.removeprefix("Error while deserializing header: ")
    kind = reason.lower().replace(" ", "").replace("_", "")  # 0.4-0.7 name the kind: "MetadataIncompleteBuffer"
    size = f.stat().st_size
    if kind.startswith("headertoosmall"):
        return f"{f.name} is truncated or empty ({size:,} bytes)"
    if kind.startswith(("invalidheaderlength", "incompletemetadata", "metadataincompletebuffer")):
        return (f"{f.name} is truncated: its {size:,} bytes on disk do not hold what its header lists "
                "(an interrupted download?)")
    return f"{f.name} has a damaged header ({reason})"


def check_safetensors(f: Path) -> None:
    safetensors_header(f)
