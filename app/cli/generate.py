"""`logitlab generate`: its flags, and which run they ask for: a plain run streamed to the terminal (`terminal`), a
beam search (`beam`), speculative decoding (`speculative`) or N samples' statistics (`compare`). Bad input exits 2
with one line before anything loads; the run's module is imported only when it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from app.cli.arguments import Parser, add_count, check_base_url, fail, nonempty, read_prompt, text_arg
from app.cli.beam import add_beam_args, run_beams
from app.cli.flags import MAX_SAMPLES, add_model_args, add_sampler_args, add_stats_args, settings_from, spec_from
from app.cli.speculative import add_draft_args, run_draft
from app.core.compare.statistics import compile_pattern
from app.core.events import Message, Request
from app.core.settings import SettingsError


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="logitlab generate", description="Stream a completion to stdout.")
    add_model_args(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", type=text_arg, help="the prompt (default: --prompt-file, else standard input)")
    src.add_argument("--prompt-file", type=nonempty, help="read the prompt from this file")
    p.add_argument("--chat", action="store_true", help="send the prompt as a user message (chat template)")
    p.add_argument("--system", type=text_arg, help="system message in chat mode")
    add_sampler_args(p)
    add_count(p, "--n", 1, MAX_SAMPLES, 1, "samples of the prompt, decoded together in one batch from one prefill "
              "(remote: concurrent requests); sample i draws with seed + i and prints in that order")
    p.add_argument("--trace", type=nonempty, help="save the run's trace to this file (JSON Lines; `logitlab --open "
                   "FILE` shows it); with --n, one file per sample: NAME.0.jsonl, NAME.1.jsonl, ...")
    p.add_argument("--json", action="store_true", help="write JSON Lines to stdout instead of text")
    add_count(p, "--lens", 1, 256, None, "the live logit lens: each step also records every layer's logits for its "
              "top K candidates (with --json and --trace; a local model's; `logitlab lens` shows one step in full)")
    add_stats_args(p)
    p.add_argument("--heal", action="store_true", help="token healing: back off the prompt's last token and let the "
                   "text start with it (the first token then covers the boundary, e.g. `http:` + `//`); a plain run "
                   "of a text prompt")
    add_count(p, "--think-probes", 1, 100_000, None, "a thinking model: after the run, close its think span every K "
              "think tokens (and where it closed) and print the answer it would give there (JSON Lines with --json)")
    p.add_argument("--answers", type=answer_list, default=(), metavar="A,B,...", help="with --think-probes: score "
                   "these answers (comma-separated) as whole sequences, renormalized over the list")
    add_beam_args(p)
    add_draft_args(p)
    return p


def check_trace_path(trace: str | None, prompt_file: str | None) -> None:
    """Refuse a trace path that cannot be written, or that names the prompt file (it would be replaced)."""
    if not trace:
        return
    path = Path(trace)
    if not path.parent.resolve().is_dir():
        raise SettingsError(f"cannot write the trace: no folder {path.parent}")
    if path.is_dir():
        raise SettingsError(f"--trace names a folder, {trace}: give a file's name")
    if prompt_file and path.exists() and Path(prompt_file).exists() and path.samefile(prompt_file):
        raise SettingsError(f"--trace names the prompt file {prompt_file}: choose another file")


def main(argv: Sequence[str]) -> int:
    """Run what the flags ask for; 2 with one line where they cannot be read."""
    from app.cli.terminal import stream_to_terminal  # (the model thread's modules: not for --help)

    args = parser().parse_args(argv)
    plain = not (args.beams or args.draft_model or args.stats or args.match)  # where a bias by text is found
    try:
        settings = settings_from(args, by_text=plain)
        check_base_url(args.base_url)
        prompt = read_prompt(args)
        check_trace_path(args.trace, args.prompt_file)
    except SettingsError as e:
        return fail(str(e), 2, "logitlab generate")
    messages = None
    if args.chat:
        messages = ((Message("system", args.system),) if args.system else ()) + (Message("user", prompt),)
    # text mode prints the tokens only: no per-step record where nothing reads it (--json and --trace do; so does
    # --steer's summary line)
    record = bool(args.json or args.trace or args.stats or args.match or args.steer)
    request = Request(model=spec_from(args), prompt=prompt, messages=messages, settings=settings,
                      top_n=args.top_n, n=args.n, record=record, lens=args.lens or 0)
    if args.heal and not plain:
        return fail("--heal works on a plain run: leave out --beams, --draft-model, --stats and --match", 2,
                    "logitlab generate")
    if (args.think_budget or args.think_probes) and (args.beams or args.draft_model):
        return fail("--think-budget and --think-probes work on a plain run or samples: leave out --beams and "
                    "--draft-model", 2, "logitlab generate")
    if args.steer and (args.beams or args.draft_model):
        return fail("--steer works on a plain run or samples: leave out --beams and --draft-model", 2,
                    "logitlab generate")
    if args.beams:
        return run_beams(args, request.model, prompt, messages)
    if args.draft_model:
        return run_draft(request, args)
    if args.stats or args.match:
        return run_stats(request, args)
    if args.answers and not args.think_probes:
        return fail("--answers is for --think-probes K", 2, "logitlab generate")
    from app.core.decoding.probes import ProbeRequest  # (with the run's modules: not for --help)

    probes = ProbeRequest(every=args.think_probes, answers=args.answers, markers=settings.think_markers,
                          top_n=args.top_n) if args.think_probes else None
    if probes is not None:
        request = replace(request, record=True)  # the probes read the run's tokens from its trace
    return stream_to_terminal(request, json_out=args.json, trace_path=args.trace, bias=args.logit_bias,
                              probes=probes, heal=args.heal)


def answer_list(text: str) -> tuple[str, ...]:
    """--answers: the answers, comma-separated (each stripped of spaces; none empty)."""
    answers = tuple(a.strip() for a in text.split(","))
    if not all(answers):
        raise argparse.ArgumentTypeError(f"an answer is empty in {text!r}: give them as A,B,C")
    return answers


def run_stats(request: Request, args: argparse.Namespace) -> int:
    """`--stats` / `--match`: the samples' statistics (`compare`)."""
    from app.cli.compare import stats_to_terminal

    if args.json:
        return fail("--stats writes its own JSON Lines: leave out --json", 2, "logitlab generate")
    try:
        pattern = compile_pattern(args.match).pattern if args.match else None
    except SettingsError as e:
        return fail(str(e), 2, "logitlab generate")
    return stats_to_terminal(request, pattern, args.trace)
