"""llama.cpp backend (llama-cpp-python's C API): a GGUF file's forward on its own weights, quantized or not, on the
CPU, or Metal / CUDA where the build has them; Logit Lab's sampler and record run on the logits (`LLAMA_OPS`). One
context per model, its unified KV memory shared by up to `SEQUENCES` rows (`sequences.py`); the file's tokenizer, or
the HF one beside it. Imported lazily. llama.cpp's log goes to `_log`, which prints nothing and keeps its last
errors: a file llama.cpp cannot load is refused with the reason it gave.
"""

from __future__ import annotations

import ctypes
import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp

from backends.base import Capabilities, LoadOptions, ModelInfo, ModelLoadError, Positions, Tokenizer
from backends.checks import ConfigShape
from backends.gguf import GgufFile, is_gguf, llama_cpp_problem, read_gguf
from backends.llamacpp.engine import Engine
from backends.llamacpp.lazy import LLAMA_OPS, Pending
from backends.llamacpp.sequences import SeqCache, Sequences
from backends.llamacpp.tokenizer import LlamaTokenizer
from backends.threads import choose_threads

SEQUENCES = 128  # rows a context holds at once: 64 samples (--n's most) beside the prompt's, beams and their copies
MAX_CELLS = 4096  # the context's KV cells (shared by every row) when the model was trained on more
N_BATCH = 512  # tokens in one llama_decode; longer inputs go in chunks
FLOAT_TYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}  # the others are quantizations
LOG_ERROR = 4  # ggml's GGML_LOG_LEVEL_ERROR (llama-cpp-python's own level table predates it)
_errors: deque[str] = deque(maxlen=4)  # llama.cpp's last error lines
_initialized = False


@llama_cpp.llama_log_callback
def _log(level: int, text: bytes, _user: Any) -> None:
    if level == LOG_ERROR:
        _errors.append(text.decode("utf-8", errors="replace").strip())


class LlamaCppModel:
    """A GGUF file in llama.cpp, behind the `LoadedModel` interface (caches are `SeqCache`s of its context)."""

    # a local forward with trim and fork; its layers and residual stream are llama.cpp's own (not exposed here)
    capabilities = Capabilities(forward=True, trim_fork=True, resample=True, tokenize=True)
    ops = LLAMA_OPS  # numpy over logits that may still be on their way (`lazy.py`)

    def __init__(self, model: Any, ctx: Any, tokenizer: Tokenizer, info: ModelInfo, n_vocab: int) -> None:
        self._model, self._ctx, self.tokenizer, self.info = model, ctx, tokenizer, info
        self._seqs = Sequences(llama_cpp.llama_get_memory(ctx), SEQUENCES)
        self._engine = Engine(ctx, self._seqs, n_vocab, N_BATCH, info.context_length)

    def new_cache(self) -> SeqCache:
        return self._seqs.new_cache()

    def forward(self, tokens: Any, cache: SeqCache, positions: Positions = "last") -> Pending:
        return self._engine.forward(tokens, cache, positions)

    def cache_len(self, cache: SeqCache) -> int:
        return cache.length  # (counted as a forward is queued: no wait for it)

    def trim(self, cache: SeqCache, n: int) -> None:
        self._engine.wait()
        self._seqs.trim(cache, n)

    def fork(self, cache: SeqCache, n: int) -> SeqCache:
        self._engine.wait()
        return self._seqs.fork(cache, n)

    def reorder(self, cache: SeqCache, rows: Sequence[int]) -> None:
        self._engine.wait()
        self._seqs.reorder(cache, rows)

    def cache_bytes(self, cache: SeqCache) -> int:
        """What the rows attend over, as if each held its own copy (a fork's rows share their prompt's cells)."""
        return cache.length * len(cache.seqs) * self.info.kv_bytes_per_token

    def close(self) -> None:
        if self._ctx is not None:
            self._engine.close()
            llama_cpp.llama_free(self._ctx)
            llama_cpp.llama_model_free(self._model)
        self._ctx = self._model = None


class LlamaCppBackend:
    name = "llamacpp"
    park_thread_on_exit = False

    def load(self, path: Path, options: LoadOptions) -> LlamaCppModel:
        check_options(path, options)
        gguf = read_gguf(path)  # a damaged or truncated file: one line naming it, before llama.cpp sees it
        if problem := llama_cpp_problem(gguf):
            raise ModelLoadError(problem)
        _init()
        model = _load_model(path, gguf, options)
        try:
            tokenizer = pick_tokenizer(path, options)
            threads = choose_threads(llama_cpp.llama_model_n_params(model), options.threads,
                                     max(1, (os.cpu_count() or 2) // 2))
            ctx = _new_context(model, threads)
        except BaseException:
            llama_cpp.llama_model_free(model)
            raise
        info = make_info(path, gguf, model, ctx, threads, options)
        return LlamaCppModel(model, ctx, tokenizer, info, llama_cpp.llama_vocab_n_tokens(
            llama_cpp.llama_model_get_vocab(model)))


def check_options(path: Path, options: LoadOptions) -> None:
    if not is_gguf(path):
        raise ModelLoadError(f"{path.name} is not a .gguf file: the llama.cpp backend opens GGUF files (a model "
                             "folder opens on torch or MLX)")
    if options.dtype:
        raise ModelLoadError(f"llama.cpp runs a GGUF file in the types it was written in; a dtype ({options.dtype}) "
                             "is for torch and MLX: leave it on auto, or open another quantization of the file")
    if options.quantize_bits:
        raise ModelLoadError("quantize-on-load is MLX's; llama.cpp runs the file's own quantization (open a Q4 or "
                             "Q8 GGUF file for one)")
    if options.device in ("cuda", "mps") and not llama_cpp.llama_supports_gpu_offload():
        raise ModelLoadError(f"device {options.device!r} was asked for, but this llama-cpp-python build runs on the "
                             "CPU only: install a Metal or CUDA build (see the README)")


def _init() -> None:
    global _initialized
    if not _initialized:
        llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))  # (process-wide: llama.cpp has one log)
        llama_cpp.llama_backend_init()
        _initialized = True


