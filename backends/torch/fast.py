"""A lean forward for Llama-family models on torch, over the transformers model's own weights (as gpt-fast).

Per decode step transformers spends most of its time outside the arithmetic on small models (module calls,
mask building, `torch.cat` into a growing cache). Here: one preallocated KV buffer per layer, (B, kv_heads,
capacity, head_dim), that grows by doubling, RoPE tables taken from the model's own rotary module (so every
RoPE variant it supports is right), SDPA with grouped KV heads, and nothing else. The rows of a batch are of
equal length (no padding): activations run as (B·T, hidden), attention per row. Used only for plain decoder
configs (`supports`); everything else runs through transformers. Tested for logit parity against transformers.

Weights are multiplied as `x @ w` with w (in, out); how they are stored depends on the dtype (`input_major_for`).
float32 on a CPU: re-laid input-major, (in, out) contiguous, where MKL's products of 4 rows or more (`--n`, a
speculative verify, a prefill chunk) run faster than in `F.linear`'s layout and one row runs level with it.
Half precisions, and any dtype on a GPU: left in `F.linear`'s (out, in) layout (a transposed view, no copy), which
oneDNN's bf16 / f16 products read 1.2-1.3x faster at every row count (`benchmarks/layout.py`). The transformers
modules are re-pointed at views of the same storage, so the weights exist once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the usual name

from backends.base import Positions, check_fork, check_forward, check_rows
from backends.torch.static import CompiledSteps

FAST_TYPES = {"llama", "mistral", "qwen2"}


def supports(model: Any) -> bool:
    c = model.config
    return (c.model_type in FAST_TYPES and getattr(c, "hidden_act", "silu") == "silu"
            and not getattr(c, "mlp_bias", False)  # (the lean forward's MLP has no biases)
            and not getattr(c, "sliding_window", None) and hasattr(model, "model")
            and hasattr(model.model, "rotary_emb"))


def input_major_for(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether to re-lay the weights out input-major (a copy): on a CPU in float32 only (see the module's
    docstring for the measurements)."""
    return device.type == "cpu" and dtype == torch.float32


class Weights(torch.nn.Module):
    """Tensors as frozen parameters of a module: compiled through a module, torch.compile's freezing turns
    them into constants (prepacked GEMMs on a CPU), which tensors reached through a plain object never get."""

    def __init__(self, **tensors: torch.Tensor | torch.nn.Module | None) -> None:
        super().__init__()
        for name, t in tensors.items():
            setattr(self, name, torch.nn.Parameter(t, requires_grad=False) if isinstance(t, torch.Tensor) else t)


@dataclass
class FastCache:
    k: list[torch.Tensor] = field(default_factory=list)  # per layer (B, kv_heads, capacity, head_dim)
    v: list[torch.Tensor] = field(default_factory=list)
    pos: int = 0  # positions every row holds; the buffers past it are stale

    def get_seq_length(self) -> int:
        return self.pos

    @property
    def rows(self) -> int:
        return self.k[0].shape[0] if self.k else 0  # 0: no forward yet, the batch size is not set


