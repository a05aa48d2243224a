"""Streams one request's events to the terminal: text (or JSON Lines) on stdout, status on stderr.

Samples print in sample order (0, 1, 2...), whatever order they end in: what a sample prints waits until the
samples before it have ended. One sample streams as text token by token; several print one after another, each
once it is complete; JSON Lines give a line per step (with its `sequence`), then the sample's summary. Ctrl+C
cancels the run (it still ends with its summary); a `Failed` event, or a sample that ends in error (its tokens
kept, its trace saved), exits 1 with its one line. An unexpected error's traceback is printed only when the
environment variable LOGITLAB_DEBUG is set; its one line says so. With --compile, a line says when the decode
step starts compiling, and one how long it took (the model thread's `Compiling` events: the window's words).
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from itertools import chain
from pathlib import Path
from typing import Any

from app.cli.arguments import DEBUG_ENV, OutputError, emit, loaded_line, output_failed, to_json
from app.core.decoding.healing import healed_request
from app.core.decoding.probes import Probed, ProbeRequest, ProbesDone, ThinkProbe
from app.core.events import Compiling, Event, Failed, Finished, Loaded, Loading, Prefilled, Request, Step, Stuck
from app.core.record.steer_record import summary as steer_summary
from app.core.record.steer_record import summary_line
from app.core.record.trace import RunTrace
from app.core.runs.jobs import Job, stream
from app.core.runs.model_thread import ModelThread
from app.core.runs.runners import kind_of
from app.core.sampler.logit_bias import BiasEntry, resolve
from backends.base import Tokenizer

PROG = "logitlab generate"  # how its errors begin, as argparse's do


def summary(ev: Finished, text: str) -> dict[str, Any]:
    m = ev.metrics
    return {
        "summary": True, "sequence": ev.sequence, "finish_reason": ev.reason, "reused_tokens": m.reused_tokens,
        "prompt_tokens": m.prompt_tokens,
        "generated_tokens": m.generated_tokens, "ttft_s": m.ttft_s,
        "decode_tokens_per_s": m.decode_tokens_per_s, "prefill_tokens_per_s": m.prefill_tokens_per_s,
        "itl_mean_s": m.itl_mean_s, "itl_p95_s": m.itl_p95_s, "total_s": m.total_s,
        "kv_cache_bytes": m.kv_cache_bytes, "seed": ev.trace.seed if ev.trace else None, "text": text,
        **({"steering": steered} if ev.trace and (steered := steer_summary(ev.trace.steps)) else {}),
    }


def trace_paths(path: str, n: int) -> list[Path]:
    """Where each sample's trace goes: the path itself for one sample, `name.1.jsonl`... for more."""
    p = Path(path)
    return [p] if n == 1 else [p.with_name(f"{p.stem}.{i}{p.suffix}") for i in range(n)]


class InOrder:
    """Writes each sample's output in sample order: sample i's waits (held) until samples 0..i-1 have ended.
    `pause` holds the current sample's output too, until `resume`."""

    def __init__(self, n: int) -> None:
        self.held: dict[int, list[tuple[bool, str]]] = {i: [] for i in range(n)}
        self.ended: set[int] = set()
        self.current = 0
        self.paused = False

    def write(self, sequence: int, text: str, err: bool = False) -> None:
        if sequence == self.current and not self.paused:
            _write(text, err)
        else:
            self.held[sequence].append((err, text))

    def end(self, sequence: int) -> None:
        self.ended.add(sequence)
        self._advance()

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self._flush()
        self._advance()

    def _advance(self) -> None:
        while self.current in self.ended and not self.paused:
            self.current += 1
            self._flush()

    def _flush(self) -> None:
        for err, text in self.held.get(self.current, ()):
            _write(text, err)
        self.held[self.current] = []