def _load_model(path: Path, gguf: GgufFile, options: LoadOptions) -> Any:
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0 if options.device == "cpu" else 0x7FFFFFFF  # all layers where the build has a GPU
    _errors.clear()
    model = llama_cpp.llama_model_load_from_file(str(path).encode("utf-8"), params)
    if not model:
        said = next((e for e in _errors if "error loading model:" in e), _errors[0] if _errors else "no reason given")
        why = said.rsplit("error loading model: ", 1)[-1]
        raise ModelLoadError(f"llama.cpp (llama-cpp-python {llama_cpp.__version__}) cannot load {path.name}, a "
                             f"{gguf.architecture!r:.40} model: {why}")
    return model


def _new_context(model: Any, threads: int) -> Any:
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = min(llama_cpp.llama_model_n_ctx_train(model) or MAX_CELLS, MAX_CELLS)
    params.n_batch = params.n_ubatch = N_BATCH
    params.n_seq_max = SEQUENCES
    params.kv_unified = True  # one set of cells for every row: a fork tags them, it copies nothing
    # Flash attention's result depends on where a row's cells lie (f16 partial sums): a fork, a trim or a beam
    # would then differ from a fresh prefill by ~1e-3. Without it, they agree to float rounding.
    params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    params.n_threads = params.n_threads_batch = threads
    params.no_perf = True
    ctx = llama_cpp.llama_init_from_model(model, params)
    if not ctx:
        raise ModelLoadError(f"llama.cpp could not make a context of {params.n_ctx:,} tokens for this model "
                             "(not enough memory?)")
    return ctx


def pick_tokenizer(path: Path, options: LoadOptions) -> Tokenizer:
    """The file's own tokenizer; the Hugging Face one where the GGUF's folder holds tokenizer.json (its exact
    pre-tokenizer, which llama.cpp may only approximate) and transformers is installed."""
    own = LlamaTokenizer(path)
    if not (path.parent / "tokenizer.json").is_file():
        return own
    try:
        from backends.hf.tokenizer import load_tokenizer

        hf = load_tokenizer(path.parent, options)
    except ImportError:  # transformers is not installed: the file's own
        return own
    if len(hf.hf) > own.n_vocab:
        raise ModelLoadError(f"the tokenizer.json beside {path.name} has {len(hf.hf):,} tokens and the model "
                             f"{own.n_vocab:,}: it belongs to another model (move it away to use the file's own)")
    return hf


def file_type(gguf: GgufFile) -> str:
    """The file's type as llama.cpp's quantizer names it (Q4_K_M, Q8_0, F16…), else its most common tensor type."""
    names = {v: k.split("_", 3)[-1] for k, v in vars(llama_cpp).items() if k.startswith("LLAMA_FTYPE_")}
    return names.get(gguf.metadata.get("general.file_type"), gguf.weight_type)


def make_info(path: Path, gguf: GgufFile, model: Any, ctx: Any, threads: int, options: LoadOptions) -> ModelInfo:
    """The model card; a quantized file's dtype is what llama.cpp computes in (float32), its quantization the
    file's type."""
    shape = ConfigShape.from_config(gguf.config())
    weights = file_type(gguf)
    on_gpu = options.device != "cpu" and llama_cpp.llama_supports_gpu_offload()
    return ModelInfo(
        name=path.name, backend="llamacpp", architecture=gguf.architecture,
        parameters=llama_cpp.llama_model_n_params(model), layers=shape.layers, heads=shape.heads,
        kv_heads=shape.kv_heads, head_dim=shape.head_dim, hidden_size=shape.hidden,
        vocab_size=llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model)),
        context_length=llama_cpp.llama_n_ctx(ctx), dtype=FLOAT_TYPES.get(weights, "float32"),
        device="gpu" if on_gpu else "cpu", quantization=None if weights in FLOAT_TYPES else weights,
        weight_bytes=llama_cpp.llama_model_size(model), kv_bytes_per_token=shape.kv_bytes_per_token(2),
        threads=threads,
    )