class FastLlama:
    """`compile_len`: opt in to a static KV cache of that many positions and a torch.compile'd decode step per
    batch size of `torch_static.BATCH_SIZES` on CUDA (CUDA graphs; one row on a CPU), as gpt-fast does; the first
    steps then pay for compiling."""

    def __init__(self, hf: Any, compile_len: int | None = None, input_major: bool | None = None) -> None:
        c = hf.config
        self.hf = hf
        self.eps = c.rms_norm_eps
        self.heads = c.num_attention_heads
        self.kv_heads = getattr(c, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // self.heads
        self.max_len = c.max_position_embeddings
        m = hf.model
        w0 = m.embed_tokens.weight
        self.input_major = input_major_for(w0.device, w0.dtype) if input_major is None else input_major
        tied = hf.lm_head.weight is m.embed_tokens.weight
        lm_head = self._fuse([hf.lm_head])
        if tied:
            m.embed_tokens.weight = hf.lm_head.weight  # still one tensor, now a view of the new layout
        embed = m.embed_tokens.weight
        self.scaling = m.layers[0].self_attn.scaling
        cos, sin = self._rope_tables(m, embed.device, embed.dtype)
        layers = torch.nn.ModuleList(self._layer(layer) for layer in m.layers)
        self.w = Weights(embed=embed, norm=m.norm.weight, lm_head=lm_head, cos=cos, sin=sin, layers=layers)
        self.device, self.dtype = embed.device, embed.dtype
        self.static_len = min(compile_len, self.max_len) if compile_len else None
        # On a CPU weights become constants and max-autotune picks its own micro-GEMM for the one-row products
        # (43 vs 20 GB/s read, measured on the 0.1B's matrices). On a GPU: CUDA graphs (`torch_static`).
        self.compiled = CompiledSteps(self, len(layers), (self.kv_heads, self.static_len, self.head_dim),
                                      self.dtype, self.device) if self.static_len else None
        self.watch = False  # keep each forward's last position's residual stream (the live lens: torch/inside.py)
        self.states: torch.Tensor | None = None  # (B, layers + 1, hidden): the embeddings, then each layer's output
        self.adds: dict[int, torch.Tensor] = {}  # layer -> (B, 1, hidden) added to its output (torch/steer.py)

    def _layer(self, layer: Any) -> Weights:
        a, mlp = layer.self_attn, layer.mlp
        biases = [p.bias for p in (a.q_proj, a.k_proj, a.v_proj)]
        qkv_bias = torch.cat(biases) if all(b is not None for b in biases) else None
        return Weights(
            ln1=layer.input_layernorm.weight, ln2=layer.post_attention_layernorm.weight,
            qkv=self._fuse([a.q_proj, a.k_proj, a.v_proj]), qkv_bias=qkv_bias,
            o=self._fuse([a.o_proj]), o_bias=a.o_proj.bias,
            gate_up=self._fuse([mlp.gate_proj, mlp.up_proj]), down=self._fuse([mlp.down_proj]),
        )

    def _fuse(self, linears: list[Any]) -> torch.Tensor:
        """The linears' weights side by side as one (in, out) matrix; each linear then holds a view of it."""
        w = torch.cat([m.weight for m in linears]) if len(linears) > 1 else linears[0].weight
        fused = w.detach().t().contiguous() if self.input_major else w.detach().t()
        start = 0
        for m in linears:
            n = m.weight.shape[0]
            m.weight = torch.nn.Parameter(fused[:, start : start + n].t(), requires_grad=False)
            start += n
        return fused

    def _rope_tables(self, m: Any, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for every position, from the model's own rotary module (scaling variants included)."""
        pos = torch.arange(self.max_len, device=device)[None]
        probe = torch.zeros(1, device=device, dtype=dtype)
        cos, sin = m.rotary_emb(probe, pos)
        return cos[0], sin[0]  # (max_len, head_dim)

    def new_cache(self) -> FastCache:
        return FastCache()

    def _reserve(self, cache: FastCache, rows: int, need: int) -> None:
        check_rows(cache.rows, rows)
        cap = cache.k[0].shape[2] if cache.k else 0
        if need <= cap:
            return
        if self.static_len and need <= self.static_len:
            new = self.static_len  # exactly: the compiled step runs only on buffers of the static length
        else:
            new = min(self.max_len, max(need, 2 * cap, 256))
        shape = (rows, self.kv_heads, new, self.head_dim)
        for store in (cache.k, cache.v):
            for i in range(len(self.w.layers)):
                # zeros, not empty: the static step attends over the whole buffer, masked past `pos`, and a
                # masked-out NaN left in uninitialized memory still poisons the sum (0 * NaN)
                buf = torch.zeros(shape, device=self.device, dtype=self.dtype)
                if store and i < len(store):
                    buf[:, :, : cache.pos] = store[i][:, :, : cache.pos]
                    store[i] = buf
                else:
                    store.append(buf)

    @torch.inference_mode()
    def forward(self, tokens: Any, cache: FastCache, positions: Positions = "last") -> torch.Tensor:
        """(B, T) tokens -> float32 logits, (B, V) for "last", (B, T, V) for "all"."""
        ids = torch.as_tensor(tokens, dtype=torch.long, device=self.device)
        check_forward(ids.shape, positions)
        (b, t), p = ids.shape, cache.pos
        if p + t > self.max_len:
            raise ValueError(f"the context holds {self.max_len} tokens")
        self._reserve(cache, b, p + t)
        if (self.compiled is not None and t == 1 and b in self.compiled.sizes and positions == "last"
                and cache.k[0].shape[2] == self.static_len and not self.watch
                and not self.adds):  # other shapes would compile again: eager
            cache.pos = p + 1
            return self.compiled.run(ids, p, cache)
        w = self.w
        x = F.embedding(ids.reshape(-1), w.embed)  # (b * t, hidden)
        cos, sin = w.cos[p : p + t], w.sin[p : p + t]
        mask = None
        if t > 1:  # prefill: causal over the new tokens, everything before them visible
            mask = torch.ones(t, p + t, dtype=torch.bool, device=x.device).tril(p)
        states = [x.view(b, t, -1)[:, -1]] if self.watch else None
        for i, layer in enumerate(w.layers):
            q, k, v = self._qkv(layer, F.rms_norm(x, (x.shape[-1],), layer.ln1, self.eps), b, cos, sin)
            cache.k[i][:, :, p : p + t] = k
            cache.v[i][:, :, p : p + t] = v
            x = x + self._attend(layer, q, cache.k[i][:, :, : p + t], cache.v[i][:, :, : p + t], mask)
            x = x + self._mlp(layer, x)
            if i in self.adds:
                x = (x.view(b, t, -1) + self.adds[i]).view(b * t, -1)
            if states is not None:
                states.append(x.view(b, t, -1)[:, -1])
        if states is not None:
            self.states = torch.stack(states, 1)
        cache.pos = p + t
        if positions == "last":
            x = x.view(b, t, -1)[:, -1]  # (b, hidden)
        logits = (F.rms_norm(x, (x.shape[-1],), w.norm, self.eps) @ w.lm_head).float()
        return logits.view(b, t, -1) if positions == "all" else logits

    def decode_static(self, w: Weights, ids: torch.Tensor, pos: torch.Tensor,
                      kv: torch.nn.ModuleList) -> torch.Tensor:
        """One decode step of (B, 1) tokens at position `pos` (0-d) over the `LayerKV` buffers of a static step
        (attending over all of them, masked past `pos`): fixed shapes, so it compiles once. Returns (B, V)."""
        b = ids.shape[0]
        x = F.embedding(ids.reshape(-1), w.embed)  # (b, hidden)
        cos, sin = w.cos.index_select(0, pos[None]), w.sin.index_select(0, pos[None])
        mask = (torch.arange(self.static_len, device=ids.device) <= pos)[None]
        for layer, layer_kv in zip(w.layers, kv, strict=True):
            q, k, v = self._qkv(layer, F.rms_norm(x, (x.shape[-1],), layer.ln1, self.eps), b, cos, sin)
            keys, values = layer_kv.update(pos[None], k, v)
            x = x + self._attend(layer, q, keys, values, mask)
            x = x + self._mlp(layer, x)
        return (F.rms_norm(x, (x.shape[-1],), w.norm, self.eps) @ w.lm_head).float()

    def _qkv(self, layer: Weights, h: torch.Tensor, b: int, cos: torch.Tensor,
             sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(b * t, hidden) rows -> q (b, heads, t, head_dim), k and v (b, kv_heads, t, head_dim)."""
        t, hd, nq, nkv = h.shape[0] // b, self.head_dim, self.heads, self.kv_heads
        q, k, v = _mm(h, layer.qkv, layer.qkv_bias).split([nq * hd, nkv * hd, nkv * hd], dim=-1)
        q = _rope(q.view(b, t, nq, hd).transpose(1, 2), cos, sin)
        k = _rope(k.view(b, t, nkv, hd).transpose(1, 2), cos, sin)
        return q, k, v.view(b, t, nkv, hd).transpose(1, 2)

    def _attend(self, layer: Weights, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor | None) -> torch.Tensor:
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scaling,
                                             enable_gqa=self.heads != self.kv_heads)  # (b, heads, t, head_dim)
        b, t = q.shape[0], q.shape[2]
        return _mm(out.transpose(1, 2).reshape(b * t, self.heads * self.head_dim), layer.o, layer.o_bias)

    def _mlp(self, layer: Weights, x: torch.Tensor) -> torch.Tensor:
        gate, up = (F.rms_norm(x, (x.shape[-1],), layer.ln2, self.eps) @ layer.gate_up).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ layer.down

    def trim(self, cache: FastCache, n: int) -> None:
        cache.pos = max(0, cache.pos - n)

    @torch.inference_mode()
    def fork(self, cache: FastCache, n: int) -> FastCache:
        """n rows, each a copy of the batch-1 `cache` (buffers are written in place: copies, never views)."""
        check_fork(cache.rows)
        return FastCache([k.repeat(n, 1, 1, 1) for k in cache.k], [v.repeat(n, 1, 1, 1) for v in cache.v],
                         cache.pos)

    @torch.inference_mode()
    def reorder(self, cache: FastCache, rows: torch.Tensor) -> None:
        """Row i becomes the old row `rows[i]`, in place (new buffers: rows may repeat)."""
        cache.k[:] = [k.index_select(0, rows) for k in cache.k]
        cache.v[:] = [v.index_select(0, rows) for v in cache.v]

    def cache_bytes(self, cache: FastCache) -> int:
        return sum(b.numel() * b.element_size() for b in (*cache.k, *cache.v))


def _mm(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x @ w if bias is None else torch.addmm(bias, x, w)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