def _write(text: str, err: bool = False) -> None:
    if err:
        sys.stderr.write(text)
        sys.stderr.flush()
    else:
        emit(text, end="")  # the commands' one writer: OutputError where standard output cannot be written


class FirstDecode:
    """With --compile (torch, one sample) the output waits until the first decode step is done (so that the
    compile's lines, from the model thread's `Compiling` events, do not cut into the text)."""

    def __init__(self, out: InOrder) -> None:
        self.out = out
        self.armed = False

    def arm(self) -> None:
        self.armed = True
        self.out.pause()

    def step(self, step: int) -> None:
        if step >= 1:
            self.done()

    def compiling(self, ev: Compiling) -> None:
        print(ev.message, file=sys.stderr, flush=True)
        if ev.seconds is not None:
            self.done()

    def done(self) -> None:
        if self.armed:
            self.armed = False
            self.out.resume()


class Unexpected(logging.Handler):
    """The app's log on stderr, as Python's last-resort handler prints it, except an unexpected error's
    traceback: that is printed only with LOGITLAB_DEBUG set."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = False

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.seen = True
            if not os.environ.get(DEBUG_ENV):
                return
        sys.stderr.write(self.format(record) + "\n")

    def note(self) -> str:
        return "" if os.environ.get(DEBUG_ENV) else f" ({DEBUG_ENV}=1 prints the traceback)"


def stream_to_terminal(request: Request, json_out: bool = False, trace_path: str | None = None,
                       bias: Sequence[BiasEntry] = (), probes: ProbeRequest | None = None, heal: bool = False) -> int:
    """Run `request` and stream it; the trace files are written (atomically) once each sample is complete. With
    `bias` (--logit-bias by text or id), the model is loaded first and each entry found in its vocabulary: one not
    found exits 2 with its one line, and nothing else is printed; so with `heal` (--heal: the prompt's last token
    backed off, the text constrained to start with it, `healing`). With `probes` (--think-probes), each finished
    sample's think span is then probed on the same model thread (`think_probes`)."""
    unexpected = Unexpected()
    logging.getLogger("app").addHandler(unexpected)  # not Python's last-resort handler: no traceback by default
    worker = ModelThread()
    try:
        held: list[Event] = []
        if bias or heal:
            try:
                found = _with_bias(worker, request, bias, held, heal)
            except KeyboardInterrupt:
                return 130
            if found is None:
                return 2
            request = found
        events: Iterable[Event] = held
        if not held or not isinstance(held[-1], Failed):  # (a load that failed: its line is all that is left)
            events = chain(held, stream(worker.start(Job(kind_of(request), (request,)))))
        ran = _Ran()
        code = _stream(worker, request, ran.keep(events), json_out, trace_path, unexpected)
        if probes is None or code != 0:
            return code
        probes = replace(probes, model=request.model)
        return max((think_probes(worker, probes, t, _Texts(ran.tokenizer), json_out) for t in ran.traces), default=0)
    finally:
        worker.close()
        logging.getLogger("app").removeHandler(unexpected)


class _Ran:
    """What a run left for its probes: each finished sample's trace (in sample order) and the model's tokenizer."""

    def __init__(self) -> None:
        self.traces: list[RunTrace] = []
        self.tokenizer: Tokenizer | None = None

    def keep(self, events: Iterable[Event]) -> Iterator[Event]:
        """`events`, as they pass."""
        for ev in events:
            if isinstance(ev, Finished) and ev.trace is not None:
                self.traces.append(ev.trace)
                self.traces.sort(key=lambda t: t.run_id)
            elif isinstance(ev, Loaded) and ev.tokenizer is not None:
                self.tokenizer = ev.tokenizer
            yield ev


