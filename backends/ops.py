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
    def survivors(self, x: Array, line: Array | None = None) -> tuple[Array, Array] | None: ...  # (ids, values)


def vmap(ops: ArrayOps, fn: Callable[..., tuple[Array, ...]]) -> Callable[..., tuple[Array, ...]] | None:
    """`fn` (one row's arrays in, a tuple of arrays out) mapped over a leading row axis of every argument and result
    by the executor's own vmap (its `vmap` method: torch.func.vmap, mx.vmap), one graph for B rows with the code
    still one row's; None for an executor without one (numpy), whose rows run one by one."""
    own = getattr(ops, "vmap", None)
    return None if own is None else own(fn)


# A cut leaves few tokens of the vocabulary, and numpy's whole-vector passes cost alike however few are left: the
# helpers below count what a vector holds (one cheap pass) and, where that is at most a sixteenth of it, work on those
# alone; a clip or a selection that changes nothing returns its input. Each returns what numpy's whole pass returns,
# bit for bit (tests/backends/test_numpy_shortcuts.py), and the sampler never writes into an array it was given.
SHORTCUTS_FROM = 8192  # entries: below (the built-in model's 4,096), whole passes cost what the counts would save


def _few(k: int, n: int) -> bool:
    return k <= n >> 4 and n >= SHORTCUTS_FROM


def _vector(x: Any) -> bool:
    """A float32 numpy array of a vocabulary's size (not a scalar, not a row-mapped or framework array)."""
    return type(x) is np.ndarray and x.dtype == np.float32 and x.size >= SHORTCUTS_FROM


def _where(cond: Any, a: Any, b: Any) -> Any:
    """np.where(cond, a, b); for a float32 vector `a` (or a few rows of one), a condition of its shape and a float `b`
    (a cut's -inf): `a` itself where the condition holds everywhere, else each row made its own way (`_select`)."""
    if not _vector(a) or type(cond) is not np.ndarray or cond.shape != a.shape or type(b) is not float \
            or a.ndim > 2 or (a.ndim == 2 and a.shape[0] > 16):
        return np.where(cond, a, b)
    if a.ndim == 1:
        k = np.count_nonzero(cond)
        return a if k == a.shape[0] else _select(np.empty(a.shape, dtype=np.float32), cond, a, b, k)
    out = np.empty(a.shape, dtype=np.float32)
    for into, c, row in zip(out, cond, a, strict=True):
        _select(into, c, row, b, np.count_nonzero(c))
    return out


def _select(out: np.ndarray, cond: np.ndarray, a: np.ndarray, b: float, k: int) -> np.ndarray:
    """np.where(cond, a, b) written into `out`, a vector, given k = the count of `cond`: where one side is rare,
    the other filled and the rare one copied in where it goes (a third of np.where's time)."""
    n = a.shape[0]
    if k == n:
        out[...] = a
    elif k <= n >> 4:
        out.fill(b)
        np.copyto(out, a, where=cond)
    elif n - k <= n >> 4:
        out[...] = a
        np.copyto(out, b, where=~cond)
    else:
        out[...] = np.where(cond, a, b)
    return out


def _minimum(x: Any, v: Any) -> Any:
    """np.minimum(x, v); x itself when every value is below v (a clip that clips nothing)."""
    if _vector(x) and type(v) in (float, int) and np.maximum.reduce(x, axis=None) < v:
        return x
    return np.minimum(x, v)


def _maximum(x: Any, v: Any) -> Any:
    if _vector(x) and type(v) in (float, int) and np.minimum.reduce(x, axis=None) > v:
        return x
    return np.maximum(x, v)


def _count(x: Any, axis: int | None) -> Any:
    """np.add.reduce of a bool array (an int64, or int64s per row), by np.count_nonzero: a tenth of the time."""
    if type(x) is not np.ndarray:
        return np.add.reduce(x, axis=axis)
    if x.ndim == 1 and axis in (0, -1, None):
        return np.intp(np.count_nonzero(x))
    if x.ndim == 2 and axis in (1, -1) and x.shape[0] <= 16 and x.shape[1] >= SHORTCUTS_FROM:  # (a few rows)
        return np.fromiter((np.count_nonzero(row) for row in x), dtype=np.intp, count=x.shape[0])
    return np.add.reduce(x, axis=axis)


def _cumsum(x: np.ndarray) -> np.ndarray:
    """np.cumsum in x's type. It adds one value at a time, so a zero leaves the sum as it was (past the first
    non-zero; before it the sum is -0.0 while every value was -0.0): the non-zeros' running sum, each value held up
    to the next non-zero."""
    if type(x) is np.ndarray and x.ndim == 1 and x.dtype.kind == "f":
        n = x.shape[0]
        nonzero = x != 0
        k = np.count_nonzero(nonzero)
        if k > 0 and _few(k, n):
            at = nonzero.nonzero()[0]
            if not (at[0] and np.signbit(x[:at[0]]).any()):
                run = np.empty(k + 1, dtype=x.dtype)
                run[0] = 0
                np.cumsum(x[at], dtype=x.dtype, out=run[1:])
                ends = np.empty(k + 2, dtype=np.intp)  # where each held value starts, then the end
                ends[0], ends[1:-1], ends[-1] = 0, at, n
                return np.repeat(run, ends[1:] - ends[:-1])
    return np.cumsum(x, dtype=x.dtype)


