"""`logitlab generate --beams N`: a beam search through the model thread, its hypotheses printed best first.

Text: one line per finished hypothesis (rank, length-normalized score, summed log-probability, why it ended, its
text). `--json`: JSON Lines, one `step` line per beam step (every candidate considered: beam, token, its text,
log-probability, cumulative log-probability, fate) and one `hypothesis` line per hypothesis. Loading is said on
stderr, as plain `generate` says it. Imports only `app.cli.arguments` of the command line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import asdict, replace
from typing import Any

from app.cli.arguments import add_count, emit, fail, run_job, status_line, to_json
from app.core.decoding.beam import (
    MAX_LENGTH_PENALTY,
    MAX_WIDTH,
    BeamFinished,
    BeamSettings,
    BeamStep,
    BeamStepped,
    EarlyStopping,
    Hypothesis,
)
from app.core.events import Failed, Message
from app.core.models.sources import ModelSpec
from app.core.settings import SettingsError

PROG = "logitlab generate"


def add_beam_args(p: argparse.ArgumentParser) -> None:
    add_count(p, "--beams", 1, MAX_WIDTH, None, "beam search of this width instead of sampling (greedy, as "
              "transformers' generate(num_beams=N)); prints the finished hypotheses best first")
    p.add_argument("--length-penalty", type=float, default=1.0, help="beams: hypotheses are ranked by summed "
                   "log-probability / length ** this (above 0 favours longer ones) "
                   f"[{-MAX_LENGTH_PENALTY:g}..{MAX_LENGTH_PENALTY:g}, default 1]")
    p.add_argument("--early-stopping", choices=["true", "false", "never"], default="false", help="beams: true stops "
                   "once N hypotheses are finished; false when no live beam can beat them at its length; never at "
                   "the best length it could reach [default false]")
    add_count(p, "--no-repeat-ngram", 0, None, 0, "beams: never repeat an n-gram of this size (0: off)")


def beam_settings(args: argparse.Namespace) -> BeamSettings:
    early: EarlyStopping = {"true": True, "false": False, "never": "never"}[args.early_stopping]
    return BeamSettings(args.beams, args.length_penalty, early, args.no_repeat_ngram, args.max_tokens)


def run_beams(args: argparse.Namespace, spec: ModelSpec, prompt: str, messages: tuple[Message, ...] | None) -> int:
    """Run it on a model thread and print it; 0 when it finished, 1 when it failed (one line on stderr)."""
    # the model thread's modules load when the command runs, as `cli`'s commands do: --help answers at once
    from app.core.runs.beam_run import BeamRequest

    other = [flag for flag, on in (("--n", args.n != 1), ("--stats", args.stats), ("--match", args.match),
                                   ("--trace", args.trace), ("--draft-model", args.draft_model))
             if on]
    if other:
        return fail(f"--beams runs one beam search, without {', '.join(other)}: leave it out", 2, PROG)
    try:
        request = BeamRequest(model=spec, prompt=prompt, messages=messages, settings=beam_settings(args),
                              openable=False, think=not args.no_think,
                              constraint=args.constraint and replace(args.constraint, place=args.constraint_place))
    except SettingsError as e:
        return fail(str(e), 2, PROG)
    return run_job("beam", request, lambda events: _print_all(events, args.json))


def _print_all(events: Iterable[object], json_out: bool) -> int:
    """Print the search's events: loading on stderr, then its steps (--json) and hypotheses; its exit status."""
    texts: dict[int, str] = {}
    for ev in events:
        if isinstance(ev, Failed):
            return fail(ev.message, 1, PROG)
        if (line := status_line(ev)) is not None:
            print(line, file=sys.stderr, flush=True)
        elif isinstance(ev, BeamStepped):
            texts.update(ev.texts)
            if json_out:
                emit(to_json(step_line(ev.step, texts)))
        elif isinstance(ev, BeamFinished):
            for rank, (h, text) in enumerate(zip(ev.result.hypotheses, ev.texts, strict=True)):
                emit(to_json(hypothesis_line(rank, h, text)) if json_out else text_line(rank, h, text))
            if not json_out:
                print(f"({ev.result.steps} steps, {ev.result.reason})", file=sys.stderr)
            return 0 if ev.result.reason != "cancelled" else 130
    return 130  # ended with no search: its model's download was cancelled


def step_line(step: BeamStep, texts: dict[int, str]) -> dict[str, Any]:
    return {"type": "step", "step": step.step, "beams": list(step.cumulative),
            "candidates": [asdict(c) | {"text": texts.get(c.token, "")} for c in step.candidates]}


def hypothesis_line(rank: int, h: Hypothesis, text: str) -> dict[str, Any]:
    return {"type": "hypothesis", "rank": rank, "score": h.score, "logprob": h.logprob, "reason": h.reason,
            "step": h.step, "tokens": list(h.tokens), "text": text}


def text_line(rank: int, h: Hypothesis, text: str) -> str:
    return f"#{rank + 1}  score {h.score:.4f}  logprob {h.logprob:.3f}  {h.reason:<6}  {text!r}"
