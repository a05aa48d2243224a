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
# A decoder's dimensions, each under the names architectures give it (Llama-style first, then GPT-2's, MPT's).
DIMENSIONS = {
    "layers": ("num_hidden_layers", "n_layer", "n_layers"),
    "heads": ("num_attention_heads", "n_head", "n_heads"),
    "kv_heads": ("num_key_value_heads", "n_kv_heads"),
    "head_dim": ("head_dim",),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "vocab": ("vocab_size",),
    "context": ("max_position_embeddings", "n_positions", "max_seq_len"),
}
DIM_WORDS = {"layers": "number of layers", "heads": "number of attention heads",
             "kv_heads": "number of key-value heads", "head_dim": "size of each attention head",
             "hidden": "hidden size", "vocab": "vocabulary size", "context": "context length"}
REQUIRED = ("layers", "hidden", "vocab")  # every decoder has these; a framework would silently use a default


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _token_ids(v: Any) -> bool:
    return (type(v) is int and v >= 0) or (isinstance(v, list) and all(type(x) is int and x >= 0 for x in v))


def _texts(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


# The other fields the frameworks read before any weight, each with the JSON type it must have where given (null:
# the framework's default), checked before the dimensions so that the message names the field that is wrong.
FIELDS: dict[str, tuple[Any, str]] = {
    "model_type": (lambda v: isinstance(v, str), 'text, the architecture\'s name (such as "llama")'),
    "architectures": (_texts, "a list of class names"),
    "auto_map": (lambda v: isinstance(v, dict), "an object"),
    "quantization": (lambda v: isinstance(v, dict), "an object"),
    "quantization_config": (lambda v: isinstance(v, dict), "an object"),
    "torch_dtype": (lambda v: isinstance(v, str), 'text (such as "bfloat16")'),
    "dtype": (lambda v: isinstance(v, str), 'text (such as "bfloat16")'),
    "hidden_act": (lambda v: isinstance(v, str), 'text (such as "silu")'),
    "tie_word_embeddings": (lambda v: isinstance(v, bool), "true or false"),
    "rope_theta": (_number, "a number"),
    "rms_norm_eps": (_number, "a number"),
    "layer_norm_eps": (_number, "a number"),
    "layer_norm_epsilon": (_number, "a number"),
    "rope_scaling": (lambda v: isinstance(v, dict), "an object"),
    "bos_token_id": (_token_ids, "a token id or a list of them"),
    "eos_token_id": (_token_ids, "a token id or a list of them"),
    "pad_token_id": (_token_ids, "a token id or a list of them"),
}


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
        heads, hidden = _dim(text, "heads"), _dim(text, "hidden")
        return cls(layers=_dim(text, "layers"), heads=heads, kv_heads=_dim(text, "kv_heads") or heads,
                   head_dim=_dim(text, "head_dim") or (hidden // heads if heads else 0), hidden=hidden,
                   vocab=_dim(text, "vocab"), context=_dim(text, "context"))

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
        config = json.loads(f.read_bytes())
    except ValueError as e:  # not JSON, not UTF-8
        raise ModelLoadError(f"{f} is not valid JSON ({e})") from e
    except RecursionError:
        raise ModelLoadError(f"{f} is not valid JSON (nested too deeply to be read)") from None
    check_config(config, f)
    return config


def check_config(config: Any, f: Path) -> None:
    """A decoder's dimensions as the frameworks need them, checked before any of them reads the file: whole
    numbers of at least 1 (layers, hidden size and vocabulary present), heads that divide the hidden size when
    the head size is derived from it, KV heads that divide the heads; the other fields frameworks read (`FIELDS`)
    of their JSON type. The message names the field and value."""
    if not isinstance(config, dict):
        raise ModelLoadError(f"{f} holds a JSON {_json_kind(config)}, not an object of named settings")
    _check_fields(config, f, "")
    text, prefix = config, ""
    if config.get("text_config") is not None:  # multimodal: the decoder's own config (its omissions: defaults)
        text, prefix = config["text_config"], "text_config."
        if not isinstance(text, dict):
            raise ModelLoadError(f"{f}: text_config is a JSON {_json_kind(text)}, not an object")
        _check_fields(text, f, prefix)
    required = REQUIRED if not prefix and "auto_map" not in config else ()  # remote code names its own fields
    for dim in DIMENSIONS:
        _check_dim(text, dim, dim in required, f, prefix)
    _check_ratios(ConfigShape.from_config(config), text, f, prefix)


def _check_fields(config: dict[str, Any], f: Path, prefix: str) -> None:
    for name, (check, kind) in FIELDS.items():
        value = config.get(name)
        if value is not None and not check(value):
            raise ModelLoadError(f"{f}: {prefix}{name} is {_shown(value)}; it must be {kind}")


def _shown(value: Any) -> str:
    """A value from the file as JSON, cut to one short line for a message."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (ValueError, RecursionError):
        text = f"a JSON {_json_kind(value)}"
    return text if len(text) <= 40 else text[:39] + "…"


def _check_dim(text: dict[str, Any], dim: str, required: bool, f: Path, prefix: str) -> None:
    names = DIMENSIONS[dim]
    name = next((n for n in names if text.get(n) is not None), None)  # null: the framework's default
    if name is None:
        if required:
            raise ModelLoadError(f"{f} has no {names[0]} (the {DIM_WORDS[dim]}), which a language model's "
                                 "config gives")
        return
    value = text[name]
    if type(value) is not int or value < 1:  # bool is an int subclass: `type` refuses it too
        raise ModelLoadError(f"{f}: {prefix}{name} is {_shown(value)}; the {DIM_WORDS[dim]} must be a whole "
                             "number of at least 1")


def _check_ratios(shape: ConfigShape, text: dict[str, Any], f: Path, prefix: str) -> None:
    if shape.heads and _dim(text, "head_dim") == 0 and shape.hidden % shape.heads:
        raise ModelLoadError(f"{f}: {prefix}hidden size {shape.hidden} is not divisible by its "
                             f"{shape.heads} attention heads")
    if shape.heads and shape.heads % shape.kv_heads:
        raise ModelLoadError(f"{f}: {prefix}{shape.heads} attention heads cannot be shared by "
                             f"{shape.kv_heads} key-value heads (the heads must be a multiple of them)")


def _dim(text: dict[str, Any], dim: str) -> int:
    """A dimension under the first of its names the config uses; 0 where it has none (or not a number)."""
    value = next((text[n] for n in DIMENSIONS[dim] if text.get(n) is not None), 0)
    return value if type(value) is int else 0


def _json_kind(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", int: "number", float: "number", dict: "object"}.get(
        type(value), "null")


def check_folder(path: Path, options: LoadOptions) -> dict:
    """config.json as a dict, after checking remote code, weight format and truncation."""
    config = read_config(path)
    if "auto_map" in config and not options.trust_remote_code:
        raise RemoteCodeRefusedError(
            f"{path.name} needs code from its repository to run, which is off for safety. If you trust its "
            "authors, allow it for this model only: --trust-remote-code on the command line, or the button "
            "“Allow its code for …” in the window."
        )
    safetensors = sorted(path.glob("*.safetensors"))
    if not safetensors:
        pickles = [p for pat in PICKLE_PATTERNS for p in path.glob(pat)]
        if not pickles:
            raise ModelLoadError(f"{path} has no weights (no *.safetensors file)")
        if not options.allow_pickle:
            raise PickleRefusedError(
                f"{path.name} has only pickle weights ({pickles[0].name}), which can run code when loaded. "
                "Allow them for this model to load them with weights_only=True: --allow-pickle on the command "
                "line, or the button “Allow pickle weights for …” in the window."
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
    wrong = _wrong_header(f) if "invalid type" in reason else None
    return f"{f.name} has a damaged header ({wrong or reason})"


def _wrong_header(f: Path) -> str | None:
    """What a well-formed JSON header holds instead of an object of tensor descriptions, if that is the fault."""
    with f.open("rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        try:
            header = json.loads(fh.read(size))
        except (ValueError, RecursionError):
            return None
    if not isinstance(header, dict):
        return f"a JSON {_json_kind(header)} where the object that lists its tensors should be"
    bad = next((k for k, v in header.items() if not isinstance(v, dict)), None)
    return None if bad is None else f"its entry {bad!r} is a JSON {_json_kind(header[bad])}, not an object"


def check_safetensors(f: Path) -> None:
    safetensors_header(f)