def _count_cumsum(mask: np.ndarray) -> np.ndarray:
    """np.cumsum of a bool vector as int32; a mask of a few (ties at a cut: mostly one), step by step."""
    if type(mask) is np.ndarray and mask.ndim == 1 and np.count_nonzero(mask) <= 16:  # (a cumsum costs more)
        out, at = np.zeros(mask.shape[0], dtype=np.int32), mask.nonzero()[0].tolist()
        for count, (start, end) in enumerate(zip(at, [*at[1:], mask.shape[0]][:len(at)], strict=True), 1):
            out[start:end] = count
        return out
    return np.cumsum(mask, dtype=np.int32)


def _candidates(x: np.ndarray, k: int) -> np.ndarray:
    """The ids (ascending) of x's values at or above a line drawn from every 8th value: where values do not follow
    their ids, about 2k of them, the k largest among them; fewer than k where they do, or where a NaN is among them
    (a partition ranks it above all): then none, and the whole vector's partition decides."""
    if np.isnan(np.maximum.reduce(x)):
        return np.empty(0, dtype=np.intp)
    every, m = x[::8], k // 4 + 1
    return (x >= np.partition(every, every.shape[0] - m)[every.shape[0] - m]).nonzero()[0]


def _top_of_candidates(x: np.ndarray, k: int) -> np.ndarray | None:
    """The ids of x's k largest (value descending, ties to lower ids) from the candidates at or above a line that
    every 8th value puts below the (k+1)-th largest: half the time of a partition of the whole vector. None where
    the line keeps too few, or the k-th and (k+1)-th values tie: which of the tied the whole vector's partition
    keeps is its own choice, and `topk` then leaves it to it."""
    ids = _candidates(x, k)
    if ids.shape[0] <= k:
        return None
    v = x[ids]
    part = np.argpartition(v, v.shape[0] - k - 1)[v.shape[0] - k - 1:]  # the k+1 largest candidates
    order = part[np.lexsort((part, -v[part]))]  # (ids ascending: their order is the ids' order)
    return None if v[order[k - 1]] == v[order[k]] else ids[order[:k]]


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
    exp = staticmethod(np.exp)
    max = staticmethod(np.maximum.reduce)
    isfinite = staticmethod(np.isfinite)
    stack = staticmethod(np.array)

    # (the module's helpers: a vector's few survivors of a cut, and clips that clip nothing, at less than numpy's cost)
    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return _where(cond, a, b)

    def minimum(self, x: Any, v: Any) -> Any:
        return _minimum(x, v)

    def maximum(self, x: Any, v: Any) -> Any:
        return _maximum(x, v)

    def sum(self, x: Any, axis: int | None = 0) -> Any:
        return _count(x, axis) if getattr(x, "dtype", None) == np.bool_ else np.add.reduce(x, axis=axis)

    def cumsum(self, x: np.ndarray) -> np.ndarray:
        return _cumsum(x)

    def count_cumsum(self, mask: np.ndarray) -> np.ndarray:
        return _count_cumsum(mask)  # int32: a vocabulary's count fits, in half int64's memory traffic

    def sort_desc(self, x: np.ndarray) -> np.ndarray:
        return -np.sort(-x)

    def survivors(self, x: Any, line: Any = None) -> tuple[np.ndarray, np.ndarray] | None:
        """The ids (ascending) and values of a float32 vector's finite entries (at or above `line`, where given) when
        they are few (at most a sixteenth: a cut's survivors), for a stage to work on those alone; None where they
        are not (or a NaN or +inf is among them): work on the whole vector."""
        if not _vector(x) or x.ndim != 1:
            return None
        present = x != -np.inf if line is None else x >= line
        if not _few(np.count_nonzero(present), x.shape[0]):
            return None
        ids = present.nonzero()[0]
        values = x[ids]
        return (ids, values) if ids.shape[0] and np.isfinite(values).all() else None

    def kth_largest(self, x: np.ndarray, k: int) -> np.ndarray:
        n = x.shape[0]
        if n >= SHORTCUTS_FROM and 4 * k <= n >> 3:  # only the candidates at or above a line below the k-th
            ids = _candidates(x, k)
            if ids.shape[0] >= k:
                v = x[ids]
                return np.partition(v, v.shape[0] - k)[v.shape[0] - k]
        return np.partition(x, n - k)[n - k]

    def count_above(self, sorted_desc: np.ndarray, v: np.ndarray) -> np.ndarray:
        return sorted_desc.shape[0] - np.searchsorted(sorted_desc[::-1], v, side="right")  # all but those <= v

    def topk(self, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        n = x.shape[0]
        k = min(k, n)
        idx = _top_of_candidates(x, k) if n >= SHORTCUTS_FROM and 4 * k <= n >> 3 else None
        if idx is None:
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
