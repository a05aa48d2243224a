"""Streams one request's events to the terminal: text (or JSON Lines) on stdout, status on stderr.

Ctrl+C cancels the run (it still ends with its summary); a `Failed` event exits 1 with its one line.
"""

from __future__ import annotations

import json
import sys
from typing import IO, Any

from app.core.events import Failed, Finished, Loaded, Loading, Prefilled, Request, Step
from app.core.model_thread import ModelThread


def summary(ev: Finished, text: str) -> dict[str, Any]:
    m = ev.metrics
    return {
        "summary": True, "finish_reason": ev.reason, "prompt_tokens": m.prompt_tokens,
        "generated_tokens": m.generated_tokens, "ttft_s": m.ttft_s,
        "decode_tokens_per_s": m.decode_tokens_per_s, "prefill_tokens_per_s": m.prefill_tokens_per_s,
        "itl_mean_s": m.itl_mean_s, "itl_p95_s": m.itl_p95_s, "total_s": m.total_s,
        "kv_cache_bytes": m.kv_cache_bytes, "seed": ev.trace.seed if ev.trace else None, "text": text,
    }


def _line(obj: dict[str, Any], *outs: IO[str] | None) -> None:
    s = json.dumps(obj, ensure_ascii=False) + "\n"
    for out in outs:
        if out is not None:
            out.write(s)


def stream_to_terminal(request: Request, json_out: bool = False, trace_path: str | None = None) -> int:
    try:
        trace = open(trace_path, "w", encoding="utf-8") if trace_path else None  # noqa: SIM115
    except OSError as e:
        print(f"logitlab: error: cannot write the trace: {e.strerror}: {trace_path}", file=sys.stderr)
        return 2
    worker = ModelThread()
    worker.submit(request)
    text: list[str] = []
    try:
        while True:
            try:
                ev = worker.events.get(timeout=0.1)
            except Exception:  # noqa: BLE001 - queue.Empty: keep waiting (lets Ctrl+C through)
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
                print(f"seed {ev.seed}", file=sys.stderr)
            elif isinstance(ev, Step):
                text.append(ev.text)
                if ev.trace is not None:
                    _line(ev.trace.to_json(), sys.stdout if json_out else None, trace)
                if not json_out:
                    sys.stdout.write(ev.text)
                    sys.stdout.flush()
            elif isinstance(ev, Finished):
                _line(summary(ev, "".join(text)), sys.stdout if json_out else None, trace)
                if not json_out:
                    sys.stdout.write("\n")
                print(f"[{ev.reason}] {ev.metrics.line()}", file=sys.stderr)
                return 0
    except KeyboardInterrupt:
        worker.cancel()
        return 130
    finally:
        worker.close()
        if trace is not None:
            trace.close()
