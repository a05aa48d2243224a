"""`logitlab generate --draft-model MODEL [--num-draft K]`: speculative decoding through the model thread.

Text: the completion streams to stdout, then one line on stderr (acceptance rate, tokens per target forward,
tokens/s, and plain decoding's with --compare-plain). `--json`: JSON Lines, one `round` line per draft/verify
round (each draft token with its draft and target probabilities and verdict, the token the target drew) and a
`summary` line (with the seed). Loading and the seed are said on stderr, as plain `generate` says them. `--trace
FILE` saves the run's trace. Imports only `app.cli.arguments` of the command line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import asdict, replace
from typing import Any

from app.cli.arguments import add_count, emit, fail, nonempty, run_job, status_line, to_json
from app.core.events import Drafted, Failed, Finished, Prefilled, Request, Speculated, Step
from app.core.models.sources import BUILTIN_DRAFT_NAME, ModelSpec
from app.core.record.spec_record import K_MAX, SpecSummary

PROG = "logitlab generate"


def add_draft_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--draft-model", "--draft", type=nonempty, metavar="MODEL", help="speculative decoding: this "
                   f"model (with the same tokenizer) proposes tokens, --model verifies them; '{BUILTIN_DRAFT_NAME}': "
                   "the one shipped for the built-in model")
    add_count(p, "--num-draft", 0, K_MAX, 4, "draft tokens per round (0: adaptive, from the measured acceptance "
              "and costs; drafting pauses where it does not pay; its runs follow the machine's timing, so a seed "
              "replays only a fixed k's run exactly)")
    p.add_argument("--draft-k", dest="num_draft", type=int, help=argparse.SUPPRESS)
    p.add_argument("--compare-plain", action="store_true", help="speculative: then time plain decoding of as many "
                   "tokens with --model alone, and print the speed ratio")


def draft_request(request: Request, args: argparse.Namespace) -> Request:
    """The run with its draft: --draft-model named as --model is (`app.core.models.sources.resolve` reads both)."""
    draft = ModelSpec(args.draft_model, request.model.backend, request.model.options)
    return replace(request, draft=draft, draft_k=args.num_draft, compare_plain=args.compare_plain)


def run_draft(request: Request, args: argparse.Namespace) -> int:
    """Run it on a model thread and print it; 0 when it finished, 1 when it failed (one line on stderr)."""
    if request.n != 1:
        return fail("speculative decoding draws one sample: leave out --n", 2, PROG)
    if not 0 <= args.num_draft <= K_MAX:
        return fail(f"--num-draft must be from 0 to {K_MAX}, got {args.num_draft}", 2, PROG)
    return run_job("speculative", draft_request(request, args), lambda events: _print_all(events, args))


def _print_all(events: Iterable[object], args: argparse.Namespace) -> int:
    """Print the run's events: loading and the seed on stderr, the text (or --json's rounds), then the summary."""
    summary: SpecSummary | None = None
    code = 1  # (a run that never finished: none does, a cancelled download finishes "cancelled")
    for ev in events:
        if isinstance(ev, Failed):
            return fail(ev.message, 1, PROG)
        if (line := status_line(ev)) is not None:
            print(line, file=sys.stderr, flush=True)
        elif isinstance(ev, Prefilled):
            print(f"seed {ev.seed}", file=sys.stderr, flush=True)
        elif isinstance(ev, Step) and not args.json:
            emit(ev.text, end="")
        elif isinstance(ev, Drafted) and args.json:
            emit(to_json({"round": asdict(ev.round), "accepted": ev.round.accepted}))
        elif isinstance(ev, Speculated):
            summary = ev.summary
        elif isinstance(ev, Finished):
            _summarize(ev, summary, args)
            code = _save_trace(ev, args.trace)
    return code


def _save_trace(ev: Finished, path: str | None) -> int:
    """0 once the run's trace is saved (or none was asked for); 1, with its line, where it cannot be written."""
    if path and ev.trace is not None:
        try:
            ev.trace.save(path)
        except OSError as e:  # a folder, a full device, a file that is not ours to write
            return fail(f"cannot write the trace: {e.strerror or e}: {path}", 1, PROG)
    return 0


def _summarize(ev: Finished, summary: SpecSummary | None, args: argparse.Namespace) -> None:
    line = summary_dict(summary) if summary is not None else {}
    trace = ev.trace
    line.update(finish_reason=ev.reason, seed=trace.seed if trace else None, text=trace.text if trace else "")
    if args.json:
        emit(to_json({"summary": True, **line}))
        return
    emit()
    rate, per = line.get("acceptance_rate"), line.get("tokens_per_target_forward")
    parts = [f"acceptance {rate:.0%}" if rate is not None else "acceptance n/a",
             f"{per:.2f} tokens per target forward" if per is not None else "",
             f"{line['tokens_per_s']:.1f} tok/s" if line.get("tokens_per_s") else ""]
    if line.get("speedup"):
        cpu = f" (CPU time x{line['cpu_speedup']:.2f})" if line.get("cpu_speedup") else ""
        parts.append(f"plain decoding {line['plain_tokens_per_s']:.1f} tok/s: x{line['speedup']:.2f}{cpu}")
    if line.get("plain_rounds"):
        parts.append(f"{line['plain_rounds']} of {line['rounds']} rounds plain steps")
    if line.get("note"):
        parts.append(line["note"])
    print("speculative: " + " | ".join(p for p in parts if p), file=sys.stderr)


def summary_dict(s: SpecSummary) -> dict[str, Any]:
    st = s.stats
    return {"rounds": st.rounds, "drafted": st.drafted, "accepted": st.accepted, "tokens": st.tokens,
            "target_forwards": st.target_forwards, "draft_forwards": st.draft_forwards,
            "acceptance_rate": st.acceptance_rate, "tokens_per_target_forward": st.tokens_per_target_forward,
            "num_draft": s.k, "decode_s": s.decode_s, "tokens_per_s": s.tokens_per_s,
            "plain_tokens_per_s": s.plain_tokens_per_s, "speedup": s.speedup, "cpu_speedup": s.cpu_speedup,
            "plain_rounds": st.plain_rounds, "note": st.note}
