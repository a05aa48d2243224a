"""numpy with a vmap: one row's sampler step run over R rows at once, as torch.func.vmap and mx.vmap do.

`NumpyRows.vmap(fn)` hands `fn` each argument as `Rows`, an (R, ...) array that one row's code sees as one row's
(its shape, its indexing, its reductions), so every numpy call of the step is made once for the R rows. Each row's
numbers equal those of the step run on that row alone, bit for bit (the batched sampler's tests hold it): the same
ufuncs over the same contiguous rows. What the one-row code may do with an array: operators, ufuncs and their
reductions, indexing (by ints, slices, arrays, or one `Rows` of ids: a gather), and `NumpyRows`' methods; anything
else (turning it into one number, a numpy function not listed) raises rather than mixing rows.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from backends.ops import NumpyOps


class Rows(NDArrayOperatorsMixin):
    """R rows of one row's array: `a` is (R, *shape), seen by the one-row code as `shape`."""

    __slots__ = ("a",)

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    @property
    def shape(self) -> tuple[int, ...]:
        return self.a.shape[1:]

    @property
    def ndim(self) -> int:
        return self.a.ndim - 1

    @property
    def dtype(self) -> np.dtype:
        return self.a.dtype

    def __len__(self) -> int:
        return self.a.shape[1]

    def copy(self) -> Rows:
        return Rows(self.a.copy())

    def __repr__(self) -> str:
        return f"Rows({self.a!r})"

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError("a row-mapped array cannot become one array (each row is its own)")

    def __bool__(self) -> bool:
        raise TypeError("a row-mapped array has no single truth value (each row is its own)")

    def __getitem__(self, key: Any) -> Rows:
        return Rows(_index(self.a, key))

    def __setitem__(self, key: Any, value: Any) -> None:
        key = key if isinstance(key, tuple) else (key,)
        value = value.a if type(value) is Rows else value
        if len(key) == 1 and type(key[0]) is Rows:  # x[ids] = values, ids (R, k): a scatter per row
            ids = key[0].a
            self.a[_batch_index(ids), ids] = value
        elif not any(type(k) is Rows for k in key):
            self.a[(slice(None), *key)] = value
        else:
            raise TypeError("row-mapped assignment takes one array of ids")

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if kwargs.get("out") is not None:
            return NotImplemented
        if method == "__call__":
            return _wrap(ufunc(*aligned(inputs), **kwargs))
        if method == "reduce" and len(inputs) == 1:
            x = inputs[0]
            axis = kwargs.pop("axis", 0)
            return _wrap(ufunc.reduce(x.a, axis=_row_axis(axis, x.a.ndim - 1), **kwargs))
        return NotImplemented

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return NotImplemented  # (numpy then raises: a function the one-row code may not call on rows)


def rank(x: Any) -> int:
    """The rank one row sees: a `Rows`'s without its row axis, anything else its own."""
    return x.a.ndim - 1 if type(x) is Rows else np.ndim(x)


def aligned(args: Sequence[Any]) -> list[Any]:
    """The arguments as plain arrays that broadcast as one row's would: each `Rows` given ones after its row axis up
    to the highest rank (a row's scalar against a row's vector), the rest as they are (right-aligned by numpy)."""
    top = max(rank(x) for x in args)
    out = []
    for x in args:
        if type(x) is Rows:
            a = x.a
            out.append(a.reshape(a.shape[:1] + (1,) * (top - a.ndim + 1) + a.shape[1:]) if a.ndim - 1 < top else a)
        else:
            out.append(x)
    return out


def _wrap(x: Any) -> Any:
    return tuple(Rows(a) for a in x) if isinstance(x, tuple) else Rows(x)


def _row_axis(axis: int | tuple[int, ...] | None, ndim: int) -> int | tuple[int, ...]:
    """One row's axis (or axes; None: all of them) as the axis of the (R, ...) array."""
    if axis is None:
        return tuple(range(1, ndim + 1))
    if isinstance(axis, tuple):
        return tuple(a + 1 if a >= 0 else a for a in axis)
    return axis + 1 if axis >= 0 else axis


def _batch_index(ids: np.ndarray) -> np.ndarray:
    """(R, 1, ...) the row numbers, to pair with ids (R, ...) in an advanced index."""
    return np.arange(ids.shape[0]).reshape((-1,) + (1,) * (ids.ndim - 1))


def _index(a: np.ndarray, key: Any) -> np.ndarray:
    """a (R, *shape) indexed per row by one row's `key`; ids given as `Rows` (each row its own) gather along the
    axis they stand at, every other part of the key a full slice."""
    key = key if isinstance(key, tuple) else (key,)
    if not any(type(k) is Rows for k in key):
        return a[(slice(None), *key)]
    dots = [i for i, k in enumerate(key) if k is Ellipsis]
    if dots:  # (as full slices: the ids' axis is then their place in the key)
        at = dots[0]
        key = (*key[:at], *(slice(None),) * (a.ndim - len(key)), *key[at + 1:])
    at = [i for i, k in enumerate(key) if type(k) is Rows]
    if len(at) > 1 or not all(_whole(k) for i, k in enumerate(key) if i != at[0]):
        raise TypeError("row-mapped indexing takes one array of ids, the other axes whole")
    p, ids = at[0], key[at[0]].a
    if p == 0:
        return a[_batch_index(ids), ids]
    t = ids.ndim - 1  # the ids' own rank in one row
    gathered = np.moveaxis(a, p + 1, 1)[_batch_index(ids), ids]  # (R, *ids, axes before p, axes after p)
    return np.ascontiguousarray(np.moveaxis(gathered, list(range(1, 1 + t)), list(range(1 + p, 1 + p + t))))


