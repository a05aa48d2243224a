"""What the session's views showed, as the core recorded it, so that a reopened session draws it again: the beam
search (each step's cut, the hypotheses, each one's steps as a run), the speculative run's rounds and totals, the
sweep's grid with each cell's statistics, the Sample ×N list's, the multiverse's tree, the think probes, the steering
grid's cells with their results. Plain records that name runs by id (`Views.renumbered`: as a reopened session
numbers them), and their JSON, the session file's `views` object (`views_json`, `read_views`; a view that showed
nothing has no key, as an older file has none for the probes). No Qt, no models: nothing is recomputed; what the
records hold (numpy's, through the traces) is imported when read, not before the window's first paint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from app.core.files import brief
from app.core.models.sources import ModelSpec
from app.core.plain_json import from_json, to_json
from app.core.record.multiverse import Multiverse
from app.core.record.spec_record import SpecRound, SpecStats, SpecSummary
from app.core.session.run_group import model_json, read_model

if TYPE_CHECKING:
    from app.core.compare.statistics import Axis, Cell, Comparison
    from app.core.compare.steer_grid import CellResult, GridCell
    from app.core.decoding.beam import BeamFinished, BeamSettings, BeamStarted, BeamStep
    from app.core.decoding.probes import ThinkProbe


@dataclass(frozen=True)
class BeamRecord:
    """A finished beam search: the model and settings it ran with, each step's cut, and its end."""

    model: ModelSpec
    settings: BeamSettings
    started: BeamStarted
    steps: tuple[BeamStep, ...]
    texts: dict[int, str]  # display text of every token a step names
    finished: BeamFinished  # the hypotheses, their texts and each one's steps as a run (empty: it cannot open)


@dataclass(frozen=True)
class SpecRecord:
    """A speculative run's rounds and totals, as its dock drew them."""

    run_id: int  # the speculative run (0: not in the session)
    draft: str  # the draft model's source
    k: int  # the draft length asked for (0: adaptive)
    rounds: tuple[SpecRound, ...]
    stats: SpecStats
    summary: SpecSummary | None  # None: it ended before its summary (stopped while prefilling)


@dataclass(frozen=True)
class SweptCell:
    """A sweep's cell: its settings, its samples' runs (none: not started), their statistics once all ended."""

    cell: Cell
    run_ids: tuple[int, ...]
    result: Comparison | None
    stopped: bool = False  # its samples were cancelled or failed before they ended: not scored


@dataclass(frozen=True)
class SweepRecord:
    """A sweep's grid: its axes (rows, then columns), what colours it, and its cells."""

    axes: tuple[Axis, ...]
    samples: int  # N, per cell
    statistic: str  # what colours the cells (a `SetStats` field)
    pattern: str  # match_rate's regular expression ("": none)
    batches: int  # jobs it took so far
    cells: tuple[SweptCell, ...]


@dataclass(frozen=True)
class SteeredCell:
    """A steering grid's cell: its layers, strength and settings, its samples' runs (none: not started), its result
    once all ended."""

    cell: GridCell
    run_ids: tuple[int, ...]
    result: CellResult | None
    stopped: bool = False  # its samples were cancelled or failed before they ended: no result


@dataclass(frozen=True)
class SteerGridRecord:
    """The steering dock's strength × layer grid: its strengths and layer sets as typed, N, and its cells."""

    strengths: str
    layer_sets: str
    samples: int  # N, per cell
    cells: tuple[SteeredCell, ...]


@dataclass(frozen=True)
class SamplesRecord:
    """The Sample ×N list: its samples' runs in sample order, and their statistics."""

    run_ids: tuple[int, ...]
    result: Comparison


@dataclass(frozen=True)
class MultiverseRecord:
    """The multiverse the dock showed: the model it grew on, and the tree (its origin names a run by id)."""

    model: ModelSpec
    multiverse: Multiverse


@dataclass(frozen=True, eq=False)
class ProbesRecord:
    """The think probes the dock drew: the run probed (0: not in the session), the dock's every-K and answers box
    as they were, and the probes in step order. Equal to another of the same JSON (its probes hold arrays)."""

    run_id: int
    every: int
    answers: str
    probes: tuple[ThinkProbe, ...]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProbesRecord) and _probes_json(self) == _probes_json(other)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class SavedProbe:
    """A `ThinkProbe` as plain data (its arrays as lists), for the session file."""

    step: int
    think_tokens: int
    top_ids: tuple[int, ...]
    top_logprobs: tuple[float, ...]
    close_logprob: float
    answers: tuple[str, ...]
    answer_logprobs: tuple[float, ...]


