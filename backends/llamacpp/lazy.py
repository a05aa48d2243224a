"""Logits llama.cpp is still computing (`Pending`), and the sampler's numpy ops that wait for them (`LlamaOps`).
The decode runs on the engine's worker (ctypes releases the GIL for it); the decode loop, seeing `overlap`, queues
step t+1's forward before it reads step t's record, so the record (made on the host after the draw: `host_record`)
and the text side are made while llama.cpp computes. Reading `Pending` in any way (numpy, an index, an attribute)
waits for it and raises what the decode raised. Nothing here samples.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from backends.ops import NumpyOps


class Pending(NDArrayOperatorsMixin):
    """(B, V) or (B, T, V) float32 logits on their way; any read waits for them."""

    dtype = np.dtype(np.float32)

    def __init__(self, future: Future, shape: tuple[int, ...]) -> None:
        self._future, self.shape = future, shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def result(self) -> np.ndarray:
        return self._future.result()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a = self.result()
        return a if dtype is None else a.astype(dtype, copy=False)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return getattr(ufunc, method)(*(resolved(x) for x in inputs), **kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return func(*(resolved(x) for x in args), **kwargs)

    def __getitem__(self, index: Any) -> Any:
        return self.result()[index]

    def __len__(self) -> int:
        return self.shape[0]

    def __getattr__(self, name: str) -> Any:  # .max(), .astype(), .reshape(): the array's own
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.result(), name)


def resolved(x: Any) -> Any:
    """`x`, or the array it stands for where it is `Pending` (lists and tuples of them too)."""
    if isinstance(x, Pending):
        return x.result()
    if isinstance(x, (list, tuple)):
        return type(x)(resolved(i) for i in x)
    return x


class LlamaOps(NumpyOps):
    """numpy, over logits that may still be `Pending`; the record made on the host after the draw."""

    name = "llamacpp"
    overlap = True  # the next forward runs while the host makes this step's record
    host_record = True  # the draw first, then the record from the stages' rows (fewer numpy calls on a CPU)

    def f32(self, x: Any) -> np.ndarray:
        return np.asarray(resolved(x), dtype=np.float32)

    def numpy(self, x: Any) -> np.ndarray:
        return np.asarray(resolved(x))

    def sync(self, arrays: list[Any]) -> None:
        for a in arrays:
            resolved(a)

    def stack(self, xs: list[Any]) -> np.ndarray:
        return np.array([resolved(x) for x in xs])


LLAMA_OPS = LlamaOps()