def think_probes(worker: ModelThread, probes: ProbeRequest, trace: RunTrace, texts: dict[int, str | None],
                 json_out: bool) -> int:
    """Probe one finished run's think span (`--think-probes`): a line per probe (JSON Lines, or text), then where the
    leading answer changed and where it settled. 1 with one line where it cannot be probed."""
    request = replace(probes, prompt_ids=tuple(trace.prompt_ids), tokens=tuple(trace.token_ids), run_id=trace.run_id)
    try:
        for ev in stream(worker.start(Job("think_probes", (request,)))):
            if isinstance(ev, Failed):
                print(f"{PROG}: error: {ev.message}", file=sys.stderr)
                return 1
            if isinstance(ev, Probed):
                emit(to_json({"probe": probe_json(ev.probe, texts)}) if json_out else probe_line(ev.probe, texts))
            elif isinstance(ev, ProbesDone):
                done = {"probes": len(ev.probes), "changed_at": list(ev.changed), "settled_at": ev.settled}
                emit(to_json({"probes_summary": done}) if json_out else
                     f"changed its mind at steps {list(ev.changed) or 'none'}; settled from step {ev.settled}")
    except KeyboardInterrupt:
        worker.cancel()
        return 130
    return 0


class _Texts(dict):
    """Token id -> its text, by the tokenizer where there is one (None without)."""

    def __init__(self, tok: Tokenizer | None) -> None:
        super().__init__()
        self.tok = tok

    def __missing__(self, token: int) -> str | None:
        text = self[token] = None if self.tok is None else self.tok.token_text(token)
        return text


def probe_json(p: ThinkProbe, texts: dict[int, str | None]) -> dict[str, Any]:
    first = [{"token_id": int(t), "text": texts[int(t)], "prob": math.exp(float(lp))}
             for t, lp in zip(p.top_ids.tolist(), p.top_logprobs, strict=True)]
    answers = [{"text": a, "logprob": float(lp), "prob": float(pr)}
               for a, lp, pr in zip(p.answers, p.answer_logprobs, p.answer_probs, strict=True)]
    return {"step": p.step, "think_tokens": p.think_tokens, "close_prob": math.exp(p.close_logprob),
            "first": first, "answers": answers}


def probe_line(p: ThinkProbe, texts: dict[int, str | None]) -> str:
    """A probe in words: after how much thinking, then each answer (or the likeliest first tokens) with its chance."""
    if p.answers:
        best = sorted(zip(p.answers, p.answer_probs, strict=True), key=lambda a: -a[1])
    else:
        best = [(texts[int(t)] or f"#{t}", math.exp(float(lp)))
                for t, lp in zip(p.top_ids[:5], p.top_logprobs[:5], strict=True)]
    shown = "  ".join(f"{text!r} {prob:.0%}" for text, prob in best[:5])
    return f"step {p.step:>4} · {p.think_tokens:>4} think tokens · {shown}"


def _with_bias(worker: ModelThread, request: Request, bias: Sequence[BiasEntry], held: list[Event],
               heal: bool = False) -> Request | None:
    """`request` with its logit bias found in the loaded model's vocabulary (the loading events go to `held`, to
    print after), and healed if asked; None when a token is not found or it cannot be healed (its line printed). A
    failed load is left in `held`."""
    held += stream(worker.start(Job("load", (request,))))
    loaded = next((ev for ev in held if isinstance(ev, Loaded)), None)
    if loaded is None:  # (a failed load: its `Failed` is printed)
        return request
    try:
        if bias:
            pairs = resolve(bias, loaded.tokenizer, loaded.info.vocab_size)
            request = replace(request, settings=replace(request.settings, logit_bias=pairs))
        if heal:
            request, healed = healed_request(request, loaded.tokenizer)
            print(f"healed: the prompt's last token {healed.text!r} backed off; the text starts with it",
                  file=sys.stderr)
    except ValueError as e:  # (SettingsError too)
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return None
    return request