@dataclass(frozen=True)
class Views:
    """Each view's record (None: it showed nothing to keep)."""

    beam: BeamRecord | None = None
    speculative: SpecRecord | None = None
    sweep: SweepRecord | None = None
    samples: SamplesRecord | None = None
    multiverse: MultiverseRecord | None = None
    probes: ProbesRecord | None = None
    steer_grid: SteerGridRecord | None = None

    def renumbered(self, new_ids: Mapping[int, int]) -> Views:
        """The records with their runs' ids as `new_ids` maps them: a run it does not map is left out (0 where a
        single one is named)."""
        spec, sweep, samples, probes, grid = self.speculative, self.sweep, self.samples, self.probes, self.steer_grid
        return replace(
            self, multiverse=self.multiverse and _multiverse(self.multiverse, new_ids),
            probes=probes and replace(probes, run_id=new_ids.get(probes.run_id, 0)),
            speculative=spec and replace(spec, run_id=new_ids.get(spec.run_id, 0)),
            sweep=sweep and replace(sweep, cells=tuple(_cell(c, new_ids) for c in sweep.cells)),
            samples=samples and replace(samples, run_ids=_ids(samples.run_ids, new_ids),
                                        result=_comparison(samples.result, new_ids)),
            steer_grid=grid and replace(grid, cells=tuple(replace(c, run_ids=_ids(c.run_ids, new_ids))
                                                          for c in grid.cells)))


def _multiverse(r: MultiverseRecord, new_ids: Mapping[int, int]) -> MultiverseRecord:
    """Its origin's run renumbered; a run left out leaves it looking ahead from no run (its prefix is its own)."""
    origin = r.multiverse.origin
    if origin is None:
        return r
    moved = (new_ids[origin[0]], origin[1]) if origin[0] in new_ids else None
    return replace(r, multiverse=replace(r.multiverse, origin=moved))


def _ids(ids: tuple[int, ...], new_ids: Mapping[int, int]) -> tuple[int, ...]:
    return tuple(new_ids[i] for i in ids if i in new_ids)


def _comparison(c: Comparison, new_ids: Mapping[int, int]) -> Comparison:
    return replace(c, samples=tuple(replace(s, run_id=new_ids.get(s.run_id, 0)) for s in c.samples))


def _cell(c: SweptCell, new_ids: Mapping[int, int]) -> SweptCell:
    return replace(c, run_ids=_ids(c.run_ids, new_ids),
                   result=None if c.result is None else _comparison(c.result, new_ids))


# the session file's `views` object ----------------------------------------------------------------------------

def views_json(views: Views) -> dict[str, Any]:
    """The `views` object: one key per view with a record."""
    out: dict[str, Any] = {} if views.beam is None else {"beam": _beam_json(views.beam)}
    if (mv := views.multiverse) is not None:
        out["multiverse"] = {"model": model_json(mv.model), "tree": mv.multiverse.to_dict()}
    for key in ("speculative", "sweep", "samples", "steer_grid"):
        if (record := getattr(views, key)) is not None:
            out[key] = to_json(record)
    if views.probes is not None:
        out["probes"] = _probes_json(views.probes)
    return out


def _probes_json(r: ProbesRecord) -> dict[str, Any]:
    return {"run_id": r.run_id, "every": r.every, "answers": r.answers,
            "probes": [to_json(_saved(p)) for p in r.probes]}


def _saved(p: ThinkProbe) -> SavedProbe:
    return SavedProbe(p.step, p.think_tokens, tuple(int(i) for i in p.top_ids), tuple(float(x) for x in p.top_logprobs),
                      float(p.close_logprob), tuple(p.answers), tuple(float(x) for x in p.answer_logprobs))


def _read_probes(value: Any) -> ProbesRecord:
    obj, where = _object(value, "views.probes"), "views.probes"
    saved = _read(obj, "probes", tuple[SavedProbe, ...], where)
    return ProbesRecord(_read(obj, "run_id", int, where), _read(obj, "every", int, where),
                        _read(obj, "answers", str, where),
                        tuple(_probe(p, f"{where}.probes[{i}]") for i, p in enumerate(saved)))


def _probe(p: SavedProbe, where: str) -> ThinkProbe:
    import numpy as np  # (see the docstring)

    from app.core.decoding.probes import ThinkProbe

    if len(p.top_ids) != len(p.top_logprobs) or len(p.answers) != len(p.answer_logprobs):
        raise ValueError(f"{where}: {len(p.top_ids)} top ids for {len(p.top_logprobs)} log-probabilities, "
                         f"{len(p.answers)} answers for {len(p.answer_logprobs)}")
    return ThinkProbe(p.step, p.think_tokens, np.array(p.top_ids, dtype=np.int64),
                      np.array(p.top_logprobs, dtype=np.float32), p.close_logprob, p.answers,
                      np.array(p.answer_logprobs, dtype=np.float32))


def read_views(obj: Any) -> Views:
    """The records `views_json` wrote (a key absent: that view showed nothing); a ValueError naming the field
    otherwise."""
    views = _object(obj, "views")
    return Views(**{key: read(views[key]) for key, read in READERS.items() if key in views})


def _read_spec(value: Any) -> SpecRecord:
    return from_json(SpecRecord, value, "views.speculative")


