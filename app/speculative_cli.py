"""`logitlab generate --draft-model MODEL [--num-draft K]`: speculative decoding through the model thread.

Text: the completion streams to stdout, then one line on stderr (acceptance rate, tokens per target forward,
tokens/s, and plain decoding's with --compare-plain). `--json`: JSON Lines, one `round` line per draft/verify
round (each draft token with its draft and target probabilities and verdict, the token the target drew) and a
`summary` line. `--trace FILE` saves the run's trace. Imports only `app.arguments` of the command line.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, replace
from typing import Any

from app.arguments import add_count, fail, to_json
from app.core.events import Drafted, Failed, Finished, Request, Speculated, Step
from app.core.models import ModelSpec
from app.core.spec_record import K_MAX, SpecSummary

PROG = "logitlab generate"
BUILTIN_DRAFT = "builtin-draft"


def add_draft_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--draft-model", "--draft", metavar="MODEL", help="speculative decoding: this model (with the "
                   f"same tokenizer) proposes tokens, --model verifies them; '{BUILTIN_DRAFT}': the one shipped for "
                   "the built-in model")
    add_count(p, "--num-draft", 0, K_MAX, 4, "draft tokens per round (0: adaptive)")
    p.add_argument("--draft-k", dest="num_draft", type=int, help=argparse.SUPPRESS)
    p.add_argument("--compare-plain", action="store_true", help="speculative: then time plain decoding of as many "
                   "tokens with --model alone, and print the speed ratio")


def draft_request(request: Request, args: argparse.Namespace) -> Request:
    from app.core.drafts import BUILTIN_DRAFT_PATH  # (the model catalog's modules: only when a run starts)

    source = str(BUILTIN_DRAFT_PATH) if args.draft_model == BUILTIN_DRAFT else args.draft_model
    draft = ModelSpec(source, request.model.backend, request.model.options)
    return replace(request, draft=draft, draft_k=args.num_draft, compare_plain=args.compare_plain)


def run_draft(request: Request, args: argparse.Namespace) -> int:
    """Run it on a model thread and print it; 0 when it finished, 1 when it failed (one line on stderr)."""
    from app.core.model_thread import ModelThread  # (loads the core's heavy modules: not for --help)

    if request.n != 1:
        return fail("speculative decoding draws one sample: leave out --n", 2, PROG)
    if not 0 <= args.num_draft <= K_MAX:
        return fail(f"--num-draft must be from 0 to {K_MAX}, got {args.num_draft}", 2, PROG)
    worker = ModelThread()
    try:
        worker.submit(draft_request(request, args))
        return _print_all(worker, args)
    except KeyboardInterrupt:
        worker.cancel()
        return 130
    finally:
        worker.close()


def _print_all(worker: Any, args: argparse.Namespace) -> int:
    summary: SpecSummary | None = None
    while True:
        ev = worker.events.get()
        if isinstance(ev, Failed):
            return fail(ev.message, 1, PROG)
        if isinstance(ev, Step) and not args.json:
            sys.stdout.write(ev.text)
            sys.stdout.flush()
        elif isinstance(ev, Drafted) and args.json:
            print(to_json({"round": asdict(ev.round), "accepted": ev.round.accepted}), flush=True)
        elif isinstance(ev, Speculated):
            summary = ev.summary
        elif isinstance(ev, Finished):
            _summarize(ev, summary, args)
            return 0


def _summarize(ev: Finished, summary: SpecSummary | None, args: argparse.Namespace) -> None:
    if args.trace and ev.trace is not None:
        ev.trace.save(args.trace)
    line = summary_dict(summary) if summary is not None else {}
    line.update(finish_reason=ev.reason, text=ev.trace.text if ev.trace else "")
    if args.json:
        print(to_json({"summary": True, **line}), flush=True)
        return
    print(file=sys.stdout)
    rate, per = line.get("acceptance_rate"), line.get("tokens_per_target_forward")
    parts = [f"acceptance {rate:.0%}" if rate is not None else "acceptance n/a",
             f"{per:.2f} tokens per target forward" if per is not None else "",
             f"{line['tokens_per_s']:.1f} tok/s" if line.get("tokens_per_s") else ""]
    if line.get("speedup"):
        parts.append(f"plain decoding {line['plain_tokens_per_s']:.1f} tok/s: x{line['speedup']:.2f}")
    print("speculative: " + " | ".join(p for p in parts if p), file=sys.stderr)


def summary_dict(s: SpecSummary) -> dict[str, Any]:
    st = s.stats
    return {"rounds": st.rounds, "drafted": st.drafted, "accepted": st.accepted, "tokens": st.tokens,
            "target_forwards": st.target_forwards, "draft_forwards": st.draft_forwards,
            "acceptance_rate": st.acceptance_rate, "tokens_per_target_forward": st.tokens_per_target_forward,
            "num_draft": s.k, "decode_s": s.decode_s, "tokens_per_s": s.tokens_per_s,
            "plain_tokens_per_s": s.plain_tokens_per_s, "speedup": s.speedup}
