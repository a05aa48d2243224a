"""A lean forward for Llama-family models on torch, over the transformers model's own weights (as gpt-fast).

Per decode step transformers spends most of its time outside the arithmetic on small models (module calls,
mask building, `torch.cat` into a growing cache). Here: one preallocated KV buffer per layer that grows by
doubling, RoPE tables taken from the model's own rotary module (so every RoPE variant it supports is right),
SDPA with grouped KV heads, and nothing else. Used only for plain decoder configs (`supports`); everything
else runs through transformers. Tested for logit parity against the transformers forward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the usual name

FAST_TYPES = {"llama", "mistral", "qwen2"}


def supports(model: Any) -> bool:
    c = model.config
    return (c.model_type in FAST_TYPES and getattr(c, "hidden_act", "silu") == "silu"
            and not getattr(c, "sliding_window", None) and hasattr(model, "model")
            and hasattr(model.model, "rotary_emb"))


@dataclass
class Layer:
    ln1: torch.Tensor
    ln2: torch.Tensor
    qkv: torch.Tensor  # (q + 2 kv) × hidden, fused
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    gate_up: torch.Tensor  # 2 intermediate × hidden, fused
    down: torch.Tensor


@dataclass
class FastCache:
    k: list[torch.Tensor] = field(default_factory=list)  # per layer (kv_heads, capacity, head_dim)
    v: list[torch.Tensor] = field(default_factory=list)
    pos: int = 0

    def get_seq_length(self) -> int:
        return self.pos


class FastLlama:
    """`compile_len`: opt in to a static KV cache of that many positions and a torch.compile'd decode step
    (CUDA graphs on a GPU), as gpt-fast does; the first steps then pay for compiling."""

    def __init__(self, hf: Any, compile_len: int | None = None) -> None:
        c = hf.config
        self.hf = hf
        self.eps = c.rms_norm_eps
        self.heads = c.num_attention_heads
        self.kv_heads = getattr(c, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // self.heads
        self.max_len = c.max_position_embeddings
        m = hf.model
        self.embed = m.embed_tokens.weight
        self.norm = m.norm.weight
        self.lm_head = hf.lm_head.weight
        self.scaling = m.layers[0].self_attn.scaling
        self.layers = [self._layer(layer) for layer in m.layers]
        self.cos, self.sin = self._rope_tables(m, self.embed.device, self.embed.dtype)
        self.static_len = min(compile_len, self.max_len) if compile_len else None
        self._compiled = None
        if self.static_len:
            import torch._inductor.config as inductor

            inductor.freezing = True  # weights become constants: prepacked CPU matmuls (25.2 vs 27.8 ms/token)
            mode = "reduce-overhead" if self.embed.device.type == "cuda" else None
            self._compiled = torch.compile(self._decode_static, mode=mode, fullgraph=True, dynamic=False)

    @staticmethod
    def _layer(layer: Any) -> Layer:
        a, mlp = layer.self_attn, layer.mlp
        biases = [p.bias for p in (a.q_proj, a.k_proj, a.v_proj)]
        qkv_bias = torch.cat(biases) if all(b is not None for b in biases) else None
        return Layer(
            ln1=layer.input_layernorm.weight, ln2=layer.post_attention_layernorm.weight,
            qkv=torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), qkv_bias=qkv_bias,
            o=a.o_proj.weight, o_bias=a.o_proj.bias,
            gate_up=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), down=mlp.down_proj.weight,
        )

    def _rope_tables(self, m: Any, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for every position, from the model's own rotary module (scaling variants included)."""
        pos = torch.arange(self.max_len, device=device)[None]
        probe = torch.zeros(1, device=device, dtype=dtype)
        cos, sin = m.rotary_emb(probe, pos)
        return cos[0], sin[0]  # (max_len, head_dim)

    def new_cache(self) -> FastCache:
        return FastCache()

    def _reserve(self, cache: FastCache, need: int) -> None:
        cap = cache.k[0].shape[1] if cache.k else 0
        if need <= cap:
            return
        new = min(self.max_len, max(need, 2 * cap, 256, self.static_len or 0))
        shape = (self.kv_heads, new, self.head_dim)
        for store in (cache.k, cache.v):
            for i in range(len(self.layers)):
                # zeros, not empty: the static step attends over the whole buffer, masked past `pos`, and a
                # masked-out NaN left in uninitialized memory still poisons the sum (0 * NaN)
                buf = torch.zeros(shape, device=self.embed.device, dtype=self.embed.dtype)
                if store and i < len(store):
                    buf[:, : cache.pos] = store[i][:, : cache.pos]
                    store[i] = buf
                else:
                    store.append(buf)

    @torch.inference_mode()
    def forward(self, tokens: Sequence[int] | torch.Tensor, cache: FastCache, all_logits: bool = False) -> Any:
        ids = torch.as_tensor(tokens, dtype=torch.long, device=self.embed.device).reshape(-1)
        t, p = ids.shape[0], cache.pos
        if p + t > self.max_len:
            raise ValueError(f"the context holds {self.max_len} tokens")
        self._reserve(cache, p + t)
        if self._compiled is not None and t == 1 and not all_logits and cache.k[0].shape[1] == self.static_len:
            cache.pos = p + 1
            return self._compiled(ids, torch.tensor(p, device=ids.device), cache.k, cache.v)
        x = F.embedding(ids, self.embed)  # (t, hidden)
        cos, sin = self.cos[p : p + t], self.sin[p : p + t]
        mask = None
        if t > 1:  # prefill: causal over the new tokens, everything before them visible
            mask = torch.ones(t, p + t, dtype=torch.bool, device=x.device).tril(p)
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, F.rms_norm(x, (x.shape[-1],), layer.ln1, self.eps), cos, sin)
            cache.k[i][:, p : p + t] = k
            cache.v[i][:, p : p + t] = v
            x = x + self._attend(layer, q, cache.k[i][:, : p + t], cache.v[i][:, : p + t], mask)
            x = x + self._mlp(layer, x)
        cache.pos = p + t
        x = F.rms_norm(x if all_logits else x[-1:], (x.shape[-1],), self.norm, self.eps)
        logits = F.linear(x, self.lm_head).float()
        return logits if all_logits else logits[0]

    def _decode_static(self, ids: torch.Tensor, pos: torch.Tensor, ks: list[torch.Tensor],
                       vs: list[torch.Tensor]) -> torch.Tensor:
        """One decode step over fixed-size KV buffers (masked past `pos`): fixed shapes, so it compiles once."""
        x = F.embedding(ids, self.embed)
        cos, sin = self.cos.index_select(0, pos[None]), self.sin.index_select(0, pos[None])
        mask = (torch.arange(ks[0].shape[1], device=ids.device) <= pos)[None]
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, F.rms_norm(x, (x.shape[-1],), layer.ln1, self.eps), cos, sin)
            ks[i].index_copy_(1, pos[None], k)
            vs[i].index_copy_(1, pos[None], v)
            x = x + self._attend(layer, q, ks[i], vs[i], mask)
            x = x + self._mlp(layer, x)
        return F.linear(F.rms_norm(x, (x.shape[-1],), self.norm, self.eps), self.lm_head).float()[0]

    def _qkv(self, layer: Layer, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        t, hd, nq, nkv = h.shape[0], self.head_dim, self.heads, self.kv_heads
        q, k, v = F.linear(h, layer.qkv, layer.qkv_bias).split([nq * hd, nkv * hd, nkv * hd], dim=-1)
        q = _rope(q.view(t, nq, hd).transpose(0, 1), cos, sin)  # (heads, t, head_dim)
        k = _rope(k.view(t, nkv, hd).transpose(0, 1), cos, sin)
        return q, k, v.view(t, nkv, hd).transpose(0, 1)

    def _attend(self, layer: Layer, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor | None) -> torch.Tensor:
        out = F.scaled_dot_product_attention(q[None], keys[None], values[None], attn_mask=mask,
                                             scale=self.scaling, enable_gqa=self.heads != self.kv_heads)
        t = q.shape[1]
        return F.linear(out[0].transpose(0, 1).reshape(t, self.heads * self.head_dim), layer.o, layer.o_bias)

    def _mlp(self, layer: Layer, x: torch.Tensor) -> torch.Tensor:
        gate, up = F.linear(F.rms_norm(x, (x.shape[-1],), layer.ln2, self.eps), layer.gate_up).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, layer.down)

    def trim(self, cache: FastCache, n: int) -> None:
        cache.pos = max(0, cache.pos - n)

    def cache_bytes(self, cache: FastCache) -> int:
        return sum(b.numel() * b.element_size() for b in (*cache.k, *cache.v))


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
