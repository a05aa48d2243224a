"""PyTorch / transformers backend: `AutoModelForCausalLM` with its `DynamicCache`; Llama-family models run the lean
`FastLlama` forward with its `FastCache`, their folders built without transformers (`lean.LeanLlama`); device
cuda > mps > cpu.

Imported lazily (it imports torch). Only safetensors load unless the user opts in to pickle weights, which
then load with `weights_only=True`; `trust_remote_code` is passed explicitly (False unless opted in).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from backends.base import (
    LOCAL,
    CompileHook,
    LoadOptions,
    ModelInfo,
    ModelLoadError,
    Positions,
    check_fork,
    check_forward,
    check_rows,
    first_line,
)
from backends.checks import ConfigShape, check_folder
from backends.gguf import check_gguf, is_gguf
from backends.hf.lean import LeanTokenizer, open_tokenizer
from backends.hf.tokenizer import HFTokenizer
from backends.numpy_rows import NUMPY_ROWS
from backends.threads import choose_threads
from backends.torch.fast import FastLlama, supports
from backends.torch.host import HostCopies
from backends.torch.inside import TorchLayers
from backends.torch.lean import load_lean
from backends.torch.static import compile_sampler
from backends.torch.steer import TorchSteering

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DEFAULT_THREADS = torch.get_num_threads()  # torch's own choice (physical cores), before any rule set one


class TorchOps:
    """The sampler's array ops on torch tensors (1-D), on the model's device."""

    name = "torch"

    def __init__(self, device: torch.device, compile_steps: bool = False) -> None:
        self.device = device
        self.compile_steps = compile_steps  # the sampler's step compiled too (with --compile on a GPU)
        self.overlap = device.type != "cpu"  # CUDA and MPS kernels run asynchronously
        self.host_record = False  # on the CPU the whole sampler already runs on numpy
        self.copies = HostCopies(device)  # the record read through pinned memory, the device not waited for

    def f32(self, x: Any) -> torch.Tensor:
        return self.copies.upload(x, torch.float32)

    def numpy(self, x: torch.Tensor) -> np.ndarray:
        return self.copies.read(x)

    def sync(self, arrays: list[torch.Tensor]) -> None:
        pass  # reading waits for what it reads

    def compile(self, fn: Any) -> Any:
        # uncompiled unless asked: torch.compile's warm-up (per sampler setting) costs more than a short run saves
        return compile_sampler(fn, self.device) if self.compile_steps else fn

    def vmap(self, fn: Any) -> Any:  # B rows in one step (`backends.ops.vmap`); compiled after, as one graph
        return torch.func.vmap(fn)

    def start(self, arrays: list[torch.Tensor]) -> None:
        self.copies.start(arrays)  # the kernels are already queued; their host copies follow them

    def where(self, cond: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
        return torch.where(cond, a, b)

    def cumsum(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, 0)

    def count_cumsum(self, mask: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(mask.to(torch.int64), 0)

    def sort_desc(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, descending=True).values

    def kth_largest(self, x: torch.Tensor, k: int) -> torch.Tensor:
        return torch.topk(x, k).values[-1]

    def count_above(self, sorted_desc: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.searchsorted(-sorted_desc, -v, side="left")  # ascending after negation: the count of > v

    def topk(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        _, i = torch.topk(x, min(k, x.shape[0]))
        i = torch.sort(i).values  # ids ascending, then a stable sort by value: ties keep the lower id first
        order = torch.sort(x[i], descending=True, stable=True).indices
        return x[i[order]], i[order]

    def take(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        if x.dim() != 1:
            return x[idx]
        return x.index_select(0, idx.reshape(-1)).reshape(idx.shape)  # torch.compile traces it; x[0-d idx] not

    def scatter(self, x: torch.Tensor, idx: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        out[idx] = values.to(out.dtype)
        return out

    exp = staticmethod(torch.exp)
    log = staticmethod(torch.log)
    isfinite = staticmethod(torch.isfinite)

    def max(self, x: torch.Tensor, axis: int | None = None) -> torch.Tensor:
        return torch.max(x) if axis is None else torch.amax(x, dim=axis)

    def sum(self, x: torch.Tensor, axis: int | None = None) -> torch.Tensor:
        return torch.sum(x) if axis is None else torch.sum(x, dim=axis)

    def minimum(self, x: torch.Tensor, v: float) -> torch.Tensor:
        return torch.clamp(x, max=v)

    def maximum(self, x: torch.Tensor, v: float) -> torch.Tensor:
        return torch.clamp(x, min=v)

    def arange(self, n: int) -> torch.Tensor:
        return torch.arange(n, device=self.device)

    def zeros(self, n: int) -> torch.Tensor:
        return torch.zeros(n, dtype=torch.float32, device=self.device)

    def stack(self, xs: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack([self.copies.upload(x) for x in xs])

    def survivors(self, x: torch.Tensor, line: Any = None) -> None:
        return None  # one shape whatever a cut left: the stages work on the whole vector (and compile, and map)


def pick_device(requested: str | None) -> torch.device:
    if requested:
        if requested == "cuda" and not torch.cuda.is_available():
            raise ModelLoadError("device 'cuda' was asked for, but torch sees no CUDA GPU")
        if requested == "mps" and not torch.backends.mps.is_available():
            raise ModelLoadError("device 'mps' was asked for, but this machine has no Apple GPU")
        return torch.device(requested)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def pick_dtype(requested: str | None, device: torch.device) -> torch.dtype:
    if requested:
        if requested not in DTYPES:
            raise ModelLoadError(f"dtype must be one of {', '.join(DTYPES)}, got {requested!r}")
        return DTYPES[requested]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float16 if device.type == "mps" else torch.float32


def cache_argument(model: Any) -> str:
    """The name under which this transformers takes the KV cache: `cache` from 5.x's rename on (where
    `past_key_values` is deprecated), `past_key_values` before it."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class TorchModel(TorchLayers, TorchSteering):  # (the lens and attention: torch/inside.py; steering: torch/steer.py)
    """transformers' model behind the backend interface; Llama-family models run the lean `FastLlama` forward.

    On the CPU the sampler runs on numpy over a zero-copy view of the logits: for one vector per step numpy's
    per-call cost is a fraction of torch's, and the numbers are the same (tests hold both to the reference).
    """

    capabilities = LOCAL

    def __init__(self, model: Any, tokenizer: HFTokenizer | LeanTokenizer, info: ModelInfo, device: torch.device,
                 options: LoadOptions) -> None:
        self.model, self.tokenizer, self.info, self.device = model, tokenizer, info, device
        self.fast = FastLlama(model, options.compile_len) if options.fast and supports(model) else None
        compiled = self.fast is not None and self.fast.compiled is not None
        cuda_steps = compiled and device.type == "cuda"
        self.ops = NUMPY_ROWS if device.type == "cpu" else TorchOps(device, compile_steps=cuda_steps)
        self._cache_arg = cache_argument(model)

    def new_cache(self) -> Any:
        if self.fast is not None:
            return self.fast.new_cache()
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    @torch.inference_mode()
    def forward(self, tokens: Any, cache: Any, positions: Positions = "last") -> Any:
        if self.fast is not None:
            logits = self.fast.forward(tokens, cache, positions)
        else:
            ids = torch.as_tensor(tokens, dtype=torch.long, device=self.device)
            check_forward(ids.shape, positions)
            check_rows(_rows(cache), ids.shape[0])
            out = self.model(input_ids=ids, **{self._cache_arg: cache}, use_cache=True,
                             logits_to_keep=0 if positions == "all" else 1)
            logits = out.logits.float() if positions == "all" else out.logits[:, -1].float()
        return logits if isinstance(self.ops, TorchOps) else logits.numpy()  # (the CPU's sampler runs on numpy)

    def cache_len(self, cache: Any) -> int:
        return cache.get_seq_length()

    def trim(self, cache: Any, n: int) -> None:
        if n > 0:
            if self.fast is not None:
                self.fast.trim(cache, n)
            else:  # a negative count removes that many positions (a positive one is refused by transformers 5)
                cache.crop(-min(n, cache.get_seq_length()))

    @torch.inference_mode()
    def fork(self, cache: Any, n: int) -> Any:
        if self.fast is not None:
            return self.fast.fork(cache, n)
        check_fork(_rows(cache))
        forked = copy.deepcopy(cache)  # every layer's tensors copied, whatever kind of layer it is
        if n > 1:
            forked.batch_repeat_interleave(n)
        return forked

    @torch.inference_mode()
    def reorder(self, cache: Any, rows: Sequence[int]) -> None:
        """Row i becomes the old row `rows[i]` (repeats allowed: beam search), without computing anything again."""
        idx = torch.as_tensor(list(rows), dtype=torch.long, device=self.device)
        if self.fast is not None:
            self.fast.reorder(cache, idx)
        else:
            cache.reorder_cache(idx)

    def watch_compiles(self, hook: CompileHook | None) -> bool:
        """Have `hook` told of the compiled decode step's compiles (None: nobody); False where none compiles."""
        steps = self.fast.compiled if self.fast is not None else None
        if steps is not None:
            steps.on_compile = hook
        return steps is not None

    def cache_bytes(self, cache: Any) -> int:
        if self.fast is not None:
            return self.fast.cache_bytes(cache)
        total = 0
        for layer in getattr(cache, "layers", []):
            for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                if isinstance(t, torch.Tensor):
                    total += t.numel() * t.element_size()
        return total

    def close(self) -> None:
        self.model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