def _read_sweep(value: Any) -> SweepRecord:
    from app.core.compare.statistics import Axis  # (numpy's, through the traces: see the docstring)

    obj, where = _object(value, "views.sweep"), "views.sweep"
    cells = tuple(_read_cell(c, f"{where}.cells[{i}]") for i, c in enumerate(_read(obj, "cells", list, where)))
    return SweepRecord(_read(obj, "axes", tuple[Axis, ...], where), _read(obj, "samples", int, where),
                       _read(obj, "statistic", str, where), _read(obj, "pattern", str, where),
                       _read(obj, "batches", int, where), cells)


def _read_cell(value: Any, where: str) -> SweptCell:
    from app.core.compare.statistics import Cell, Comparison

    obj = _object(value, where)
    return SweptCell(_read(obj, "cell", Cell, where), _read(obj, "run_ids", tuple[int, ...], where),
                     _read(obj, "result", Comparison | None, where), _read(obj, "stopped", bool, where))


def _read_steer_grid(value: Any) -> SteerGridRecord:
    obj, where = _object(value, "views.steer_grid"), "views.steer_grid"
    cells = tuple(_read_steered(c, f"{where}.cells[{i}]") for i, c in enumerate(_read(obj, "cells", list, where)))
    return SteerGridRecord(_read(obj, "strengths", str, where), _read(obj, "layer_sets", str, where),
                           _read(obj, "samples", int, where), cells)


def _read_steered(value: Any, where: str) -> SteeredCell:
    from app.core.compare.steer_grid import CellResult, GridCell  # (numpy's, through the traces: see the docstring)

    obj = _object(value, where)
    return SteeredCell(_read(obj, "cell", GridCell, where), _read(obj, "run_ids", tuple[int, ...], where),
                       _read(obj, "result", CellResult | None, where), _read(obj, "stopped", bool, where))


def _read_samples(value: Any) -> SamplesRecord:
    from app.core.compare.statistics import Comparison

    obj, where = _object(value, "views.samples"), "views.samples"
    return SamplesRecord(_read(obj, "run_ids", tuple[int, ...], where), _read(obj, "result", Comparison, where))


def _beam_json(r: BeamRecord) -> dict[str, Any]:
    from app.core.record.trace_file import step_json  # (numpy's: see the docstring)

    f = r.finished
    return {"model": model_json(r.model), "settings": to_json(r.settings), "started": to_json(r.started),
            "steps": to_json(r.steps), "texts": to_json(r.texts), "result": to_json(f.result), "said": list(f.texts),
            "runs": [[step_json(st) for st in run] for run in f.runs]}


def _read_beam(value: Any) -> BeamRecord:
    from app.core.decoding.beam import BeamFinished, BeamResult, BeamSettings, BeamStarted, BeamStep

    obj, where = _object(value, "views.beam"), "views.beam"
    started = _read(obj, "started", BeamStarted, where)
    result, said = _read(obj, "result", BeamResult, where), _read(obj, "said", tuple[str, ...], where)
    runs = _read(obj, "runs", list, where)
    if not len(said) == len(result.hypotheses) >= len(runs):
        raise ValueError(f"{where}: {len(said)} texts and {len(runs)} runs for {len(result.hypotheses)} hypotheses")
    finished = BeamFinished(started.request_id, result, said, tuple(_steps(r, f"{where}.runs[{i}]")
                                                                       for i, r in enumerate(runs)))
    return BeamRecord(read_model(_read(obj, "model", dict, where), f"{where}.model."),
                      _read(obj, "settings", BeamSettings, where), started,
                      _read(obj, "steps", tuple[BeamStep, ...], where), _read(obj, "texts", dict[int, str], where),
                      finished)


def _steps(value: Any, where: str) -> tuple[Any, ...]:
    """A hypothesis' steps as a run's (`trace_file.step_json` lines)."""
    from app.core.record.trace_file import read_step

    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list of steps, got {brief(value)}")
    texts: dict[str, str] = {}
    return tuple(read_step(_object(s, f"{where}[{i}]"), i, texts) for i, s in enumerate(value))


def _read_multiverse(value: Any) -> MultiverseRecord:
    obj, where = _object(value, "views.multiverse"), "views.multiverse"
    return MultiverseRecord(read_model(_read(obj, "model", dict, where), f"{where}.model."),
                            Multiverse.from_dict(_read(obj, "tree", dict, where), f"{where}.tree"))


READERS = {"beam": _read_beam, "speculative": _read_spec, "sweep": _read_sweep, "samples": _read_samples,
           "multiverse": _read_multiverse, "probes": _read_probes,
           "steer_grid": _read_steer_grid}


def _read(obj: dict[str, Any], key: str, tp: Any, where: str) -> Any:
    """obj[key] as a `tp` (list and dict: as they are); a missing key is an error naming it."""
    if key not in obj:
        raise ValueError(f"no {where}.{key}")
    if tp in (list, dict):
        if not isinstance(obj[key], tp):
            raise ValueError(f"{where}.{key} must be a{' list' if tp is list else 'n object'}, got {brief(obj[key])}")
        return obj[key]
    return from_json(tp, obj[key], f"{where}.{key}")


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object, got {brief(value)}")
    return value
