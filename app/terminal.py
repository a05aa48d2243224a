"""Streams one request's events to the terminal: text (or JSON Lines) on stdout, status on stderr.

A request of n samples streams JSON lines as they come (each with its `sequence`); as text it prints the
samples one after another, each once it is complete. Ctrl+C cancels the run (it still ends with its summary);
a `Failed` event, or a sample that ends in error (its tokens kept, its trace saved), exits 1 with its one line.
"""

from __future__ import annotations

import json
import os
import queue
import sys
from pathlib import Path
from typing import IO, Any

from app.core.events import Failed, Finished, Loaded, Loading, Prefilled, Request, Step
from app.core.model_thread import ModelThread


def summary(ev: Finished, text: str) -> dict[str, Any]:
    m = ev.metrics
    return {
        "summary": True, "sequence": ev.sequence, "finish_reason": ev.reason, "reused_tokens": m.reused_tokens,
        "prompt_tokens": m.prompt_tokens,
        "generated_tokens": m.generated_tokens, "ttft_s": m.ttft_s,
        "decode_tokens_per_s": m.decode_tokens_per_s, "prefill_tokens_per_s": m.prefill_tokens_per_s,
        "itl_mean_s": m.itl_mean_s, "itl_p95_s": m.itl_p95_s, "total_s": m.total_s,
        "kv_cache_bytes": m.kv_cache_bytes, "seed": ev.trace.seed if ev.trace else None, "text": text,
    }


def _line(obj: dict[str, Any], out: IO[str]) -> None:
    out.write(json.dumps(obj, ensure_ascii=False) + "\n")


def trace_paths(path: str, n: int) -> list[Path]:
    """Where each sample's trace goes: the path itself for one sample, `name.1.jsonl`... for more."""
    p = Path(path)
    return [p] if n == 1 else [p.with_name(f"{p.stem}.{i}{p.suffix}") for i in range(n)]


def stream_to_terminal(request: Request, json_out: bool = False, trace_path: str | None = None) -> int:
    """Run `request` and stream it; the trace files are written (atomically) once each sample is complete."""
    worker = ModelThread()
    worker.submit(request)
    texts: dict[int, list[str]] = {i: [] for i in range(request.n)}
    left = set(request.run_ids)
    live = request.n == 1 and not json_out  # one sample streams as text; several print once each is complete
    code = 0
    try:
        while left:
            try:
                ev = worker.events.get(timeout=0.1)
            except queue.Empty:  # keep waiting, with a timeout so that Ctrl+C gets through
                continue
            if isinstance(ev, Failed):
                print(f"logitlab: error: {ev.message}", file=sys.stderr)
                return 1
            if isinstance(ev, Loading) and not ev.total:
                print(ev.message, file=sys.stderr)
            elif isinstance(ev, Loaded):
                i = ev.info
                print(f"loaded {i.name}: {i.parameters / 1e6:.1f}M parameters, {i.backend} on {i.device}, "
                      f"{i.quantization or i.dtype}, in {ev.seconds:.1f} s", file=sys.stderr)
            elif isinstance(ev, Prefilled):
                seeds = f"seeds {ev.seed}..{ev.seed + request.n - 1}" if request.n > 1 else f"seed {ev.seed}"
                reused = f", {ev.reused} prompt tokens reused" if ev.reused else ""
                print(f"{seeds}{reused}", file=sys.stderr)
            elif isinstance(ev, Step):
                texts[ev.sequence].append(ev.text)
                if json_out and ev.trace is not None:
                    _line({**ev.trace.to_json(), "sequence": ev.sequence}, sys.stdout)
                elif live:
                    sys.stdout.write(ev.text)
                    sys.stdout.flush()
            elif isinstance(ev, Finished):
                left.discard(ev.run_id)
                if not _finished(ev, request, "".join(texts[ev.sequence]), json_out, live, trace_path):
                    code = 1
        return code
    except KeyboardInterrupt:
        worker.cancel()
        return 130
    except OSError as e:  # standard output is full, closed, or a broken pipe
        worker.cancel()
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        print(f"logitlab: error: cannot write to standard output: {e.strerror or e}", file=sys.stderr)
        return 1
    finally:
        worker.close()


def _finished(ev: Finished, request: Request, text: str, json_out: bool, live: bool, trace_path: str | None) -> bool:
    """Print the end of one sample and save its trace; False if the sample ended in error or the trace could
    not be written."""
    if json_out:
        _line(summary(ev, text), sys.stdout)
    elif live:
        sys.stdout.write("\n")
    else:
        seed = ev.trace.seed if ev.trace is not None else "?"
        sys.stdout.write(f"--- sample {ev.sequence + 1} of {request.n} (seed {seed}) ---\n{text}\n")
    sys.stdout.flush()
    label = f"sample {ev.sequence + 1}: " if request.n > 1 else ""
    print(f"{label}[{ev.reason}] {ev.metrics.line()}", file=sys.stderr)
    if ev.message:
        print(f"logitlab: error: {label}{ev.message}", file=sys.stderr)
    if trace_path and ev.trace is not None:
        path = trace_paths(trace_path, request.n)[ev.sequence]
        try:
            ev.trace.save(path)
        except OSError as e:
            print(f"logitlab: error: cannot write the trace: {e.strerror}: {path}", file=sys.stderr)
            return False
    return ev.reason != "error"
