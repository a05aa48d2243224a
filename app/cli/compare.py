"""`logitlab generate --stats` and `logitlab sweep`: N samples per prompt and settings, with their statistics.

Both run requests on one `ModelThread` (the model loads once; each request of N samples is one prefill and one
batched decode; a sweep's cells of one prompt run together, up to `BATCH_ROWS` samples in one batch from one
prefill, and the batches after the first reuse the prompt's KV cache) and print JSON Lines on stdout
(a sweep: CSV with `--format csv`); status goes to stderr. The statistics are `app.core.compare.statistics`'s. Bad input
and a failed run give one line and a non-zero exit. Imported by `generate` and `sweep` when they run.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from app.cli.arguments import emit, status_line, to_json
from app.cli.terminal import trace_paths
from app.core.compare.job_plan import as_request, cell_batches
from app.core.compare.statistics import Cell, Comparison, compare, sweep_header, sweep_row
from app.core.events import Failed, Finished, Request
from app.core.record.trace import RunTrace
from app.core.runs.jobs import Job, stream
from app.core.runs.model_thread import ModelThread
from app.core.runs.runners import kind_of

BATCH_ROWS = 64  # a sweep's samples decoded in one batch at most (whole cells: a cell of more runs alone)


class RunError(RuntimeError):
    """A request failed as a whole (a `Failed` event), or a sample ended in error: its one line."""


@dataclass(frozen=True)
class SweepPlan:
    """What `logitlab sweep` runs: each prompt (request template) under each cell's settings, N samples each."""

    prompts: tuple[Request, ...]
    cells: tuple[Cell, ...]
    axes: tuple[str, ...]
    pattern: str | None = None
    csv_out: bool = False
    batch_rows: int = BATCH_ROWS  # samples of several cells decoded together at most (1: one cell at a time)


def collect(worker: ModelThread, request: Request) -> list[RunTrace]:
    """Run `request` on `worker`; its samples' traces in sample order. Status lines go to stderr."""
    return next(collect_each(worker, [request]))


def collect_each(worker: ModelThread, requests: Sequence[Request]) -> Iterator[list[RunTrace]]:
    """Run `requests` together on `worker` (one job); each one's traces in sample order, in request order, as soon
    as it and those before it have finished. Status lines go to stderr."""
    job = worker.start(Job(kind_of(requests[0]) if len(requests) == 1 else "together", tuple(requests)))
    finished: dict[int, dict[int, RunTrace]] = {r.id: {} for r in requests}
    told = 0
    for ev in stream(job):
        _take_event(ev, finished)
        while told < len(requests) and len(finished[requests[told].id]) == requests[told].n:
            runs = finished[requests[told].id]
            yield [runs[i] for i in range(requests[told].n)]
            told += 1


def _take_event(ev: object, finished: dict[int, dict[int, RunTrace]]) -> None:
    """One event of a job: a status line, a sample's trace kept, or a RunError for a failure."""
    if isinstance(ev, Failed):
        raise RunError(ev.message)
    if (line := status_line(ev)) is not None:
        print(line, file=sys.stderr)
    elif isinstance(ev, Finished) and ev.request_id in finished:
        if ev.reason == "error" or ev.trace is None:
            raise RunError(f"sample {ev.sequence + 1}: {ev.message or ev.reason}")
        finished[ev.request_id][ev.sequence] = ev.trace


def stats_to_terminal(request: Request, pattern: str | None, trace_path: str | None) -> int:
    """`generate --stats`: a JSON line per sample (in sample order), then one for the set."""
    return _guarded(lambda worker: _stats(worker, request, pattern, trace_path), "logitlab generate")


def _stats(worker: ModelThread, request: Request, pattern: str | None, trace_path: str | None) -> int:
    traces = collect(worker, request)
    print(seeds_text(traces[0].seed, len(traces)), file=sys.stderr)
    result = compare(traces, pattern)
    for s in result.samples:
        emit(to_json({"sample": True, **s.to_json()}))
    emit(to_json({"stats": True, **result.stats.to_json()}))
    if trace_path:
        for trace, path in zip(traces, trace_paths(trace_path, request.n), strict=True):
            try:
                trace.save(path)
            except OSError as e:  # a folder, a full device
                raise RunError(f"cannot write the trace: {e.strerror or e}: {path}") from None
    return 0


def sweep_to_terminal(plan: SweepPlan) -> int:
    """`sweep`: a line (JSON, or a CSV row) per prompt and cell, as each cell finishes; its seeds and progress on
    stderr. Prompts count from 0 on both (as `row` and `col` do)."""
    return _guarded(lambda worker: _sweep(worker, plan), "logitlab sweep")


def _sweep(worker: ModelThread, plan: SweepPlan) -> int:
    writer = csv.writer(Emitted(), lineterminator="\n") if plan.csv_out else None
    if writer is not None:
        writer.writerow(sweep_header(plan.axes))
    total, done = len(plan.prompts) * len(plan.cells), 0
    if plan.cells[0].settings.seed is not None:  # (`sweep` draws one when none is given)
        print(f"{seeds_text(plan.cells[0].settings.seed, plan.prompts[0].n)}, in every cell", file=sys.stderr)
    for p, template in enumerate(plan.prompts):
        for batch in cell_batches(plan.cells, template.n, plan.batch_rows):
            requests = [as_request(template, cell.settings, template.n) for cell in batch]
            for cell, traces in zip(batch, collect_each(worker, requests), strict=True):
                result = compare(traces, plan.pattern)
                done += 1
                print(f"cell {done}/{total}: prompt {p}, {_label(cell)}", file=sys.stderr)
                if writer is not None:
                    writer.writerow(sweep_row(p, cell, result.stats, plan.axes))
                else:
                    emit(to_json(cell_line(p, cell, result)))
    return 0


def cell_line(prompt: int, cell: Cell, result: Comparison) -> dict[str, Any]:
    """A cell's JSON line; `seed` is its first sample's (sample i drew with seed + i)."""
    return {"prompt": prompt, "row": cell.row, "col": cell.col, "settings": cell.values,
            "seed": result.samples[0].seed, **result.stats.to_json(), "texts": [s.text for s in result.samples]}


def seeds_text(first: int, n: int) -> str:
    """The seeds of n samples, as `generate` reports them: "seed 7", or "seeds 7..14" (sample i: first + i)."""
    return f"seeds {first}..{first + n - 1}" if n > 1 else f"seed {first}"


def _label(cell: Cell) -> str:
    return " ".join(f"{k}={v:g}" for k, v in cell.values.items())


def _guarded(body: Any, prog: str) -> int:
    """`body` run on a model thread; a failure is one line, begun with `prog` (the command)."""
    worker = ModelThread()
    try:
        return body(worker)
    except RunError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        worker.cancel()
        return 130
    except OSError as e:  # what else cannot be written (standard output's failure is `emit`'s OutputError)
        print(f"{prog}: error: cannot write: {e.strerror or e}", file=sys.stderr)
        return 1
    finally:
        worker.close()


class Emitted:
    """A file for csv.writer whose rows go out through `emit`, the commands' one writer, each as it is written."""

    def write(self, text: str) -> None:
        emit(text, end="")

