"""The array-ops shim the sampler pipeline is written against, and its numpy executor (the reference).

Each backend provides the same small set of 1-D operations for its framework (`MlxOps`, `TorchOps`):
the pipeline in `app/core/sampler/pipeline.py` is written once against `ArrayOps` and runs unchanged on numpy, mlx and
torch. Arithmetic and comparison operators are the frameworks' own; only what differs by name is here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

Array = Any


class ArrayOps(Protocol):
    name: str
    overlap: bool  # the device runs behind the host (lazy or async): queue step t+1 before reading step t
    host_record: bool  # make the trace's record on numpy: the device only draws (MLX on a CPU)

    def f32(self, x: Any) -> Array: ...  # host or device values -> device float32
    def numpy(self, x: Array) -> np.ndarray: ...  # device -> host
    def sync(self, arrays: list[Array]) -> None: ...  # evaluate lazily built arrays together
    def compile(self, fn: Any) -> Any: ...  # fn itself, or compiled (fn: pure, arrays in, a tuple of arrays out)
    def start(self, arrays: list[Array]) -> None: ...  # begin computing these in the background (lazy frameworks)
    def where(self, cond: Array, a: Array, b: Array | float) -> Array: ...
    def cumsum(self, x: Array) -> Array: ...
    def count_cumsum(self, mask: Array) -> Array: ...  # running count of True (int)
    def sort_desc(self, x: Array) -> Array: ...  # values, descending
    def kth_largest(self, x: Array, k: int) -> Array: ...  # the k-th largest value (k >= 1), as a 0-d array
    def count_above(self, sorted_desc: Array, v: Array) -> Array: ...  # (N,) how many of sorted_desc exceed each v
    def topk(self, x: Array, k: int) -> tuple[Array, Array]: ...  # (values, indices), descending
    def take(self, x: Array, idx: Array) -> Array: ...
    def scatter(self, x: Array, idx: Array, values: Array) -> Array: ...  # copy of x with x[idx] = values
    def exp(self, x: Array) -> Array: ...
    def log(self, x: Array) -> Array: ...
    def max(self, x: Array, axis: int | None = None) -> Array: ...  # of all (1-D), or along an axis (-1: per row)
    def sum(self, x: Array, axis: int | None = None) -> Array: ...  # bool counts as int
    def isfinite(self, x: Array) -> Array: ...
    def minimum(self, x: Array, v: float) -> Array: ...
    def maximum(self, x: Array, v: float) -> Array: ...
    def arange(self, n: int) -> Array: ...
    def zeros(self, n: int) -> Array: ...
    def stack(self, xs: list[Array]) -> Array: ...  # n arrays of one shape -> (n, ...): B drawn (1,) -> (B, 1) tokens


def vmap(ops: ArrayOps, fn: Callable[..., tuple[Array, ...]]) -> Callable[..., tuple[Array, ...]] | None:
    """`fn` (one row's arrays in, a tuple of arrays out) mapped over a leading row axis of every argument and result
    by the executor's own vmap (its `vmap` method: torch.func.vmap, mx.vmap), one graph for B rows with the code
    still one row's; None for an executor without one (numpy), whose rows run one by one."""
    own = getattr(ops, "vmap", None)
    return None if own is None else own(fn)


class NumpyOps:
    """The reference executor: plain numpy on the host."""

    name = "numpy"
    overlap = False
    host_record = False

    def f32(self, x: Any) -> np.ndarray:
        return np.asarray(x, dtype=np.float32)

    def numpy(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x)

    def sync(self, arrays: list[np.ndarray]) -> None:
        pass

    def compile(self, fn: Any) -> Any:
        return fn

    def start(self, arrays: list[np.ndarray]) -> None:
        pass

    # ufuncs and their reductions directly: np.sum / np.max / np.stack wrappers cost more than the work itself
    # on one vocabulary-sized vector, and this runs every step.
    where = staticmethod(np.where)
    exp = staticmethod(np.exp)
    max = staticmethod(np.maximum.reduce)
    sum = staticmethod(np.add.reduce)
    isfinite = staticmethod(np.isfinite)
    minimum = staticmethod(np.minimum)
    maximum = staticmethod(np.maximum)
    stack = staticmethod(np.array)

    def cumsum(self, x: np.ndarray) -> np.ndarray:
        return np.cumsum(x, dtype=x.dtype)

    def count_cumsum(self, mask: np.ndarray) -> np.ndarray:
        return np.cumsum(mask, dtype=np.int32)  # (a vocabulary's count fits; half int64's memory traffic)

    def sort_desc(self, x: np.ndarray) -> np.ndarray:
        return -np.sort(-x)

    def kth_largest(self, x: np.ndarray, k: int) -> np.ndarray:
        return np.partition(x, x.shape[0] - k)[x.shape[0] - k]

    def count_above(self, sorted_desc: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.searchsorted(-sorted_desc, -v, side="left")  # ascending after negation: the count of > v

    def topk(self, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        n = x.shape[0]
        k = min(k, n)
        part = np.argpartition(x, n - k)[n - k:] if k < n else np.arange(n)  # the k largest, unordered
        idx = part[np.lexsort((part, -x[part]))]  # by value descending, ties by lower id
        return x[idx], idx

    def take(self, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return x[idx]

    def scatter(self, x: np.ndarray, idx: np.ndarray, values: np.ndarray) -> np.ndarray:
        out = x.copy()
        out[idx] = values
        return out

    def log(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log(x)

    def arange(self, n: int) -> np.ndarray:
        return np.arange(n)

    def zeros(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.float32)


NUMPY = NumpyOps()
