"""Steering on torch (`backends.base.Steerable`), mixed into `TorchModel`: each steered layer's output gets its row's
vector added, at every position. The lean path adds it in its own loop (`FastLlama.adds`); transformers' forward
through a forward hook on each steered decoder layer (the layers found by `inside.parts`). `steer(None)` removes them
all; a layer without a vector (or with zeros only) is left as it is: an unsteered forward is the same, bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from backends.base import Steer
from backends.torch.inside import parts


class TorchSteering:
    """`Steerable` for `TorchModel` (which holds `model`, `fast`, `device` and `info`)."""

    model: Any
    fast: Any
    device: torch.device
    info: Any

    def steer(self, steer: Steer | None) -> None:
        """The forwards that follow add `steer.adds[L]` (B or 1 rows) to layer L's output; None: nothing."""
        for handle in getattr(self, "_steer_hooks", []):
            handle.remove()
        self._steer_hooks: list[Any] = []
        adds = self._as_tensors(steer.adds) if steer is not None else {}
        if self.fast is not None:
            self.fast.adds = adds
            return
        layers = parts(self.model).layers
        self._steer_hooks = [layers[i].register_forward_hook(_adder(add)) for i, add in adds.items()]

    def _as_tensors(self, adds: Any) -> dict[int, torch.Tensor]:
        """Each layer's rows as a (B, 1, hidden) tensor of the model's dtype, on its device; a layer out of range or
        a vector of the wrong size is a ValueError naming it."""
        layers, hidden = self.info.layers, self.info.hidden_size
        dtype = next(self.model.parameters()).dtype
        out = {}
        for layer, rows in sorted(adds.items()):
            a = np.asarray(rows, dtype=np.float32)
            if not 0 <= int(layer) < layers:
                raise ValueError(f"layer {layer} is not one of this model's layers (0 to {layers - 1})")
            if a.ndim != 2 or a.shape[1] != hidden:
                raise ValueError(f"layer {layer}'s vectors are {a.shape}, not (rows, {hidden})")
            if a.any():  # (all zero: the add is skipped, and the forward is the unsteered one bit for bit)
                out[int(layer)] = torch.from_numpy(a).to(self.device, dtype)[:, None, :]
        return out


def _adder(add: torch.Tensor) -> Any:
    """A forward hook that adds `add` (B, 1, hidden) to a decoder layer's output (a tensor, or a tuple led by one)."""

    def hook(_module: Any, _args: Any, out: Any) -> Any:
        if isinstance(out, tuple):
            return (out[0] + add, *out[1:])
        return out + add

    return hook
