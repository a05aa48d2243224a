"""The sampler step for B rows that share settings (N samples, a sweep cell): one device graph and one host read.

`start_samples` maps `sampling.py`'s one-row device step over the rows with the executor's vmap
(`backends.ops.vmap`: torch.func.vmap, mx.vmap, and numpy's own on the torch backend's CPU executor,
`backends.numpy_rows`), compiled where the executor compiles its steps, and reads the batch's arrays back once for
all rows (a `PendingSample` of B rows: the one reading of one row or many). Each row's outcome equals
`start_sample`'s for it, bit for bit. Where the executor has no vmap (the reference `NumpyOps`), the rows' histories
differ in kind, or there is one row (mapping it costs more than it saves), the rows run one by one through
`start_sample`. Knows nothing of models or runs: `decoding.decode` calls it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from app.core.record.record import Sample
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import (
    PendingSample,
    before_step,
    compiled_step,
    device_step,
    grammar_check,
    keep_state,
    start_sample,
    step_key,
    step_state,
    uniforms,
)
from app.core.sampler.step_output import Mode, StepOutput
from app.core.settings import SamplerSettings
from backends.ops import Array, ArrayOps

MappedStep = Callable[..., tuple[StepOutput, tuple[Array, ...]]]  # (B, V) logits, (B, 2) uniforms, (B, ...) state


@dataclass(slots=True)
class PendingRows:
    """B drawn tokens from one step per row (an executor without a vmap): read as a mapped step's `PendingSample`."""

    ops: ArrayOps
    rows: list[PendingSample]

    @property
    def tokens(self) -> Array:  # (B, 1)
        return self.ops.stack([p.tokens for p in self.rows])

    @property
    def outputs(self) -> tuple[Array, ...]:
        return tuple(a for p in self.rows for a in p.outputs)

    def results(self) -> list[Sample | int]:
        return [p.result() for p in self.rows]

    def read(self) -> Callable[[], list[Sample | int]]:
        """As `PendingSample.read`: every row's arrays read now, their outcomes made by the call returned."""
        made = [p.read() for p in self.rows]
        return lambda: [out for make in made for out in make()]

    @property
    def host_only(self) -> bool:
        return all(p.host_only for p in self.rows)


def start_samples(ops: ArrayOps, logits: Array, settings: SamplerSettings, us: Sequence[float], *,
                  histories: Sequence[History | None] | None = None, top_n: int = 20,
                  record: bool = True) -> PendingSample | PendingRows:
    """`start_sample` for each row i of `logits` (B, V) (or (1, V), shared by every row) with the uniform `us[i]`
    and the history `histories[i]`: every history is updated, the host transfer deferred to `results()`."""
    n, vocab = len(us), int(logits.shape[-1])
    hs = list(histories) if histories is not None else [None] * n
    if len(hs) != n or logits.shape[0] not in (1, n):
        raise ValueError(f"{n} uniforms, {len(hs)} histories and {logits.shape[0]} rows of logits disagree")
    key = step_key(ops, settings, vocab, top_n, record, hs[0])
    mapped = _mapped_step(ops, *key) if n > 1 and len({h is None for h in hs}) == 1 else None
    if mapped is None:
        last = logits.shape[0] - 1
        return PendingRows(ops, [start_sample(ops, logits[min(i, last)], settings, u, history=h, top_n=top_n,
                                              record=record) for i, (u, h) in enumerate(zip(us, hs, strict=True))])
    step, names = mapped
    x = logits if logits.shape[0] == n else ops.stack([logits[0]] * n)
    before = [before_step(ops, h) for h in hs]
    states = [step_state(ops, settings, h, vocab) for h in hs]
    state = tuple(ops.stack(list(column)) for column in zip(*states, strict=True))  # each (B, ...)
    with np.errstate(all="ignore"):  # -inf arithmetic is intended (masks), as in `start_sample`
        out, bumped = step(x, ops.f32([uniforms(u) for u in us]), *state)
    for i, h in enumerate(hs):
        if h is not None:
            keep_state(settings, h, [b[i] for b in bumped], out.token[i])
    checks = tuple(grammar_check(ops, x[i], settings, u, h, b, top_n, record)
                   for i, (u, h, b) in enumerate(zip(us, hs, before, strict=True)))
    return PendingSample(ops, out, names, tuple(float(u) for u in us), key[2], rows=True,
                         checks=checks if any(c is not None for c in checks) else ())


@lru_cache(maxsize=64)
def _mapped_step(ops: ArrayOps, settings: SamplerSettings, vocab: int, top_n: int, mode: Mode,
                 penalties: bool) -> tuple[MappedStep, tuple[str, ...]] | None:
    """The one-row device step of a `step_key` mapped over rows and compiled, and its stage names; None where the
    executor has no vmap."""
    step, names = device_step(ops, settings, vocab, top_n, mode, penalties)
    mapped = compiled_step(ops, step, mode, rows=True)
    return None if mapped is None else (mapped, names)
