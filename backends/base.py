"""The backend interface: what every framework implementation offers the generation core.

A `Backend` loads a local Hugging Face-format folder into a `LoadedModel`: a tokenizer, a `ModelInfo`, a KV
cache, `forward` (logits of the last position), `trim`, and the array-ops shim the sampler runs on.
Resolving hub ids, caches and downloads is the core's job; this package never imports `app`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol


class ModelLoadError(RuntimeError):
    """A model that cannot be loaded; the message says why in words a person can act on.

    `opt_in` names the `LoadOptions` flag that would allow it (the user may choose to, per model).
    """

    opt_in: str | None = None


class RemoteCodeRefusedError(ModelLoadError):
    opt_in = "trust_remote_code"


class PickleRefusedError(ModelLoadError):
    opt_in = "allow_pickle"


@dataclass(frozen=True)
class LoadOptions:
    device: str | None = None  # torch: cuda / mps / cpu; None picks the best available
    dtype: str | None = None  # float32 / float16 / bfloat16; None picks per device
    quantize_bits: int | None = None  # mlx: quantize on load to 4 or 8 bits
    group_size: int = 64
    trust_remote_code: bool = False
    allow_pickle: bool = False
    fast: bool = True  # torch: the lean Llama forward where it applies (False: always transformers' forward)
    compile_len: int | None = None  # torch: opt-in static KV cache of this length + torch.compile'd decode step


@dataclass(frozen=True)
class ModelInfo:
    name: str
    backend: str
    architecture: str
    parameters: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    context_length: int
    dtype: str
    device: str
    quantization: str | None
    weight_bytes: int
    kv_bytes_per_token: int
    unquantized_bytes: int | None = None  # weights before quantize-on-load, to show what it saved

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class StreamDecoder(Protocol):
    def add(self, token_id: int) -> str: ...  # text completed by this token ('' while a character is partial)
    def flush(self) -> str: ...  # whatever is left at the end, never dropped


class Tokenizer(Protocol):
    eos_ids: frozenset[int]
    bos_id: int | None
    has_chat_template: bool

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...
    def token_text(self, token_id: int) -> str: ...  # one token for display
    def apply_chat_template(self, messages: Sequence[dict[str, str]]) -> str: ...
    def stream(self) -> StreamDecoder: ...


class LoadedModel(Protocol):
    tokenizer: Tokenizer
    info: ModelInfo
    ops: Any  # the ArrayOps of this framework

    def new_cache(self) -> Any: ...
    def forward(self, tokens: Sequence[int], cache: Any) -> Any: ...  # (V,) logits of the last position
    def trim(self, cache: Any, n: int) -> None: ...  # drop the last n positions
    def cache_bytes(self, cache: Any) -> int: ...
    def close(self) -> None: ...


class Backend(Protocol):
    name: str

    def available(self) -> bool: ...
    def load(self, path: Path, options: LoadOptions) -> LoadedModel: ...