class TorchBackend:
    name = "torch"
    park_thread_on_exit = False

    def load(self, path: Path, options: LoadOptions) -> TorchModel:
        """A Llama-family folder builds without transformers (`lean.load_lean`) when the lean forward will run it;
        anything else, and a GGUF file, through transformers."""
        gguf = is_gguf(path)
        config = check_gguf(path).config() if gguf else check_folder(path, options)
        device = pick_device(options.device)
        dtype = pick_dtype(options.dtype, device)
        tokenizer = load_gguf_tokenizer(path) if gguf else open_tokenizer(path, options)
        lean = load_lean(path, config, dtype) if options.fast and not gguf else None
        model = lean if lean is not None else load_weights(path, dtype, options)
        model.to(device).eval()
        info = replace(make_info(path, config, model, device, dtype), threads=set_threads(model, options.threads))
        return TorchModel(model, tokenizer, info, device, options)


def load_weights(path: Path, dtype: torch.dtype, options: LoadOptions) -> Any:
    """transformers' model: from a folder, or from a GGUF file (its config read from the file, every tensor
    dequantized, then cast to `dtype`)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the window shows its own progress; the terminal stays clean

    folder, args = (path.parent, {"gguf_file": path.name}) if is_gguf(path) else (path, {
        "trust_remote_code": options.trust_remote_code, "use_safetensors": not options.allow_pickle or None})
    from huggingface_hub.errors import StrictDataclassError

    try:
        return AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype, **args)
    except StrictDataclassError as e:  # transformers read config.json and refused it
        raise ModelLoadError(f"{folder / 'config.json'}: {first_line(e.__cause__ or e)}") from e
    except Exception as e:
        raise ModelLoadError(f"cannot load the weights in {path}: {first_line(e)}") from e


def load_gguf_tokenizer(path: Path) -> HFTokenizer:
    """The tokenizer a GGUF file describes in its metadata (transformers rebuilds it as a fast tokenizer)."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    try:
        return HFTokenizer(AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name))
    except Exception as e:
        raise ModelLoadError(f"cannot build the tokenizer of {path.name}: {first_line(e)}") from e


