"""`logitlab sweep` runs the cells of one prompt together, batches of whole cells up to a number of samples, and
prints what it prints one cell at a time (in process, on the real model thread and tiny models): the same
samples and counts; the same figures to float32's last digits (a CPU's matrix products, torch's or MLX's, may
round by batch size: BLAS picks its kernel by the number of rows)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest

from app.cli.compare import SweepPlan, sweep_to_terminal
from app.core.compare.job_plan import cell_batches
from app.core.compare.statistics import make_grid, parse_axis
from app.core.events import Request
from app.core.models.sources import ModelSpec
from app.core.settings import SamplerSettings


def test_cells_go_in_batches_of_whole_cells_up_to_the_row_cap():
    cells = make_grid(SamplerSettings(), [parse_axis("temperature=0.2,0.7,1.2"), parse_axis("top_p=0.8,0.95,1")])
    assert [len(b) for b in cell_batches(cells, 8, 64)] == [8, 1]
    assert [len(b) for b in cell_batches(cells, 8, 24)] == [3, 3, 3]
    assert [len(b) for b in cell_batches(cells, 8, 1)] == [1] * 9  # one cell at a time
    assert [len(b) for b in cell_batches(cells, 64, 64)] == [1] * 9
    assert [c for b in cell_batches(cells, 3, 10) for c in b] == cells


@pytest.mark.parametrize("backend", ["torch", "mlx"])
@pytest.mark.parametrize("csv_out", [False, True])
def test_a_batched_sweep_prints_what_one_cell_at_a_time_prints(tiny_path: Path, capsys, backend: str, csv_out: bool):
    base = SamplerSettings(seed=7, max_tokens=6)
    axes = [parse_axis("temperature=0.3,1.0,1.6"), parse_axis("top_p=0.8,1")]
    prompts = tuple(Request(model=ModelSpec(str(tiny_path), backend), prompt=p, settings=base, n=3)
                    for p in ("Hello", "def add(a, b):"))
    plan = SweepPlan(prompts, tuple(make_grid(base, axes)), ("temperature", "top_p"), r"\w+", csv_out)
    out = {}
    for rows in (1, 9, 64):  # one cell at a time, three cells a batch, every cell of a prompt in one batch
        assert sweep_to_terminal(SweepPlan(**{**plan.__dict__, "batch_rows": rows})) == 0
        out[rows] = capsys.readouterr()
    for rows in (9, 64):
        assert_same_output(out[rows].out, out[1].out, csv_out, exact=backend == "mlx")
    assert len(out[1].out.splitlines()) == 2 * 6 + csv_out
    progress = [x for x in out[1].err.splitlines() if x.startswith("cell ")]
    assert progress == [x for x in out[64].err.splitlines() if x.startswith("cell ")] and len(progress) == 12


def assert_same_output(got: str, want: str, csv_out: bool, exact: bool) -> None:
    if exact:
        assert got == want
        return
    rows = [list(csv.reader(io.StringIO(x))) if csv_out else [json.loads(line) for line in x.splitlines()]
            for x in (got, want)]
    assert_close(rows[0], rows[1])


def assert_close(got: object, want: object) -> None:
    """Equal, but floats to float32's precision (counts, texts and keys exactly)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys()
        for k in want:
            assert_close(got[k], want[k])
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert_close(a, b)
    elif isinstance(want, float) or (isinstance(want, str) and _is_float(want) and "." in want):
        assert math.isclose(float(got), float(want), rel_tol=1e-5, abs_tol=1e-6), (got, want)
    else:
        assert got == want


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
