"""The torch backend's layers at one position (`backends.base.Layers`): the logit lens and attention, mixed into
`TorchModel`. The residual stream is read where the forward leaves it: the lean path keeps its last position's per
layer while `FastLlama.watch` is on; transformers' forward is watched by hooks on its decoder layers (the first
one's input: the embeddings; each one's output). The final norm and the output head are the model's own, found in
its module tree (`parts`). Attention on the lean path is computed from each layer's input at the position and the
keys in the cache; on transformers' forward it is its eager attention's own weights (`output_attentions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the usual name

from backends.base import LayerAttention, LayerLens, ModelLoadError

NORM_NAMES = ("norm", "ln_f", "final_layernorm", "final_norm", "norm_f")  # only where the module tree says nothing


@dataclass(frozen=True)
class Parts:
    """Where a transformers model keeps what the lens needs: its decoder layers, final norm and output head."""

    layers: torch.nn.ModuleList
    norm: torch.nn.Module
    head: torch.nn.Module
    softcap: float | None  # Gemma's final logit soft-capping (None: none)


def parts(hf: Any) -> Parts:
    """The decoder's layer list (the ModuleList of as many layers as the config has), the norm module registered
    after it (a module whose class is a norm), and `get_output_embeddings()`."""
    base = hf.get_decoder() if hasattr(hf, "get_decoder") else getattr(hf, hf.base_model_prefix)
    config = hf.config.get_text_config() if hasattr(hf.config, "get_text_config") else hf.config
    children = list(base.named_children())
    at = next((i for i, (_, m) in enumerate(children)
               if isinstance(m, torch.nn.ModuleList) and len(m) == config.num_hidden_layers), None)
    if at is None:
        raise ModelLoadError(f"cannot find the layers of this {type(hf).__name__}: the lens needs them")
    norm = next((m for _, m in children[at + 1:] if "norm" in type(m).__name__.lower()), None)
    norm = norm or next((getattr(base, n) for n in NORM_NAMES if isinstance(getattr(base, n, None), torch.nn.Module)),
                        None)
    head = hf.get_output_embeddings()
    if norm is None or head is None:
        raise ModelLoadError(f"cannot find the final norm and output head of this {type(hf).__name__}")
    return Parts(children[at][1], norm, head, getattr(config, "final_logit_softcapping", None))


class Hooks:
    """The residual stream of transformers' forward at its last position: the first layer's input, then each layer's
    output, kept by forward hooks while installed."""

    def __init__(self, layers: torch.nn.ModuleList) -> None:
        self.kept: list[torch.Tensor] = []
        self.handles = [layers[0].register_forward_pre_hook(self._first, with_kwargs=True)]
        self.handles += [layer.register_forward_hook(self._after) for layer in layers]

    def _first(self, _module: Any, args: tuple, kwargs: dict) -> None:
        x = args[0] if args else kwargs["hidden_states"]
        self.kept = [x[:, -1]]

    def _after(self, _module: Any, _args: Any, out: Any) -> None:
        self.kept.append((out[0] if isinstance(out, tuple) else out)[:, -1])

    def states(self) -> torch.Tensor | None:
        return torch.stack(self.kept, 1) if self.kept else None

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


class TorchLayers:
    """`Layers` for `TorchModel` (which holds `model`, `fast`, `device` and `_cache_arg`)."""

    model: Any
    fast: Any
    device: torch.device
    _cache_arg: str

    def _parts(self) -> Parts:
        found = getattr(self, "_found_parts", None)
        if found is None:
            found = self._found_parts = parts(self.model)
        return found

    def watch_layers(self, on: bool) -> None:
        hooks: Hooks | None = getattr(self, "_hooks", None)
        if self.fast is not None:
            self.fast.watch, self.fast.states = on, None
        elif on and hooks is None:
            self._hooks = Hooks(self._parts().layers)
        elif not on and hooks is not None:
            hooks.remove()
            self._hooks = None

    def layer_states(self) -> torch.Tensor | None:
        if self.fast is not None:
            return self.fast.states
        hooks = getattr(self, "_hooks", None)
        return hooks.states() if hooks is not None else None

    @torch.inference_mode()
    def layer_logits(self, states: torch.Tensor, ids: Any) -> Any:
        """(B or 1, L+1, hidden) states, (B, K) ids -> (B, L+1, K) float32: those tokens' logits only (numpy on a
        CPU, as `forward`'s logits)."""
        p = self._parts()
        ids = torch.as_tensor(ids, dtype=torch.long, device=states.device)
        if self.fast is not None:  # the lean path's own norm and (hidden, V) head: a few ops a step
            f = self.fast
            w = f.w.lm_head.index_select(1, ids.reshape(-1)).view(-1, *ids.shape).permute(1, 0, 2)  # (B, hidden, K)
            logits = F.rms_norm(states, (states.shape[-1],), f.w.norm, f.eps) @ w
        else:
            w = p.head.weight[ids]  # (B, K, hidden): the head's rows for these tokens only
            logits = p.norm(states) @ w.transpose(-1, -2)
            if getattr(p.head, "bias", None) is not None:
                logits = logits + p.head.bias[ids][:, None]
        logits = _capped(logits.float(), p.softcap)
        return logits.numpy() if logits.device.type == "cpu" else logits

    @torch.inference_mode()
    def lens(self, cache: Any, token: int, target: int | None, top_k: int) -> LayerLens:
        p = self._parts()
        states = self._states_at(cache, token)[0]  # (L+1, hidden)
        if self.fast is not None:  # as the lean forward makes its logits
            f = self.fast
            logits = F.rms_norm(states, (states.shape[-1],), f.w.norm, f.eps) @ f.w.lm_head
        else:
            logits = p.head(p.norm(states))
        logits = _capped(logits.float(), p.softcap)
        lse = torch.logsumexp(logits, -1)
        logprobs = logits - lse[:, None]  # (L+1, V)
        top, ids = torch.topk(logprobs, min(top_k, logprobs.shape[-1]))
        if target is None:
            t_lp, rank = torch.full((len(states),), float("nan")), torch.full((len(states),), -1)
        else:
            t_lp = logprobs[:, target]
            rank = (logprobs > t_lp[:, None]).sum(-1)
        return LayerLens(ids.to(torch.int32).cpu().numpy(), top.cpu().numpy(), t_lp.float().cpu().numpy(),
                         rank.to(torch.int64).cpu().numpy(), lse.cpu().numpy())

    @torch.inference_mode()
    def attention(self, cache: Any, token: int) -> LayerAttention:
        if self.fast is not None:
            return self._lean_attention(cache, token)
        return self._eager_attention(cache, token)

    def _states_at(self, cache: Any, token: int) -> torch.Tensor:
        """Forward `token` into `cache` with the residual stream watched: (1, L+1, hidden) at its position."""
        was = self.fast.watch if self.fast is not None else getattr(self, "_hooks", None) is not None
        self.watch_layers(True)
        try:
            self.forward([[token]], cache)  # type: ignore[attr-defined]  # (TorchModel's)
            states = self.layer_states()
        finally:
            self.watch_layers(was)
        assert states is not None
        return states

    def _lean_attention(self, cache: Any, token: int) -> LayerAttention:
        """softmax(q·Kᵀ·scale) of the position's queries over the cache's keys, layer by layer (q from the layer's
        input, as the lean forward computes it; grouped KV heads read by each query head of their group)."""
        f = self.fast
        states = self._states_at(cache, token)[0]
        p = cache.pos - 1
        cos, sin = f.w.cos[p : p + 1], f.w.sin[p : p + 1]
        rows = []
        for i, layer in enumerate(f.w.layers):
            h = F.rms_norm(states[i : i + 1], (states.shape[-1],), layer.ln1, f.eps)
            q = f._qkv(layer, h, 1, cos, sin)[0][0, :, 0]  # (heads, head_dim)
            keys = cache.k[i][0, :, : p + 1].repeat_interleave(f.heads // f.kv_heads, dim=0)  # (heads, T, head_dim)
            scores = torch.einsum("hd,htd->ht", q, keys).float() * f.scaling
            rows.append(torch.softmax(scores, -1))
        return LayerAttention(torch.stack(rows).cpu().numpy(), f.kv_heads, (None,) * len(rows))

    def _eager_attention(self, cache: Any, token: int) -> LayerAttention:
        """transformers' eager attention's weights for the position (a sliding window's layer holds only its window's
        keys: the positions before it are 0)."""
        m = self.model
        before = m.config._attn_implementation
        m.set_attn_implementation("eager")
        try:
            ids = torch.as_tensor([[token]], dtype=torch.long, device=self.device)
            out = m(input_ids=ids, **{self._cache_arg: cache}, use_cache=True, output_attentions=True,
                    logits_to_keep=1)
        finally:
            m.set_attn_implementation(before)
        total = cache.get_seq_length()
        rows = [F.pad(a[0, :, -1].float(), (total - a.shape[-1], 0)) for a in out.attentions]
        config = m.config.get_text_config() if hasattr(m.config, "get_text_config") else m.config
        return LayerAttention(torch.stack(rows).cpu().numpy(), _kv_heads(config), _windows(config, len(rows)))


def _capped(logits: torch.Tensor, cap: float | None) -> torch.Tensor:
    return logits if not cap else torch.tanh(logits / cap) * cap


def _kv_heads(config: Any) -> int:
    return getattr(config, "num_key_value_heads", None) or config.num_attention_heads


def _windows(config: Any, layers: int) -> tuple[int | None, ...]:
    """Each layer's sliding window (None: full attention), from the config's layer types (or one window for all)."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if not window:
        return (None,) * layers
    if types is None:
        return (window if getattr(config, "use_sliding_window", True) else None,) * layers
    return tuple(window if t == "sliding_attention" else None for t in types)
