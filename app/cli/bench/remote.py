"""`logitlab bench --backend remote --base-url URL`: a server's throughput as Logit Lab drives it (streamed tokens
with top log-probabilities) at 1, 4 and 16 concurrent requests. A failure is one line on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from app.cli.arguments import emit, to_json
from app.core.events import Finished, Request
from app.core.models.sources import ModelSpec
from app.core.remote.remote_run import load_remote, run_remote
from app.core.settings import SamplerSettings
from backends.base import ModelLoadError
from backends.remote.backend import RemoteError, RemoteModel, where

CONCURRENCY = (1, 4, 16)


def bench_main(args: argparse.Namespace) -> int:
    """Tokens per second at each concurrency: all requests' tokens over the wall time of the batch."""
    spec = ModelSpec(source=args.model, backend="remote", base_url=args.base_url or "", api_key_env=args.api_key_env,
                     deadline=args.deadline)
    try:
        model = load_remote(spec)
    except ModelLoadError as e:
        print(f"logitlab bench: error: {e}", file=sys.stderr)
        return 1
    prompt = Path(threading.__file__).read_text()[: args.prompt_tokens * 4]  # ~4 characters a token (at most ~15k)
    settings = SamplerSettings(temperature=0.8, top_p=0.95, max_tokens=args.tokens, seed=1)
    rows: list[dict] = []
    try:
        for c in CONCURRENCY:
            try:
                runs = [_batch(model, spec, prompt, settings, c) for _ in range(args.repeat)]
            except _LimitError as e:  # the server's own limit (e.g. its listen queue): a finding, and the levels
                print(f"logitlab bench: {e}", file=sys.stderr)  # above it would only fail more
                rows.append({"concurrency": c, "error": str(e)})
                break
            rows.append({"concurrency": c, **{k: _median(r[k] for r in runs) for k in runs[0]}})
    except ModelLoadError as e:
        print(f"logitlab bench: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        model.close()
    whole = model.streams_logprobs is False
    result = {"model": model.model, "server": where(model.base_url), "tokens": args.tokens, "streamed": not whole,
              "rows": rows}
    emit(to_json(result, indent=1) if args.json else _table(result))
    return 0 if any("error" not in r for r in rows) else 1


class _LimitError(RemoteError):
    """Some of a level's concurrent requests failed while others were answered: what the server takes at once."""


def _median(values: Iterable[float | None]) -> float | None:
    """The median of what was measured (None: nothing was, e.g. the speed of answers that arrived whole)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _batch(model: RemoteModel, spec: ModelSpec, prompt: str, settings: SamplerSettings, c: int) -> dict[str, float]:
    """c samples as c concurrent requests; their tokens over the batch's wall time."""
    request = Request(model=replace(spec, concurrency=c), prompt=prompt, settings=settings, n=c, ignore_eos=True)
    t0 = time.perf_counter()
    events = list(run_remote(model, request, threading.Event()))
    wall = time.perf_counter() - t0
    ends = [e for e in events if isinstance(e, Finished)]
    errors = [e.message for e in ends if e.reason == "error"]
    if errors:
        kind = _LimitError if len(errors) < c and c > 1 else RemoteError
        raise kind(f"{len(errors)} of {c} requests failed at concurrency {c}, the first: {errors[0]}")
    tokens = sum(e.metrics.generated_tokens for e in ends)
    return {"tokens_per_s": tokens / wall, "per_request_tokens_per_s": _median(
        e.metrics.decode_tokens_per_s for e in ends), "ttft_s": _median(e.metrics.ttft_s for e in ends)}


def _table(r: dict) -> str:
    how = "streamed" if r["streamed"] else "asked for whole (the server streams no log-probabilities)"
    lines = [f"{r['model']} at {r['server']}: {r['tokens']} tokens per request, {how}",
             f"{'concurrency':>11} {'tokens/s':>9} {'per request':>12} {'TTFT':>8}"]
    lines += [f"{x['concurrency']:>11} failed: {x['error']}" if "error" in x else
              f"{x['concurrency']:>11} {x['tokens_per_s']:>9.1f} {_shown(x['per_request_tokens_per_s'], 1, '.1f'):>12} "
              f"{_shown(x['ttft_s'], 1000, '.0f'):>6} ms" for x in r["rows"]]
    return "\n".join(lines)


def _shown(value: float | None, scale: float, form: str) -> str:
    return "n/a" if value is None else f"{value * scale:{form}}"