def _whole(k: Any) -> bool:
    return isinstance(k, slice) and k == slice(None)


def _rows_of(x: Any, n: int) -> np.ndarray:
    """x as n rows: a `Rows`'s own, anything else repeated (a value every row shares)."""
    return x.a if type(x) is Rows else np.broadcast_to(np.asarray(x), (n, *np.shape(x)))


def keep_freed_memory() -> None:
    """glibc (Linux) only, process-wide: serve allocations up to 32 MiB from the heap and keep up to 128 MiB of freed
    heap rather than giving it back. A batched step's (R, S+1, V) temporaries are larger than glibc's starting mmap
    threshold, and its heap top is trimmed after every step: each step then faults its pages in afresh (928 faults,
    about a quarter of a 16-row step at a 4k vocabulary: `benchmarks/n_samples.py`)."""
    global _kept
    if _kept or sys.platform != "linux":
        return
    _kept = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)
        libc.mallopt(M_TRIM_THRESHOLD, 128 << 20)
    except (OSError, AttributeError):  # (another C library: its own policy stands)
        pass


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_kept = False


class NumpyRows(NumpyOps):
    """numpy, with a vmap (`Rows`): the torch backend's executor on a CPU, where the B rows of `--n` share one
    sampler step. A step of one row runs as on `NumpyOps` (each method's rows branch costs one type check)."""

    def vmap(self, fn: Callable[..., tuple[Any, ...]]) -> Callable[..., tuple[np.ndarray, ...]]:
        keep_freed_memory()

        def mapped(*args: Any) -> tuple[np.ndarray, ...]:
            n = len(args[0])
            outs = fn(*(Rows(np.asarray(a)) for a in args))
            return tuple(_rows_of(o, n) for o in outs)

        return mapped

    def f32(self, x: Any) -> Any:
        return Rows(x.a.astype(np.float32, copy=False)) if type(x) is Rows else np.asarray(x, dtype=np.float32)

    def stack(self, xs: list[Any]) -> Any:
        if not any(type(x) is Rows for x in xs):
            return np.array(xs)
        n = next(x.a.shape[0] for x in xs if type(x) is Rows)
        dtype = np.array([x.a[0] if type(x) is Rows else x for x in xs]).dtype  # as one row's np.array makes it
        return Rows(np.stack([_rows_of(x, n) for x in xs], axis=1).astype(dtype, copy=False))

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        if type(cond) is Rows or type(a) is Rows or type(b) is Rows:
            return Rows(np.where(*aligned((cond, a, b))))
        return super().where(cond, a, b)

    def cumsum(self, x: Any) -> Any:
        return Rows(np.cumsum(x.a, axis=-1, dtype=x.a.dtype)) if type(x) is Rows else super().cumsum(x)

    def count_cumsum(self, mask: Any) -> Any:
        return Rows(np.cumsum(mask.a, axis=-1, dtype=np.int32)) if type(mask) is Rows else super().count_cumsum(mask)

    def sort_desc(self, x: Any) -> Any:
        return Rows(-np.sort(-x.a, axis=-1)) if type(x) is Rows else super().sort_desc(x)

    def kth_largest(self, x: Any, k: int) -> Any:
        if type(x) is not Rows:
            return super().kth_largest(x, k)
        n = x.a.shape[-1]
        return Rows(np.partition(x.a, n - k, axis=-1)[:, n - k])

    def count_above(self, sorted_desc: Any, v: Any) -> Any:
        if type(sorted_desc) is not Rows and type(v) is not Rows:
            return super().count_above(sorted_desc, v)
        n = (sorted_desc if type(sorted_desc) is Rows else v).a.shape[0]
        pairs = zip(_rows_of(sorted_desc, n), _rows_of(v, n), strict=True)  # (numpy has no searchsorted per row)
        return Rows(np.stack([np.searchsorted(-row, -at, side="left") for row, at in pairs]))

    def topk(self, x: Any, k: int) -> tuple[Any, Any]:
        if type(x) is not Rows:
            return super().topk(x, k)
        a = x.a
        n = a.shape[-1]
        k = min(k, n)
        part = np.argpartition(a, n - k, axis=-1)[:, n - k:] if k < n else np.broadcast_to(np.arange(n), a.shape)
        order = np.lexsort((part, -np.take_along_axis(a, part, -1)), axis=-1)  # value descending, ties lower id
        idx = np.take_along_axis(part, order, -1)
        return Rows(np.take_along_axis(a, idx, -1)), Rows(idx)

    def take(self, x: Any, idx: Any) -> Any:
        if type(x) is not Rows and type(idx) is Rows:
            return Rows(np.asarray(x)[idx.a])
        return x[idx]

    def survivors(self, x: Any, line: Any = None) -> Any:
        return None if type(x) is Rows else super().survivors(x, line)  # (rows keep one shape: the whole vectors)

    def scatter(self, x: Any, idx: Any, values: Any) -> Any:
        if type(x) is not Rows:
            return super().scatter(x, idx, values)
        out = x.copy()
        out[idx] = values
        return out


NUMPY_ROWS = NumpyRows()
