"""The backend interface: what every framework implementation offers the generation core.

Every opened model is a `Model`: a tokenizer, a `ModelInfo` and the `Capabilities` it declares, which the core
reads instead of asking what kind of model it has. A `Backend` loads a local Hugging Face-format folder into a
`LoadedModel`, a `Model` with a local forward pass: KV caches that can be trimmed to a prefix and forked into
rows, a batched `forward`, and the array-ops shim the sampler runs on; its `Layers` read one position inside it (the
logit lens, attention). A server's model (`backends.remote.backend`) is a `Model` without one: it samples by itself
and reports what it drew. Resolving hub ids, caches and downloads is the core's job; this package never imports
`app`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

Positions = Literal["last", "all"]


class ModelLoadError(RuntimeError):
    """A model that cannot be loaded; the message says why in words a person can act on.

    `opt_in` names the `LoadOptions` flag that would allow it (the user may choose to, per model).
    """

    opt_in: str | None = None


def first_line(e: BaseException) -> str:
    """An exception's first line, for a load error's one line (its type's name where it says nothing)."""
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


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
    threads: int | None = None  # torch: CPU threads; None: one for a small model, else torch's default


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
    threads: int | None = None  # torch: the CPU threads its ops run on

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CompileNote:
    """A model compiling its decode step for `rows` rows: `seconds` is None as it starts, then how long it took."""

    rows: int
    seconds: float | None = None


CompileHook = Callable[[CompileNote], None]  # told of each compile, on the model's thread (a model's `on_compile`)


def watch_compiles(model: Any, hook: CompileHook | None) -> bool:
    """Have `hook` told of `model`'s decode-step compiles (None: nobody); False where it compiles none (a model
    loaded without `compile_len`, a framework that does not compile: no `watch_compiles` method)."""
    watch = getattr(model, "watch_compiles", None)
    return bool(watch is not None and watch(hook))


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
    # `options`: the template's own switches, passed to it as variables (e.g. {"enable_thinking": False}); a
    # template that does not read one renders as without it
    def apply_chat_template(self, messages: Sequence[dict[str, str]],
                            options: Mapping[str, Any] | None = None) -> str: ...
    def stream(self) -> StreamDecoder: ...
    # the tokenizers-library JSON a grammar engine reads (None: none here, a server's or a slow tokenizer)
    def vocabulary_json(self) -> str | None: ...


@dataclass(frozen=True)
class Capabilities:
    """What a model can do, declared by its class: the generator and the views read these, never its kind."""

    forward: bool  # a local forward pass over KV caches (a `LoadedModel`); else it samples by itself (a server)
    trim_fork: bool  # its caches are trimmed to a prefix (reused by the next run) and forked into rows (n > 1)
    resample: bool  # its steps record raw logits, so a step is re-sampled under new settings exactly
    tokenize: bool  # its tokenizer encodes here (token counts, token-id prompts, a prompt's surprisal)
    reported_top_n: int | None = None  # no local forward: the most candidates a step reports (None: not known)
    layers: bool = False  # its layers are exposed (`Layers`): the logit lens and attention at a position
    steer: bool = False  # its residual stream takes added vectors (`Steerable`): steering


LOCAL = Capabilities(forward=True, trim_fork=True, resample=True, tokenize=True, layers=True, steer=True)
SERVER = Capabilities(forward=False, trim_fork=False, resample=False, tokenize=False)


class Model(Protocol):
    """What every opened model offers, local or on a server."""

    tokenizer: Tokenizer
    info: ModelInfo

    @property
    def capabilities(self) -> Capabilities: ...
    def close(self) -> None: ...


class LoadedModel(Model, Protocol):
    """A loaded model and its caches (`capabilities.forward`). Everything runs on the thread that loaded it.

    A cache holds B rows of equal length (the batch size is set by the first `forward` into it; feeding it
    another batch size is a ValueError). `forward` takes tokens of shape (B, T): a nested list, a numpy integer
    array or this framework's own integer array (what the sampler drew, still on the device: it is not read
    back to the host). It returns float32 logits, (B, V) for `positions="last"` and (B, T, V) for "all", as
    the array type of `ops` (numpy for torch on a CPU, a torch tensor on a GPU, an mx.array on MLX). Lazy or
    asynchronous frameworks return before the logits are computed.
    """

    ops: Any  # the ArrayOps of this framework

    def new_cache(self) -> Any: ...  # empty, batch size not yet set
    def forward(self, tokens: Any, cache: Any, positions: Positions = "last") -> Any: ...  # appends T to the cache
    def cache_len(self, cache: Any) -> int: ...  # positions each row holds
    def trim(self, cache: Any, n: int) -> None: ...  # drop the last n positions of every row, in place
    def fork(self, cache: Any, n: int) -> Any: ...  # a new cache: n copies of a batch-1 cache, which stays usable
    def reorder(self, cache: Any, rows: Sequence[int]) -> None: ...  # in place: row i becomes old row rows[i]
    def cache_bytes(self, cache: Any) -> int: ...


@dataclass(frozen=True)
class LayerLens:
    """One position's residual stream read through the model's own final norm and output head, layer by layer: row
    0 the embeddings, row i layer i's output (the last row is the model's logits). numpy arrays."""

    top_ids: Any  # (L+1, K) int32, by probability descending (ties: the lower id first)
    top_logprobs: Any  # (L+1, K) float32, log-softmax over the whole vocabulary
    target_logprob: Any  # (L+1,) float32 of the target token (NaN: no target)
    target_rank: Any  # (L+1,) int64, 0-based, among the whole vocabulary (-1: no target)
    lse: Any  # (L+1,) float32, each row's logsumexp: a token's logit is its log-probability + lse


@dataclass(frozen=True)
class LayerAttention:
    """One position's attention over its context, per layer and query head: `weights` (L, H, T) float32 numpy, T the
    position + 1 (a position a sliding window hides from it: 0). Query head h reads KV head h // (H // kv_heads)."""

    weights: Any
    kv_heads: int
    windows: tuple[int | None, ...]  # per layer: its sliding window in positions (None: the whole context)


class Layers(Protocol):
    """A local model's layers at one position (`capabilities.layers`). `lens` and `attention` forward `token` into
    `cache` (appended, as `forward` does) and read that position; `watch_layers(True)` keeps every forward's last
    position's residual stream, (B, L+1, hidden) `layer_states()`, which `layer_logits` reads through the final norm
    and head for (B, K) token ids only: (B, L+1, K) float32 in `ops`' array type, as `forward`'s logits (the live
    lens)."""

    def lens(self, cache: Any, token: int, target: int | None, top_k: int) -> LayerLens: ...
    def attention(self, cache: Any, token: int) -> LayerAttention: ...
    def watch_layers(self, on: bool) -> None: ...
    def layer_states(self) -> Any: ...
    def layer_logits(self, states: Any, ids: Any) -> Any: ...


@dataclass(frozen=True)
class Steer:
    """What the forwards that follow add to the residual stream: `adds[L]`, (B, hidden) float32 numpy, to the output
    of decoder layer L (0-based, at every position; llama.cpp's control vectors number layers so: `direction.L`), row
    b of the batch getting row b. A layer not named gets nothing: its add is skipped, not made with zeros."""

    adds: Mapping[int, Any]


class Steerable(Protocol):
    """A local model whose residual stream takes added vectors (`capabilities.steer`): `steer(None)` ends it."""

    def steer(self, steer: Steer | None) -> None: ...


class Backend(Protocol):
    """A framework that loads a local folder. (A server's backend `connect`s instead: see `backends.BACKENDS`.)"""

    name: str
    # The thread that ran this framework must never exit (the model thread parks it instead): with mlx 0.32.4 a
    # thread that ran MLX sometimes aborts the process as it exits.
    park_thread_on_exit: bool

    def load(self, path: Path, options: LoadOptions) -> LoadedModel: ...


def check_forward(shape: Sequence[int], positions: str) -> None:
    """The arguments every `forward` accepts: (B, T) tokens with B, T >= 1, and "last" or "all"."""
    if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
        raise ValueError(f"tokens must be (batch, positions), at least one of each; got shape {tuple(shape)}")
    if positions not in ("last", "all"):
        raise ValueError(f'positions must be "last" or "all", got {positions!r}')


def check_rows(rows: int, batch: int) -> None:
    """A cache of `rows` rows (0: none yet) takes a forward of `batch` rows only if they are equal."""
    if rows and rows != batch:
        raise ValueError(f"a {rows}-row cache cannot take a batch of {batch}: start a new cache, or fork one")


def check_fork(rows: int) -> None:
    if rows > 1:
        raise ValueError(f"fork copies a 1-row cache; this one has {rows} rows")
