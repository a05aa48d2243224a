"""The MLX backend's layers at one position (`backends.base.Layers`): the logit lens and attention, mixed into
`MlxModel`. The residual stream is watched by giving each decoder layer, while watched, a subclass of its own class
whose call keeps the last position (the first layer's input: the embeddings; each layer's output): the parameter
tree and mlx-lm's code are untouched. The final norm is the norm module the inner model holds after its layers, the
head `lm_head` or the tied embeddings (`as_linear`; quantized ones work). Attention is read by a patched
`scaled_dot_product_attention` of the model's module, softmax(q·Kᵀ·scale + mask), during one forward.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from backends.base import LayerAttention, LayerLens, ModelLoadError

_WATCHING: dict[type, type] = {}  # a layer class -> its watched subclass


@dataclass(frozen=True)
class Parts:
    """Where an mlx-lm model keeps what the lens needs."""

    layers: list
    norm: nn.Module
    embed: nn.Module
    head: nn.Module | None  # None: tied to the embeddings
    softcap: float | None


def parts(model: nn.Module) -> Parts:
    """The layer list (`model.layers`, mlx-lm's convention), the inner model that holds it (under any name), the norm
    module registered after it there, its embedding, and `lm_head` where the model has one (else the embeddings are
    the head)."""
    layers = model.layers  # (a pipeline-parallel model's property makes a new list: its items are the layers)
    found = next(((m, k) for m in [model, *model.children().values()] if isinstance(m, nn.Module)
                  for k, v in m.items() if isinstance(v, list) and layers and v and v[0] is layers[0]), None)
    if found is None:
        raise ModelLoadError(f"cannot find the layers of this {type(model).__name__}: the lens needs them")
    inner, key = found  # (`layers`; GPT-2's `h`)
    names = list(inner.keys())
    after = names[names.index(key) + 1:]
    norm = next((inner[n] for n in after if "norm" in type(inner[n]).__name__.lower()), None)
    embed = next((v for v in inner.values() if isinstance(v, (nn.Embedding, nn.QuantizedEmbedding))), None)
    if norm is None or embed is None:
        raise ModelLoadError(f"cannot find the final norm and embeddings of this {type(model).__name__}")
    head = model.get("lm_head", None)
    return Parts(layers, norm, embed, head, getattr(getattr(model, "args", None), "final_logit_softcapping", None))


class Watcher:
    """The last position's residual stream of the forward in progress: `kept` (each (B, hidden), lazy)."""

    def __init__(self, layers: list) -> None:
        self.first = layers[0]
        self.kept: list[mx.array] = []
        self.watched = [(layer, type(layer)) for layer in layers]  # each layer and its class before it was watched
        for layer, cls in self.watched:
            object.__setattr__(layer, "_lens_watcher", self)
            layer.__class__ = _watched(cls)

    def end(self) -> None:
        """Every watched layer back to its own class."""
        for layer, cls in self.watched:
            layer.__class__ = cls

    def states(self) -> mx.array | None:
        return mx.stack(self.kept, axis=1) if self.kept else None


def _watched(cls: type) -> type:
    """`cls` whose call also hands the watcher its input (the first layer's) and output at the last position."""
    sub = _WATCHING.get(cls)
    if sub is None:
        def __call__(self: Any, x: mx.array, *args: Any, **kwargs: Any) -> Any:  # noqa: N807 - the call itself
            out = cls.__call__(self, x, *args, **kwargs)
            w = self._lens_watcher
            if w.first is self:
                w.kept = [x[:, -1]]
            w.kept.append((out[0] if isinstance(out, tuple) else out)[:, -1])
            return out

        sub = _WATCHING[cls] = type(cls.__name__, (cls,), {"__call__": __call__})
    return sub


class MlxLayers:
    """`Layers` for `MlxModel` (which holds `model` and `stream`)."""

    model: Any
    stream: Any

    def _parts(self) -> Parts:
        found = getattr(self, "_found_parts", None)
        if found is None:
            found = self._found_parts = parts(self.model)
        return found

    def watch_layers(self, on: bool) -> None:
        watcher = getattr(self, "_watcher", None)
        if on and watcher is None:
            self._watcher = Watcher(self._parts().layers)
        elif not on and watcher is not None:
            watcher.end()
            self._watcher = None

    def layer_states(self) -> mx.array | None:
        w = getattr(self, "_watcher", None)
        return w.states() if w is not None else None

    def layer_logits(self, states: mx.array, ids: Any) -> mx.array:
        """(B or 1, L+1, hidden) states, (B, K) ids -> (B, L+1, K) float32, lazy: those tokens' logits only."""
        p = self._parts()
        with mx.stream(self.stream):
            ids = ids if isinstance(ids, mx.array) else mx.array(np.asarray(ids, dtype=np.int32))
            rows = _head_rows(p, ids).astype(mx.float32)  # (B, K, hidden)
            h = p.norm(states).astype(mx.float32)
            logits = _capped(h @ rows.swapaxes(-1, -2), p.softcap)
            if p.head is not None and "bias" in p.head:
                logits = logits + p.head["bias"][ids][:, None]
            return logits

    def lens(self, cache: Any, token: int, target: int | None, top_k: int) -> LayerLens:
        p = self._parts()
        with mx.stream(self.stream):
            states = self._states_at(cache, token)[0]  # (L+1, hidden)
            h = p.norm(states)
            logits = _capped((p.head(h) if p.head is not None else p.embed.as_linear(h)).astype(mx.float32), p.softcap)
            lse = mx.logsumexp(logits, axis=-1)
            logprobs = logits - lse[:, None]  # (L+1, V)
            k = min(top_k, logprobs.shape[-1])
            ids = mx.argsort(-logprobs, axis=-1)[:, :k]  # a stable sort: ties keep the lower id first
            top = mx.take_along_axis(logprobs, ids, axis=-1)
            n = logprobs.shape[0]
            if target is None:
                t_lp, rank = mx.full((n,), math.nan), mx.full((n,), -1)
            else:
                t_lp = logprobs[:, target]
                rank = mx.sum(logprobs > t_lp[:, None], axis=-1)
            mx.eval(ids, top, t_lp, rank, lse)
        return LayerLens(np.array(ids).astype(np.int32), np.array(top), np.array(t_lp, dtype=np.float32),
                         np.array(rank).astype(np.int64), np.array(lse))

    def attention(self, cache: Any, token: int) -> LayerAttention:
        """The position's attention weights, read by the model module's `scaled_dot_product_attention` patched for
        one forward (layer by layer, in call order)."""
        module = sys.modules[type(self.model).__module__]
        if not hasattr(module, "scaled_dot_product_attention"):
            raise ModelLoadError(f"{type(self.model).__module__} does not expose its attention to Logit Lab")
        kept: list[tuple[mx.array, np.ndarray]] = []
        original = module.scaled_dot_product_attention
        module.scaled_dot_product_attention = _recording(kept)
        try:
            with mx.stream(self.stream):
                self.forward([[token]], cache)  # type: ignore[attr-defined]  # (MlxModel's)
                mx.eval([w for w, _ in kept])
        finally:
            module.scaled_dot_product_attention = original
        total = max(int(pos.max()) for _, pos in kept) + 1
        rows = np.zeros((len(kept), kept[0][0].shape[0], total), dtype=np.float32)
        for i, (w, pos) in enumerate(kept):
            rows[i][:, pos] = np.array(w)
        windows = tuple(getattr(c, "max_size", None) for c in cache)
        return LayerAttention(rows, self.info.kv_heads, windows)  # type: ignore[attr-defined]  # (MlxModel's)

    def _states_at(self, cache: Any, token: int) -> mx.array:
        """Forward `token` into `cache` with the residual stream watched: (1, L+1, hidden) at its position."""
        was = getattr(self, "_watcher", None) is not None
        self.watch_layers(True)
        try:
            self.forward([[token]], cache)  # type: ignore[attr-defined]  # (MlxModel's)
            states = self.layer_states()
        finally:
            self.watch_layers(was)
        assert states is not None
        return states


def _head_rows(p: Parts, ids: mx.array) -> mx.array:
    """The head's rows for `ids`, (..., hidden): the tied embeddings' (dequantized by the embedding itself) or
    lm_head's (a quantized head's rows dequantized)."""
    if p.head is None:
        return p.embed(ids)
    if isinstance(p.head, nn.QuantizedLinear):
        h = p.head
        biases = h.get("biases", None)
        return mx.dequantize(h["weight"][ids], h["scales"][ids], None if biases is None else biases[ids],
                             group_size=h.group_size, bits=h.bits, mode=getattr(h, "mode", "affine"))
    return p.head["weight"][ids]


def _capped(logits: mx.array, cap: float | None) -> mx.array:
    return logits if not cap else mx.tanh(logits / cap) * cap


def _recording(kept: list[tuple[mx.array, np.ndarray]]) -> Any:
    """mlx-lm's `scaled_dot_product_attention`, computed explicitly: each call's last query's weights, (heads, keys),
    kept with the position each key holds."""

    def sdpa(queries: mx.array, keys: mx.array, values: mx.array, cache: Any, scale: float, mask: Any,
             sinks: Any = None) -> mx.array:
        if hasattr(cache, "bits") or sinks is not None:
            raise ModelLoadError("attention is not shown for a quantized KV cache or attention sinks")
        heads, kv = queries.shape[1], keys.shape[1]
        k, v = (mx.repeat(keys, heads // kv, axis=1), mx.repeat(values, heads // kv, axis=1)) if heads != kv \
            else (keys, values)
        scores = (queries.astype(mx.float32) * scale) @ k.astype(mx.float32).swapaxes(-1, -2)  # (B, H, L, S)
        scores = _masked(scores, mask)
        w = mx.softmax(scores, axis=-1, precise=True)
        kept.append((w[0, :, -1], _key_positions(cache, keys.shape[2])))
        return (w @ v.astype(mx.float32)).astype(values.dtype)

    return sdpa


def _masked(scores: mx.array, mask: Any) -> mx.array:
    if mask is None:
        return scores
    if isinstance(mask, str):  # "causal": the queries are the last L of the S keys
        q, s = scores.shape[-2:]
        mask = mx.arange(s - q, s)[:, None] >= mx.arange(s)[None]
    if mask.dtype == mx.bool_:
        return mx.where(mask, scores, -mx.inf)
    return scores + mask


def _key_positions(cache: Any, n: int) -> np.ndarray:
    """The position each of the `n` keys a layer attended over holds: in order, except in a rotating cache (a sliding
    window's) that has wrapped: its first `keep` slots, then a ring whose newest slot is `_idx - 1`."""
    offset = getattr(cache, "offset", n)
    last = offset - 1
    if n >= offset or not hasattr(cache, "_idx"):
        return np.arange(offset - n, offset)
    keep, ring = cache.keep, n - cache.keep
    slots = np.arange(n)
    back = (cache._idx - 1 - slots) % ring  # how far behind the newest each ring slot is
    return np.where(slots < keep, slots, last - back)
