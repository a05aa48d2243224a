"""The compiled decode step of `FastLlama`, as gpt-fast builds it: a module that owns the weights and, per batch
size, a static KV cache as its own buffers, written in place at a position tensor.

The compiled call's only inputs are the step's token ids (B, 1) and its position (a 0-d tensor); no KV tensor is
an argument, so nothing the graph writes is an input, and on CUDA inductor captures the whole step in one CUDA
graph (`mode="reduce-overhead"`). A `FastCache` decoding through a step is bound to its buffers (its lists hold
the buffers themselves); the cache bound there before is handed its own copy first. Batch sizes outside
`BATCH_SIZES` are not compiled: `FastLlama` decides when a step runs here, this module only how.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch

from backends.base import CompileHook, CompileNote

BATCH_SIZES = (1, 2, 4, 8)  # each compiled (and on CUDA captured) once, on first use
CPU_SIZES = (1,)  # on a CPU (see `CompiledSteps`)
CPU_MODE = "max-autotune"  # on a CPU: its weights frozen into constants get prepacked GEMMs
RECOMPILE_LIMIT = 64
USER_CACHE_DIR = os.environ.get("TORCHINDUCTOR_CACHE_DIR")  # read before torch's inductor sets its default there


class LayerKV(torch.nn.Module):
    """One layer's keys and values for `rows` rows over a fixed number of positions: (rows, kv_heads, length,
    head_dim) buffers, updated in place (gpt-fast's `KVCache`)."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        # zeros, not empty: the step attends over the whole buffer, masked past `pos`, and a masked-out NaN left
        # in uninitialized memory still poisons the sum (0 * NaN)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write (rows, kv_heads, 1, head_dim) `k`, `v` at position `pos` (1,); the whole buffers."""
        self.k.index_copy_(2, pos, k)
        self.v.index_copy_(2, pos, v)
        return self.k, self.v


class Decoder(Protocol):
    """What a step needs of the model: its weights and the step's arithmetic over `LayerKV` modules."""

    w: torch.nn.Module

    def decode_static(self, w: Any, ids: torch.Tensor, pos: torch.Tensor, kv: Any) -> torch.Tensor: ...


class StaticStep(torch.nn.Module):
    """`Decoder.decode_static` for `rows` rows as a module that owns the weights (frozen into constants on a
    CPU) and the KV buffers: `forward(ids (rows, 1), pos ())` -> float32 logits (rows, V)."""

    def __init__(self, model: Decoder, rows: int, layers: int, kv_shape: tuple[int, int, int],
                 dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.w, self.model = model.w, model
        self.kv = torch.nn.ModuleList(LayerKV((rows, *kv_shape), dtype, device) for _ in range(layers))
        self._owner: weakref.ref | None = None  # the cache whose lists hold these buffers

    def forward(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return self.model.decode_static(self.w, ids, pos, self.kv)

    def bound(self, cache: Any) -> bool:
        return bool(cache.k) and cache.k[0] is self.kv[0].k

    def bind(self, cache: Any) -> None:
        """Make `cache` (its lists of per-layer K and V) hold these buffers, with its content; the cache bound
        before keeps its content in copies of its own."""
        if self.bound(cache):
            return
        old = self._owner() if self._owner is not None else None
        if old is not None and self.bound(old):
            old.k[:], old.v[:] = [t.clone() for t in old.k], [t.clone() for t in old.v]
        for layer, k, v in zip(self.kv, cache.k, cache.v, strict=True):
            layer.k.copy_(k)
            layer.v.copy_(v)
        cache.k[:], cache.v[:] = [layer.k for layer in self.kv], [layer.v for layer in self.kv]
        self._owner = weakref.ref(cache)


class CompiledSteps:
    """One `StaticStep` per batch size, each compiled on first use (`mode`: "reduce-overhead" on CUDA, CUDA
    graphs, as gpt-fast; "max-autotune" on a CPU, where weights frozen into constants get prepacked GEMMs)."""

    def __init__(self, model: Decoder, layers: int, kv_shape: tuple[int, int, int], dtype: torch.dtype,
                 device: torch.device) -> None:
        self.model, self.layers, self.kv_shape, self.dtype, self.device = model, layers, kv_shape, dtype, device
        self.mode = "reduce-overhead" if device.type == "cuda" else CPU_MODE
        # on a CPU a batch's step compiled with max-autotune measured no faster than eager (0.1B, 8 rows: 44 vs
        # 58 tok/s, a loaded VM) and costs a minute's compile per size: only one row is compiled there
        self.sizes = BATCH_SIZES if device.type == "cuda" else CPU_SIZES
        self.steps: dict[int, StaticStep] = {}
        self.calls: dict[int, Callable[..., torch.Tensor]] = {}
        self.positions = torch.arange(kv_shape[1], device=device)  # pos p is a view: no host-to-device copy
        self.on_compile: CompileHook | None = None  # told before and after each batch size's first (compiling) call
        configure_inductor(freeze=device.type == "cpu")

    def step(self, rows: int) -> StaticStep:
        if rows not in self.steps:
            self.steps[rows] = StaticStep(self.model, rows, self.layers, self.kv_shape, self.dtype, self.device)
        return self.steps[rows]

    def run(self, ids: torch.Tensor, pos: int, cache: Any) -> torch.Tensor:
        """The compiled step on `cache` (bound to the step of its batch size): ids (B, 1) at position `pos`."""
        rows = ids.shape[0]
        step = self.step(rows)
        step.bind(cache)
        if rows not in self.calls:
            self.calls[rows] = torch.compile(step, mode=self.mode, fullgraph=True, dynamic=False)
            return self._first_call(rows, ids, pos)
        return self._call(rows, ids, pos)

    def _first_call(self, rows: int, ids: torch.Tensor, pos: int) -> torch.Tensor:
        """The call that compiles, `on_compile` told as it starts and when it is done (with its seconds)."""
        if self.on_compile is not None:
            self.on_compile(CompileNote(rows))
        t = time.perf_counter()
        with warnings.catch_warnings():  # compiling, torch warns about its own internals (TypedStorage, jit):
            warnings.simplefilter("ignore")  # nothing a user can act on, printed over their output
            out = self._call(rows, ids, pos)
        if self.on_compile is not None:
            self.on_compile(CompileNote(rows, time.perf_counter() - t))
        return out

    def _call(self, rows: int, ids: torch.Tensor, pos: int) -> torch.Tensor:
        if self.device.type == "cuda":  # a new replay: the last one's outputs may be overwritten (we cloned them)
            torch.compiler.cudagraph_mark_step_begin()
            return self.calls[rows](ids, self.positions[pos]).clone()
        return self.calls[rows](ids, self.positions[pos])


def compile_cache_dir() -> Path | None:
    """Where torch keeps its compiled kernels and graphs between runs: the platform's cache folder, unless the
    user set TORCHINDUCTOR_CACHE_DIR; None (torch's own temporary folder) without platformdirs (a bare checkout)."""
    if USER_CACHE_DIR:
        return Path(USER_CACHE_DIR)
    try:
        from platformdirs import user_cache_dir
    except ImportError:
        return None
    return Path(user_cache_dir("logitlab")) / "torchinductor"


def usable_cache_dir(folder: Path | None) -> Path | None:
    """`folder`, made if need be; None (torch's own temporary folder, a warning said) where it cannot be: a file in
    its place, a folder not ours to write. Compiling goes on either way, only not cached for the next start."""
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.access(folder, os.W_OK | os.X_OK):
            return folder
        why = "not writable"
    except OSError as e:  # FileExistsError: a file where the folder should be; NotADirectoryError: one above it
        why = e.strerror or type(e).__name__
    logging.getLogger(__name__).warning(f"logitlab: warning: cannot keep compiled steps in {folder} ({why}); "
                                        "compiling without a cache kept between runs")
    return None


def configure_inductor(freeze: bool) -> None:
    """Compile caches kept between runs (a second start compiles from them), weights frozen into constants where
    `freeze` (a CPU: its max-autotune then picks its own micro-GEMM; its prepacked weights keep the FX graph cache
    from storing the graph, the autotuning is still cached), and torch's tables kept off the user's terminal."""
    import torch._inductor.config as inductor
    from torch._inductor import select_algorithm

    folder = usable_cache_dir(compile_cache_dir())
    if folder is not None:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    elif USER_CACHE_DIR:  # the user's folder cannot be used: torch would fail on it as well
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    inductor.fx_graph_cache = True
    # every batch size, model loaded and sampler setting is one more compile of the same code (8 by default)
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, RECOMPILE_LIMIT)
    inductor.freezing = freeze
    select_algorithm.PRINT_AUTOTUNE = False  # its table goes to stderr, over the user's output
    if hasattr(inductor, "max_autotune_report_choices_stats"):  # torch 2.13: its choices' stats too
        inductor.max_autotune_report_choices_stats = False


SKIP_LOGGER = "torch._inductor.cudagraph_utils.__cudagraphs"  # where inductor says why it skipped a CUDA graph


class GraphSkips(logging.Handler):
    """Inductor's CUDA-graph skips while attached, by the phase they happened in (`phase`, set by the caller):
    each one is logged once with its reason, and counted in torch's counters (which `unattributed` checks)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.phase = ""
        self.reasons: list[tuple[str, str]] = []  # (phase, reason)
        self._start = _skip_counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.reasons.append((self.phase, record.getMessage().splitlines()[0]))

    def __enter__(self) -> GraphSkips:
        logging.getLogger(SKIP_LOGGER).addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger(SKIP_LOGGER).removeHandler(self)

    def count(self, phase: str) -> int:
        return sum(p == phase for p, _ in self.reasons)

    @property
    def unattributed(self) -> int:
        """Skips torch counted that no log line named (a torch that logs them elsewhere): reasons unknown."""
        return max(0, _skip_counter() - self._start - len(self.reasons))


def _skip_counter() -> int:
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])


def compile_sampler(fn: Callable[..., tuple[torch.Tensor, ...]],
                    device: torch.device) -> Callable[..., tuple[torch.Tensor, ...]]:
    """The sampler's device step (arrays in, a flat tuple of arrays out) compiled whole: on CUDA one more CUDA
    graph. Its outputs are copied out at once: a graph's replay overwrites the last one's, and a batch calls it
    once per row before the host reads any."""
    cuda = device.type == "cuda"
    compiled = torch.compile(fn, mode="reduce-overhead" if cuda else "default", fullgraph=True, dynamic=False)
    limit = getattr(torch._dynamo.exc, "FailOnRecompileLimitHit", ())  # (torch before 2.6: it cannot be hit)

    def call(*arrays: torch.Tensor) -> tuple[torch.Tensor, ...]:
        nonlocal compiled
        if cuda:
            torch.compiler.cudagraph_mark_step_begin()
        try:
            out = compiled(*arrays)
        except limit:  # compiled for as many settings as torch allows: this one runs eager
            compiled = fn
            out = fn(*arrays)
        return tuple(t.clone() for t in out) if cuda and compiled is not fn else out

    return call