def _stream(worker: ModelThread, request: Request, events: Iterable[Event], json_out: bool, trace_path: str | None,
            unexpected: Unexpected) -> int:
    """Print the run's events (`events`: its job's stream, after the load's where the bias was found first)."""
    texts: dict[int, list[str]] = {i: [] for i in range(request.n)}
    live = request.n == 1 and not json_out  # one sample streams as text; several print once each is complete
    out = InOrder(request.n)
    first_decode = FirstDecode(out)
    stage = "starting"  # what the model thread is doing, for an unexpected error's line
    code = 0
    try:
        for ev in events:
            if isinstance(ev, Failed):
                out.resume()  # what was held for a compile is shown
                message = f"{stage} failed: {ev.message}{unexpected.note()}" if unexpected.seen else ev.message
                print(f"{PROG}: error: {message}", file=sys.stderr)
                return 1
            if isinstance(ev, Loading) and not ev.total:
                print(ev.message, file=sys.stderr)
                stage = ev.message.rstrip("…")
                stage = stage[:1].lower() + stage[1:]
            elif isinstance(ev, Loaded):
                print(loaded_line(ev), file=sys.stderr)
                stage = "generating"
                if request.model.options.compile_len is not None and ev.info.backend == "torch" and request.n == 1:
                    first_decode.arm()
            elif isinstance(ev, Compiling):
                first_decode.compiling(ev)
            elif isinstance(ev, Prefilled):
                seeds = f"seeds {ev.seed}..{ev.seed + request.n - 1}" if request.n > 1 else f"seed {ev.seed}"
                reused = f", {ev.reused} prompt tokens reused" if ev.reused else ""
                print(f"{seeds}{reused}", file=sys.stderr)
            elif isinstance(ev, Step):
                texts[ev.sequence].append(ev.text)
                first_decode.step(ev.step)
                if json_out and ev.trace is not None:
                    out.write(ev.sequence, to_json({**ev.trace.to_json(), "sequence": ev.sequence}) + "\n")
                elif live:
                    out.write(ev.sequence, ev.text)
            elif isinstance(ev, Stuck):  # (the run goes on: one line, as it happens)
                print(f"{PROG}: {'sample ' + str(ev.sequence + 1) + ': ' if request.n > 1 else ''}step {ev.step}: "
                      f"{ev.message}", file=sys.stderr)
            elif isinstance(ev, Finished):
                first_decode.done()
                if not _finished(ev, request, "".join(texts[ev.sequence]), json_out, live, trace_path, out):
                    code = 1
        return code
    except KeyboardInterrupt:
        worker.cancel()
        return 130
    except OutputError as e:  # standard output is full, closed, or a broken pipe
        worker.cancel()
        return output_failed(e, PROG)


def _finished(ev: Finished, request: Request, text: str, json_out: bool, live: bool, trace_path: str | None,
              out: InOrder) -> bool:
    """Print the end of one sample (in sample order) and save its trace; False if the sample ended in error or
    the trace could not be written."""
    i = ev.sequence
    if json_out:
        out.write(i, to_json(summary(ev, text)) + "\n")
    elif live:
        out.write(i, "\n")
    else:
        seed = ev.trace.seed if ev.trace is not None else "?"
        out.write(i, f"--- sample {i + 1} of {request.n} (seed {seed}) ---\n{text}\n")
    label = f"sample {i + 1}: " if request.n > 1 else ""
    out.write(i, f"{label}[{ev.reason}] {ev.metrics.line()}\n", err=True)
    if ev.trace is not None and (steered := summary_line(ev.trace.steps)):
        out.write(i, f"{label}{steered}\n", err=True)
    if ev.message:
        out.write(i, f"{PROG}: error: {label}{ev.message}\n", err=True)
    ok = ev.reason != "error"
    if trace_path and ev.trace is not None:
        path = trace_paths(trace_path, request.n)[i]
        try:
            ev.trace.save(path)
        except OSError as e:
            out.write(i, f"{PROG}: error: cannot write the trace: {e.strerror}: {path}\n", err=True)
            ok = False
    out.end(i)
    return ok
