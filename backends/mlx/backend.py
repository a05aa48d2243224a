"""MLX / mlx-lm backend: mlx-lm's models and prompt caches (plain Llama and Qwen folders built without importing
mlx-lm's package or transformers: `lean.py`; others through mlx-lm's loader); quantize on load (4 or 8 bits) if asked.

Imported lazily (it imports mlx). MLX streams are thread-local: load, forward and free on the one thread
that owns the model (the core's model thread does exactly that). mlx-lm's models take (B, T) natively; a
cache is mlx-lm's list of per-layer caches, whose arrays carry the batch on axis 0.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from backends.base import (
    LOCAL,
    LoadOptions,
    ModelInfo,
    ModelLoadError,
    Positions,
    check_fork,
    check_forward,
    check_rows,
)
from backends.checks import ConfigShape, check_folder
from backends.gguf import is_gguf
from backends.hf.lean import LeanTokenizer, open_tokenizer
from backends.hf.tokenizer import HFTokenizer
from backends.mlx.inside import MlxLayers
from backends.mlx.lean import load_lean
from backends.mlx.steer import MlxSteering

T = TypeVar("T")
DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}


class MlxOps:
    """The sampler's array ops on mlx arrays (1-D); lazy until `sync`. The compiled step runs on the model's
    own stream, like its forward."""

    name = "mlx"
    overlap = True

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream if stream is not None else mx.default_stream(mx.default_device())
        # On the CPU build numpy's vector maths is far faster (exp: ~35x) and each small MLX op is a task
        # queued behind the forward: the device runs the pipeline and draws, and hands its stage rows to the
        # host, which makes the trace's record on numpy. On a GPU stream the whole step, record included, is one
        # compiled graph on the device.
        self.host_record = self.stream.device == mx.cpu
        self._helper: ThreadPoolExecutor | None = None  # `beside`'s thread, made at its first use

    def f32(self, x: Any) -> mx.array:
        return x.astype(mx.float32) if isinstance(x, mx.array) else mx.array(np.asarray(x, dtype=np.float32))

    def numpy(self, x: mx.array) -> np.ndarray:
        return np.array(x)

    def sync(self, arrays: list[mx.array]) -> None:
        mx.eval(*arrays)

    def compile(self, fn: Any) -> Any:
        compiled = mx.compile(fn)  # one fused graph per step instead of ~40 small ops built from Python

        def on_stream(*args: Any) -> Any:
            with mx.stream(self.stream):
                return compiled(*args)

        return on_stream

    def vmap(self, fn: Any) -> Any:  # B rows in one step (`backends.ops.vmap`); compiled after, as one graph
        return mx.vmap(fn)

    def start(self, arrays: list[mx.array]) -> None:
        mx.async_eval(*arrays)

    def beside(self, fn: Callable[[], T]) -> Future[T]:
        """`fn` (numpy only: no MLX call) run on a helper thread, on a CPU stream: there `start` holds this thread
        until the device has nearly run what it queued (MLX caps the tasks in flight), with the GIL released, so
        the step's record is made while the next forward runs rather than after it. Elsewhere, run here now."""
        if not self.host_record:
            done: Future[T] = Future()
            done.set_result(fn())
            return done
        if self._helper is None:
            self._helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="logitlab-record")
        return self._helper.submit(fn)

    def where(self, cond: mx.array, a: Any, b: Any) -> mx.array:
        return mx.where(cond, a, b)

    def cumsum(self, x: mx.array) -> mx.array:
        return mx.cumsum(x)

    def count_cumsum(self, mask: mx.array) -> mx.array:
        return mx.cumsum(mask.astype(mx.int32))

    def sort_desc(self, x: mx.array) -> mx.array:
        return mx.sort(x)[::-1]

    def kth_largest(self, x: mx.array, k: int) -> mx.array:
        return mx.min(mx.topk(x, k))  # a partition, not a sort: O(vocabulary)

    def count_above(self, sorted_desc: mx.array, v: mx.array) -> mx.array:
        return mx.sum(sorted_desc[None, :] > v[:, None], axis=1)  # (N, V) compares: one fused kernel on a GPU

    def topk(self, x: mx.array, k: int) -> tuple[mx.array, mx.array]:
        k = min(k, x.shape[0])
        part = mx.argpartition(-x, k - 1)[:k] if k < x.shape[0] else mx.arange(x.shape[0])
        idx = mx.sort(part)  # ids ascending, then a stable sort by value: ties keep the lower id first
        idx = idx[mx.argsort(-x[idx])]
        return x[idx], idx

    def take(self, x: mx.array, idx: mx.array) -> mx.array:
        return x[idx]

    def scatter(self, x: mx.array, idx: mx.array, values: mx.array) -> mx.array:
        out = mx.array(x)
        out[idx] = values
        return out

    exp = staticmethod(mx.exp)
    log = staticmethod(mx.log)
    isfinite = staticmethod(mx.isfinite)
    max = staticmethod(mx.max)
    sum = staticmethod(mx.sum)

    def minimum(self, x: mx.array, v: float) -> mx.array:
        return mx.minimum(x, v)

    def maximum(self, x: mx.array, v: float) -> mx.array:
        return mx.maximum(x, v)

    def arange(self, n: int) -> mx.array:
        return mx.arange(n)

    def zeros(self, n: int) -> mx.array:
        return mx.zeros(n, dtype=mx.float32)

    def stack(self, xs: list[Any]) -> mx.array:
        return mx.stack([x if isinstance(x, mx.array) else mx.array(x) for x in xs])

    def survivors(self, x: mx.array, line: Any = None) -> None:
        return None  # one shape whatever a cut left: the stages work on the whole vector (and compile, and map)