def set_threads(model: Any, requested: int | None) -> int:
    """Set torch's CPU threads (process-wide) for this model: `requested`, else the rule of `backends.threads`."""
    n = choose_threads(sum(p.numel() for p in model.parameters()), requested, DEFAULT_THREADS)
    torch.set_num_threads(n)
    return n


def make_info(path: Path, config: dict, model: Any, device: torch.device, dtype: torch.dtype) -> ModelInfo:
    shape = ConfigShape.from_config(model.config.to_dict())  # the loaded config: its defaults filled in
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return ModelInfo(
        name=path.name, backend="torch", architecture=(config.get("architectures") or [model.config.model_type])[0],
        parameters=params, layers=shape.layers, heads=shape.heads, kv_heads=shape.kv_heads,
        head_dim=shape.head_dim, hidden_size=shape.hidden, vocab_size=shape.vocab, context_length=shape.context,
        dtype=str(dtype).removeprefix("torch."), device=str(device), quantization=None, weight_bytes=weight_bytes,
        kv_bytes_per_token=shape.kv_bytes_per_token(dtype.itemsize),
    )


def _rows(cache: Any) -> int:
    """Rows a transformers cache holds (0 while empty)."""
    keys = next((getattr(layer, "keys", None) for layer in getattr(cache, "layers", [])), None)
    return keys.shape[0] if isinstance(keys, torch.Tensor) and keys.numel() else 0
