"""What a user would otherwise run, timed the same way as Logit Lab's loop: transformers `model.generate`
(with its KV cache) on torch, `mlx_lm.stream_generate` on MLX. Used by `logitlab bench` only.

Both produce exactly `n` tokens (end-of-text suppressed) and report, like our metrics: TTFT (call to first
token), prefill tokens/s (prompt ÷ TTFT) and decode tokens/s ((n - 1) ÷ first-to-last token time).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np


def _result(prompt_len: int, start: float, stamps: list[float]) -> dict[str, float]:
    """Raw times; the caller turns them into rates (app.core.metrics holds the one definition of a rate)."""
    return {"prompt_tokens": prompt_len, "ttft_s": stamps[0] - start, "decode_s": stamps[-1] - stamps[0],
            "tokens": len(stamps)}


def torch_generate(model: Any, prompt_ids: Sequence[int], n: int, temperature: float, top_p: float,
                   seed: int, cache: str | None = None) -> dict[str, float]:
    """`cache="static"`: transformers' static KV cache, with which its `generate` compiles the forward on CUDA
    (for every new length: call it at the length timed first)."""
    import torch

    class Stamps:  # a transformers streamer that only records when each token arrives
        def __init__(self) -> None:
            self.times: list[float] = []
            self.prompt_seen = False

        def put(self, _value: Any) -> None:
            if self.prompt_seen:
                self.times.append(time.perf_counter())
            self.prompt_seen = True

        def end(self) -> None:
            pass

    torch.manual_seed(seed)
    ids = torch.tensor([list(prompt_ids)], device=model.device)
    sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0} if temperature else {
        "do_sample": False}
    if cache:
        sampling["cache_implementation"] = cache
    stamps = Stamps()
    start = time.perf_counter()
    with torch.inference_mode():
        model.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                             streamer=stamps, pad_token_id=model.tokenizer.hf.eos_token_id, **sampling)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    return _result(len(prompt_ids), start, stamps.times)


def mlx_generate(model: Any, prompt_ids: Sequence[int], n: int, temperature: float, top_p: float,
                 seed: int) -> dict[str, float]:
    import mlx.core as mx
    from mlx_lm.generate import stream_generate
    from mlx_lm.sample_utils import make_sampler
    from mlx_lm.tokenizer_utils import TokenizerWrapper

    mx.random.seed(seed)
    tok = TokenizerWrapper(model.tokenizer.hf)
    tok._eos_token_ids = set()  # generate exactly n tokens, as our runs do
    sampler = make_sampler(temp=temperature, top_p=top_p if temperature else 0.0)
    stamps: list[float] = []
    start = time.perf_counter()
    for _ in stream_generate(model.model, tok, mx.array(list(prompt_ids)), max_tokens=n, sampler=sampler):
        stamps.append(time.perf_counter())
    return _result(len(prompt_ids), start, stamps)


def save_random_llama(out: Path, shape: dict[str, int], tokenizer_from: Path, dtype: str) -> Path:
    """A random-weight Llama of the given shape (transformers' initialization: normal(0, initializer_range)
    matrices, norms of ones; numpy's seeded draws, so no framework is needed), with the tokenizer of
    `tokenizer_from` (for benchmarks). Written one tensor at a time: memory holds one tensor, not the model."""
    from transformers import AutoTokenizer, LlamaConfig

    tok = AutoTokenizer.from_pretrained(str(tokenizer_from))
    config = LlamaConfig(vocab_size=32_000, max_position_embeddings=4096, tie_word_embeddings=False,
                         eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id,
                         architectures=["LlamaForCausalLM"], torch_dtype=dtype, **shape)
    h, inner, vocab = config.hidden_size, config.intermediate_size, config.vocab_size
    kv = config.num_key_value_heads * getattr(config, "head_dim", h // config.num_attention_heads)
    q = config.num_attention_heads * getattr(config, "head_dim", h // config.num_attention_heads)
    shapes = {"model.embed_tokens.weight": (vocab, h), "model.norm.weight": (h,), "lm_head.weight": (vocab, h)}
    for i in range(config.num_hidden_layers):
        at, mlp = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        shapes.update({at + "q_proj.weight": (q, h), at + "k_proj.weight": (kv, h), at + "v_proj.weight": (kv, h),
                       at + "o_proj.weight": (h, q), mlp + "gate_proj.weight": (inner, h),
                       mlp + "up_proj.weight": (inner, h), mlp + "down_proj.weight": (h, inner),
                       f"model.layers.{i}.input_layernorm.weight": (h,),
                       f"model.layers.{i}.post_attention_layernorm.weight": (h,)})
    rng = np.random.default_rng(0)
    out.mkdir(parents=True, exist_ok=True)

    def tensor(shape: tuple[int, ...]) -> np.ndarray:
        if len(shape) == 1:
            return np.ones(shape, dtype=np.float32)
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(config.initializer_range))

    write_safetensors(out / "model.safetensors", shapes, dtype, tensor)
    config.save_pretrained(out)
    tok.save_pretrained(out)
    return out


SAFETENSORS_DTYPES = {"float32": ("F32", 4), "float16": ("F16", 2), "bfloat16": ("BF16", 2)}


def write_safetensors(path: Path, shapes: dict[str, tuple[int, ...]], dtype: str, make: Any) -> None:
    """A safetensors file of the tensors `make(shape)` (float32) gives for `shapes`, stored as `dtype`, written one
    tensor at a time (the format: an 8-byte header length, a JSON header of offsets, then the data)."""
    import json
    import struct

    code, size = SAFETENSORS_DTYPES[dtype]
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes.items():
        n = int(np.prod(shape)) * size
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for shape in shapes.values():
            f.write(_stored(make(shape), dtype).tobytes())


def _stored(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values as `dtype`'s bytes (bfloat16: the top half of each float32, rounded to nearest even)."""
    if dtype == "float32":
        return x.astype("<f4")
    if dtype == "float16":
        return x.astype("<f2")
    bits = x.astype("<f4").view("<u4")
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")


def read_bandwidth(backend: str, device: str) -> float:
    """Bytes per second a plain reduction over 1 GiB reads on this device: the roofline of a decode step,
    which must read every weight once per token."""
    n = 256 * 2**20  # float32 elements
    if backend == "torch":
        import torch

        x = torch.ones(n, device=device)

        def read() -> None:
            x.sum().item()
    else:
        import mlx.core as mx

        x = mx.ones((n,))
        mx.eval(x)

        def read() -> None:
            mx.sum(x).item()

    read()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        read()
        best = min(best, time.perf_counter() - t)
    return n * 4 / best


def weight_bytes_read(backend: str, model: Any) -> int:
    """Bytes of weights one decode step reads: all of them, but only one row of an untied input embedding."""
    if backend == "torch":
        hf = model.model
        embed, head = hf.get_input_embeddings().weight, hf.get_output_embeddings().weight
        total = sum(p.numel() * p.element_size() for p in hf.parameters())
        return total if embed is head else total - embed.numel() * embed.element_size()
    from mlx.utils import tree_flatten

    leaves = dict(tree_flatten(model.model.parameters()))
    total = sum(v.nbytes for v in leaves.values())
    untied = any(k.startswith("lm_head.") for k in leaves)
    embed = sum(v.nbytes for k, v in leaves.items() if ".embed_tokens." in f".{k}")
    return total - embed if untied else total


def plain_model(backend: str, path: Path, ours: Any) -> Any:
    """The model as the baseline's user would load it. On torch a second, untouched copy straight from
    `from_pretrained` (ours re-lays the weights out for its own forward, and a Llama-family folder's is not
    transformers' model at all: backends/torch/lean.py); on MLX ours as is."""
    if backend != "torch":
        return ours
    from transformers import AutoModelForCausalLM

    dtype = next(ours.model.parameters()).dtype
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).to(ours.device).eval()
    return SimpleNamespace(model=hf, device=ours.device, tokenizer=ours.tokenizer)


def torch_generate_static(model: Any, prompt_ids: Sequence[int], n: int, temperature: float, top_p: float,
                          seed: int) -> dict[str, float]:
    return torch_generate(model, prompt_ids, n, temperature, top_p, seed, cache="static")


def baseline(backend: str, static: bool = False) -> Any:
    """The baseline's run; `static`: transformers' static-cache `generate` (torch only)."""
    if static:
        return torch_generate_static
    return {"torch": torch_generate, "mlx": mlx_generate}[backend]


BASELINE_NAMES = {"torch": "transformers model.generate", "mlx": "mlx_lm.stream_generate"}


@contextmanager
def watch_graph_skips(cuda: bool) -> Iterator[Any]:
    """On CUDA a `GraphSkips` watch of inductor's CUDA-graph skips while the block runs; elsewhere None."""
    if not cuda:
        yield None
        return
    from backends.torch.static import GraphSkips

    with GraphSkips() as watch:
        yield watch
