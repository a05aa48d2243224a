"""The strength × layer grid of a steering vector: a cell per (layers, strength), each a steered run of one prompt
under one seed, then each cell's text and its perplexity under the unsteered model, the cells where fluency broke
marked. Strength 0 is always the first column: the unsteered text, the baseline the others are measured against.
The cells run as a job plan (`SteerGridPlan`, one cell a job: a steered request decodes beside its own twins, not
beside other cells) through the compare views' machinery (`job_plan`); this module reads finished runs, no model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.compare.job_plan import JobPlan, as_request, cell_batches
from app.core.control_vectors import ControlVector
from app.core.events import Request
from app.core.record.steer_record import first_divergence, perplexity
from app.core.record.trace import RunTrace
from app.core.settings import SamplerSettings
from app.core.stage_inputs import Steering

FLUENCY = 2.0  # a cell whose perplexity under the unsteered model is this many times the unsteered text's: broken
MAX_CELLS = 64


@dataclass(frozen=True)
class GridCell:
    """One cell: its row (a set of layers) and column (a strength), and the settings its run is made with."""

    row: int
    col: int
    layers: tuple[int, ...]
    strength: float
    settings: SamplerSettings


def make_grid(settings: SamplerSettings, path: str, layer_sets: Sequence[tuple[int, ...]],
              strengths: Sequence[float], vector: ControlVector | None = None) -> list[GridCell]:
    """The cells, rows by layer set, columns by strength (0 first, added where missing: the baseline); a ValueError
    where there are too many cells or none, or (given the `vector`) a layer it has no direction for."""
    cols = [0.0, *sorted({float(s) for s in strengths} - {0.0})]
    if not layer_sets or len(cols) < 2:
        raise ValueError("a grid needs at least one set of layers and a strength other than 0")
    if vector is not None and (missing := sorted({n for layers in layer_sets for n in layers} - set(vector.layers))):
        raise ValueError(f"the vector has no direction for layer {missing[0]} (it has "
                         f"{', '.join(map(str, vector.layers))}): change the layer sets")
    if len(layer_sets) * len(cols) > MAX_CELLS:
        raise ValueError(f"{len(layer_sets)} × {len(cols)} cells: at most {MAX_CELLS}")
    return [GridCell(r, c, tuple(layers), s, settings.with_(steering=Steering(path, tuple(layers), s)))
            for r, layers in enumerate(layer_sets) for c, s in enumerate(cols)]


@dataclass(frozen=True)
class CellResult:
    """A cell's outcome: its first sample's text, the samples' mean perplexity under the unsteered model, mean KL per
    step from it (0 unsteered), the first step a sample's draw left the unsteered one's, and the strength relative to
    the residual stream's norm (the largest over its layers; None where unknown)."""

    cell: GridCell
    text: str
    perplexity: float | None
    mean_kl: float
    diverged_at: int | None
    relative: float | None
    broken: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"layers": list(self.cell.layers), "strength": self.cell.strength, "relative": self.relative,
                "perplexity_unsteered": self.perplexity, "mean_kl": self.mean_kl, "diverged_at": self.diverged_at,
                "broken": self.broken, "text": self.text}


def cell_result(cell: GridCell, traces: Sequence[RunTrace], vector: ControlVector | None) -> CellResult:
    """What a cell's finished samples say (a steered run's perplexity is the twin's; an unsteered one's its own)."""
    ppls = [p for t in traces if (p := _perplexity(t)) is not None]
    kls = [st.sample.steer.kl for t in traces for st in t.steps if st.sample.steer is not None]
    firsts = [d for t in traces if (d := first_divergence(t.steps)) is not None]
    rel = None
    if vector is not None and cell.strength:
        found = [r for n in cell.layers if n in vector.directions and (r := vector.relative(n, cell.strength))]
        rel = max(found) if found else None
    return CellResult(cell, traces[0].text if traces else "", sum(ppls) / len(ppls) if ppls else None,
                      sum(kls) / len(kls) if kls else 0.0, min(firsts) if firsts else None, rel)


def _perplexity(trace: RunTrace) -> float | None:
    if any(st.sample.steer is not None for st in trace.steps):
        return perplexity(trace.steps)
    lps = [lp for st in trace.steps if (lp := st.sample.raw_logprob) is not None]
    return math.exp(-sum(lps) / len(lps)) if lps else None


def mark_broken(results: Sequence[CellResult]) -> list[CellResult]:
    """Each result with `broken` set where its perplexity is `FLUENCY` times its row's unsteered one or more."""
    base = {r.cell.row: r.perplexity for r in results if r.cell.strength == 0}
    out = []
    for r in results:
        b = base.get(r.cell.row)
        broken = bool(r.cell.strength and r.perplexity is not None and b and r.perplexity >= FLUENCY * b)
        out.append(CellResult(r.cell, r.text, r.perplexity, r.mean_kl, r.diverged_at, r.relative, broken))
    return out


@dataclass
class GridRun:
    """A cell of the plan: its request once started, its result once done."""

    cell: GridCell
    request: Request | None = None
    result: CellResult | None = None


@dataclass(eq=False)
class SteerGridPlan(JobPlan):
    """The grid's cells, one job each (`cell_batches` of one cell: a steered request runs beside its twins only)."""

    cells: list[GridRun] = field(default_factory=list)
    base: Request = field(default_factory=Request)
    n: int = 1

    def _next(self) -> tuple[Request, ...]:
        batch = next((b for b in cell_batches(self.cells, self.n, self.n) if b[0].request is None), [])
        for run in batch:
            run.request = as_request(self.base, run.cell.settings, self.n)
        return tuple(run.request for run in batch if run.request is not None)