class MlxModel(MlxLayers, MlxSteering):  # (the lens and attention: mlx/inside.py; steering: mlx/steer.py)
    capabilities = LOCAL

    def __init__(self, model: nn.Module, tokenizer: HFTokenizer | LeanTokenizer, info: ModelInfo) -> None:
        self.model, self.tokenizer, self.info = model, tokenizer, info
        # A stream of our own, as mlx-lm's generation_stream: async_eval then overlaps with Python's work
        # instead of running on the calling thread (streams are thread-local: made on the model thread).
        self.stream = mx.new_stream(mx.default_device())
        self.ops = MlxOps(self.stream)

    def new_cache(self) -> list[Any]:
        from mlx_lm.models.cache import make_prompt_cache

        return make_prompt_cache(self.model)

    def forward(self, tokens: Any, cache: list[Any], positions: Positions = "last") -> mx.array:
        ids = tokens if isinstance(tokens, mx.array) else mx.array(np.asarray(tokens, dtype=np.int32))
        check_forward(ids.shape, positions)
        check_rows(_rows(cache), ids.shape[0])
        with mx.stream(self.stream):
            if positions == "last" and ids.shape[1] > 1:  # as mlx-lm: fill the cache, skip the head's other rows
                self.model(ids[:, :-1], cache=cache)
                mx.eval([c.state for c in cache])
                ids = ids[:, -1:]
            logits = self.model(ids, cache=cache)  # (B, T, V)
            return logits.astype(mx.float32) if positions == "all" else logits[:, -1].astype(mx.float32)

    def cache_len(self, cache: list[Any]) -> int:
        return next((c.offset for c in cache if hasattr(c, "offset")), 0)

    def trim(self, cache: list[Any], n: int) -> None:
        from mlx_lm.models.cache import trim_prompt_cache

        if n > 0:
            trim_prompt_cache(cache, n)

    def fork(self, cache: list[Any], n: int) -> list[Any]:
        """Fresh arrays for every row: mlx-lm's caches write into their arrays by slice assignment, so a fork
        that shared an array object with its parent would write into the parent."""
        check_fork(_rows(cache))
        with mx.stream(self.stream):
            forked = [_fork_value(c, n) for c in cache]
            mx.eval([c.state for c in forked])
        return forked

    def reorder(self, cache: list[Any], rows: Sequence[int]) -> None:
        """Row i becomes the old row `rows[i]`, in place (repeats allowed: beam search); nothing is recomputed."""
        idx = mx.array(np.asarray(rows, dtype=np.int32))
        with mx.stream(self.stream):
            for i, c in enumerate(cache):
                cache[i] = _map_arrays(c, lambda a: a[idx])
            mx.eval([c.state for c in cache])

    def cache_bytes(self, cache: list[Any]) -> int:
        return sum(c.nbytes for c in cache)

    def close(self) -> None:
        # Dropping the references frees the weights. mx.clear_cache() here would make the process abort at
        # exit ("terminate called without an active exception", mlx 0.32.4) when called off the main thread.
        self.model = None


class MlxBackend:
    name = "mlx"
    park_thread_on_exit = True  # mlx 0.32.4: a thread that ran MLX sometimes aborts the process as it exits

    def load(self, path: Path, options: LoadOptions) -> MlxModel:
        if is_gguf(path):  # mlx-lm loads safetensors folders only (its gguf module writes GGUF, it does not read it)
            raise ModelLoadError(f"{path.name} is a GGUF file, which the MLX backend cannot load: open it with the "
                                 "torch backend (--backend torch, or torch in the model bar)")
        config = check_folder(path, options)
        if options.allow_pickle and not list(path.glob("*.safetensors")):
            raise ModelLoadError(f"{path.name} has only pickle weights; the MLX backend reads safetensors only")
        tokenizer = open_tokenizer(path, options)
        try:
            model, config = load_lean(path) or _load_model(path, options)
        except (ValueError, KeyError, FileNotFoundError, ImportError) as e:
            raise ModelLoadError(f"MLX cannot load {path.name}: {str(e).splitlines()[0]}") from e
        dtype = pick_dtype(options.dtype, config)
        if dtype is not None:
            model.set_dtype(dtype)
        quant = config.get("quantization")
        before = None
        if options.quantize_bits and not quant:
            before = _nbytes(model)
            quant = quantize(model, options.quantize_bits, options.group_size)
        mx.eval(model.parameters())
        info = make_info(path, config, model, quant)
        return MlxModel(model, tokenizer, replace(info, unquantized_bytes=before))


