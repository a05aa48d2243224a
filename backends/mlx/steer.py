"""Steering on MLX (`backends.base.Steerable`), mixed into `MlxModel`: each steered decoder layer in mlx-lm's layer
list (`model.layers`, which every mlx-lm model has) is wrapped while steering is on, its output getting its row's
vector added at every position; `steer(None)` puts the layers back. A layer without a vector (or with zeros only) is
not wrapped, so an unsteered forward is the same computation, bit for bit.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np

from backends.base import Steer


class SteeredLayer:
    """A decoder layer whose output gets `add` (B, 1, hidden); any attribute is the layer's own (mlx-lm reads some,
    as `use_sliding`)."""

    def __init__(self, inner: Any, add: mx.array) -> None:
        self.inner, self.add = inner, add

    def __call__(self, x: mx.array, *args: Any, **kwargs: Any) -> Any:
        out = self.inner(x, *args, **kwargs)
        return (out[0] + self.add, *out[1:]) if isinstance(out, tuple) else out + self.add

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class MlxSteering:
    """`Steerable` for `MlxModel` (which holds `model` and `info`)."""

    model: Any
    info: Any

    def steer(self, steer: Steer | None) -> None:
        """The forwards that follow add `steer.adds[L]` (B or 1 rows) to layer L's output; None: nothing."""
        layers = _layer_list(self.model)
        for i, layer in enumerate(layers):  # the layers as they were
            if isinstance(layer, SteeredLayer):
                layers[i] = layer.inner
        if steer is None:
            return
        dtype = _dtype(layers[0])
        for i, rows in sorted(steer.adds.items()):
            a = np.asarray(rows, dtype=np.float32)
            self._check(int(i), a)
            if a.any():  # (all zero: the add is skipped, and the forward is the unsteered one bit for bit)
                layers[int(i)] = SteeredLayer(layers[int(i)], mx.array(a).astype(dtype)[:, None, :])

    def _check(self, layer: int, a: np.ndarray) -> None:
        n, hidden = self.info.layers, self.info.hidden_size
        if not 0 <= layer < n:
            raise ValueError(f"layer {layer} is not one of this model's layers (0 to {n - 1})")
        if a.ndim != 2 or a.shape[1] != hidden:
            raise ValueError(f"layer {layer}'s vectors are {a.shape}, not (rows, {hidden})")


def _dtype(layer: Any) -> Any:
    """The activations' dtype: that of the layer's first norm weight (a quantized matrix's is not), else float32."""
    from mlx.utils import tree_flatten

    leaves = tree_flatten(layer.parameters())
    return next((v.dtype for k, v in leaves if k.endswith("norm.weight")), mx.float32)


def _layer_list(model: Any) -> list[Any]:
    """The list the forward iterates, to be changed in place: mlx-lm's `Model.layers` is a property that returns a
    fresh slice on some families (Qwen2's `pipeline_layers`), where the inner model's `layers` is the list itself."""
    inner = getattr(model, "model", None)
    held = getattr(inner, "layers", None) if inner is not None else None
    return held if isinstance(held, list) else model.layers
