"""What `logitlab lens` and `logitlab attention` share: their flags (the model's, the prompt's, the sampler's, and
`--step K`) and the run they read: the prompt decoded up to step K with the sampler flags (seeded), then the `lens` or
`attention` job at step K on the same model thread, whose cache already holds the context. One line on failure.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from app.cli.arguments import Parser, add_count, fail, nonempty, read_prompt, status_line, text_arg
from app.cli.flags import add_model_args, add_sampler_args, settings_from, spec_from
from app.core.events import Failed, Message, Request
from app.core.settings import SettingsError
from backends.base import ModelLoadError


def parser(prog: str, description: str) -> Parser:
    p = Parser(prog=prog, description=description)
    add_model_args(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", type=text_arg, help="the prompt (default: --prompt-file, else standard input)")
    src.add_argument("--prompt-file", type=nonempty, help="read the prompt from this file")
    p.add_argument("--chat", action="store_true", help="send the prompt as a user message (chat template)")
    add_count(p, "--step", 0, None, 0, "the generated token to look at: 0 is the first token after the prompt (the "
              "tokens before it are drawn with the sampler flags; set --seed to repeat a run)")
    p.add_argument("--json", action="store_true", help="write JSON instead of text")
    add_sampler_args(p)
    return p


def run_and_look(args: argparse.Namespace, kind: str, prog: str, top_k: int = 10) -> tuple[int, Any]:
    """(0, the `LensGrid` or `AttentionMap`), or (the exit status, None) after one line on stderr."""
    try:
        settings = settings_from(args)
        prompt = read_prompt(args)
    except SettingsError as e:
        return fail(str(e), 2, prog), None
    from app.core.decoding.inside import InsideRequest, Looked, refuse_remote  # (the model thread's: not for --help)
    from app.core.runs.jobs import Job, stream
    from app.core.runs.model_thread import ModelThread

    messages = (Message("user", prompt),) if args.chat else None
    request = Request(model=spec_from(args), prompt=prompt, messages=messages, record=False,
                      settings=settings.with_(max_tokens=args.step + 1))
    try:
        refuse_remote(request.model)  # (before the run: a server's model exposes no layers)
    except ModelLoadError as e:
        return fail(str(e), 2, prog), None
    worker = ModelThread()
    try:
        prompt_ids, tokens, failed = _decode(stream(worker.start(Job("plain", (request,)))))
        if failed is not None:
            return fail(failed, 1, prog), None
        if len(tokens) <= args.step:
            return fail(f"the run ended after {len(tokens)} tokens: choose a --step below {len(tokens)}", 1,
                        prog), None
        look = InsideRequest(model=request.model, prompt_ids=prompt_ids, tokens=tokens, step=args.step, top_k=top_k)
        for ev in stream(worker.start(Job(kind, (look,)))):
            if isinstance(ev, Failed):
                return fail(ev.message, 1, prog), None
            if isinstance(ev, Looked) and ev.result is not None:
                return 0, ev.result
        return fail("cancelled", 1, prog), None
    except KeyboardInterrupt:
        worker.cancel()
        return 130, None
    finally:
        worker.close()


def _decode(events: Any) -> tuple[tuple[int, ...], tuple[int, ...], str | None]:
    """The prompt's ids and the drawn tokens of a plain run's events (loading said on stderr); or why it failed."""
    from app.core.events import Prefilled, Step

    prompt_ids: tuple[int, ...] = ()
    tokens: list[int] = []
    for ev in events:
        if isinstance(ev, Failed):
            return (), (), ev.message
        if (status := status_line(ev)) is not None:
            print(status, file=sys.stderr, flush=True)
        elif isinstance(ev, Prefilled):
            prompt_ids = ev.prompt_ids
        elif isinstance(ev, Step):
            tokens.append(ev.token_id)
    return prompt_ids, tuple(tokens), None