def _load_model(path: Path, options: LoadOptions) -> tuple[nn.Module, dict]:
    """mlx-lm's own loader (every architecture and quantization it knows; it imports transformers)."""
    from mlx_lm.utils import load_model

    return load_model(path, trust_remote_code=options.trust_remote_code)


def pick_dtype(requested: str | None, config: dict) -> Any:
    if requested:
        if requested not in DTYPES:
            raise ModelLoadError(f"dtype must be one of {', '.join(DTYPES)}, got {requested!r}")
        return DTYPES[requested]
    # MLX's CPU build (Linux) is fastest and exact in float32; an Apple GPU keeps the file's dtype.
    return mx.float32 if mx.default_device() == mx.cpu and not config.get("quantization") else None


def quantize(model: nn.Module, bits: int, group_size: int) -> dict:
    if bits not in (4, 8):
        raise ModelLoadError(f"quantize to 4 or 8 bits, not {bits}")

    def quantizable(_: str, m: nn.Module) -> bool:
        w = getattr(m, "weight", None)
        return hasattr(m, "to_quantized") and w is not None and w.shape[-1] % group_size == 0

    nn.quantize(model, group_size=group_size, bits=bits, class_predicate=quantizable)
    return {"bits": bits, "group_size": group_size}


def make_info(path: Path, config: dict, model: nn.Module, quant: dict | None) -> ModelInfo:
    from mlx.utils import tree_flatten

    shape = ConfigShape.from_config(config)
    leaves = tree_flatten(model.parameters())
    weight_bytes = sum(v.nbytes for _, v in leaves)
    params = parameter_count(leaves, quant)
    act = next((v.dtype for k, v in leaves if k.endswith("norm.weight")), mx.float32)
    return ModelInfo(
        name=path.name, backend="mlx", architecture=(config.get("architectures") or [config.get("model_type")])[0],
        parameters=params, layers=shape.layers, heads=shape.heads, kv_heads=shape.kv_heads,
        head_dim=shape.head_dim, hidden_size=shape.hidden, vocab_size=shape.vocab, context_length=shape.context,
        dtype=str(act).removeprefix("mlx.core."), device=str(mx.default_device()),
        quantization=f"{quant['bits']}-bit, group {quant['group_size']}" if quant else None,
        weight_bytes=weight_bytes, kv_bytes_per_token=shape.kv_bytes_per_token(act.size),
    )


def _rows(cache: list[Any]) -> int:
    """Rows the cache holds (0 while empty), read from its first layer's keys (quantized: a tuple)."""
    keys = getattr(cache[0], "keys", None) if cache else None
    keys = keys[0] if isinstance(keys, tuple) else keys
    return keys.shape[0] if isinstance(keys, mx.array) else 0


def _map_arrays(v: Any, fn: Any) -> Any:
    """`v` with `fn` applied to every array in it, walking into lists, tuples, dicts and mlx-lm caches; any other
    attribute (offsets, sizes) is kept as is."""
    if isinstance(v, mx.array):
        return fn(v)
    if isinstance(v, (list, tuple)):
        return type(v)(_map_arrays(x, fn) for x in v)
    if isinstance(v, dict):
        return {k: _map_arrays(x, fn) for k, x in v.items()}
    if hasattr(v, "is_trimmable"):  # an mlx-lm cache (of one layer, or a list of them)
        out = copy.copy(v)
        for k, x in vars(v).items():
            setattr(out, k, _map_arrays(x, fn))
        return out
    return v


def _fork_value(v: Any, n: int) -> Any:
    """`v` with every array repeated n times along the batch axis (a copy even for n = 1), walking into lists,
    tuples, dicts and nested caches; any other attribute (offsets, sizes) is copied as is."""
    return _map_arrays(v, lambda a: mx.repeat(a, n, axis=0))


def _nbytes(model: nn.Module) -> int:
    from mlx.utils import tree_flatten

    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def parameter_count(leaves: list[tuple[str, mx.array]], quant: dict | None) -> int:
    """Logical parameters: packed quantized weights count as 32 / bits values per element."""
    total = 0
    for k, v in leaves:
        if k.endswith((".scales", ".biases")):
            continue
        total += v.size * (32 // quant["bits"]) if quant and v.dtype == mx.uint32 else v.size
    return total
