"""A run on an OpenAI-compatible server: the same events as `generation.generate` (Prefilled, one Step per token
with a partial record, Finished with a RunTrace), made from the server's stream of tokens and log-probabilities.

The server samples. It gets the settings it can take (`server_params`); `server_request.SERVER_NOTES` says which
it ignores or cannot express, for the sampler panel to show. Each step records what the server reported
(`Sample.partial`: its top log-probabilities, stages not observed). N samples run as concurrent requests, at most
`ModelSpec.concurrency` at once. Stop closes the streams within one token. An error ends the run with reason
"error", its tokens kept, and says why in `Finished.message`. A branch sends its prefix (inherited steps, forced
token) as the prompt. No threads outlive a run's need: each request's reader is a daemon thread that exits on
stop.
"""

from __future__ import annotations

import queue
import secrets
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.core.events import Event, Finished, FinishReason, Loading, Message, Prefilled, Request, Step
from app.core.metrics import Clock
from app.core.models.sources import ModelSpec, is_builtin
from app.core.record.trace import RunTrace, Sample, StepTrace
from app.core.remote.secrets import api_key
from app.core.remote.server_constraint import ServerConstraintError
from app.core.remote.server_request import OPENAI, Dialect, detect, request_fields
from app.core.settings import MAX_SEED, SamplerSettings
from backends.remote.backend import TIMEOUT_S, End, RemoteBackend, RemoteError, RemoteModel, where
from backends.remote.tokens import Token

REPORTED = "raw"  # vLLM, llama.cpp's server and mlx_lm.server report the model's log-probabilities before sampling
POLL_S = 0.05  # how often the run checks Stop while waiting for a token


def load_remote(spec: ModelSpec, timeout: float | None = None) -> RemoteModel:
    """Connect to the spec's server and check that it serves the model ("" or "builtin": the one it serves)."""
    if not spec.base_url:
        raise RemoteError("the remote backend needs the server's base URL (e.g. http://127.0.0.1:8080/v1)")
    key = api_key(spec.base_url, spec.api_key_env)
    model = RemoteBackend().connect(spec.base_url, "" if is_builtin(spec.source) else spec.source, key,
                                    timeout or TIMEOUT_S, deadline=spec.deadline)
    try:
        served = model.models()
    except RemoteError as e:
        if model.model and e.model_list_failed:  # a broken model list (mlx_lm.server without a Hugging
            learn_vocabulary(model, spec.source)        # Face cache folder): the typed name may still complete
            return model
        model.close()
        raise
    model.dialect = detect(served)
    names = [m["id"] for m in served]
    if not model.model and len(names) != 1:
        model.close()
        raise RemoteError(f"{where(model.base_url)} serves {len(names)} models: choose one of {', '.join(names)}")
    model.model = model.model or names[0]
    learn_vocabulary(model, spec.source)
    if names and model.model not in names:
        model.close()
        raise RemoteError(f"{where(model.base_url)} has no model {model.model!r}; it serves: {', '.join(names[:8])}")
    entry = next(m for m in served if m["id"] == model.model) if names else {}
    model.info = replace(model.info, name=model.model, context_length=int(entry.get("max_model_len") or 0))
    return model


def learn_vocabulary(model: RemoteModel, source: str) -> None:
    """The model's own token ids, where its tokenizer is here: the served name (or the name typed) is a local
    folder or a repository in the Hugging Face cache (never downloaded). Without it, ids the server does not
    send stay unknown."""
    from huggingface_hub import try_to_load_from_cache
    from tokenizers import Tokenizer

    for name in dict.fromkeys(n for n in (model.model, source) if n and not is_builtin(n)):
        path: Any = Path(name).expanduser() / "tokenizer.json"
        if not path.is_file():
            try:
                path = try_to_load_from_cache(name, "tokenizer.json")
            except ValueError:  # not a repository id
                continue
        if isinstance(path, (str, Path)) and Path(path).is_file():
            try:
                tokenizer = Tokenizer.from_file(str(path))
                model.vocab.use(tokenizer.get_vocab(with_added_tokens=True),
                                lambda text, t=tokenizer: t.encode(text, add_special_tokens=False).ids)
                return
            except Exception:  # noqa: BLE001 - a damaged tokenizer file: ids stay unknown
                continue


CONTINUE = {"continue_final_message": True, "add_generation_prompt": False}  # vLLM: go on with the last message


def _prompt(model: RemoteModel, request: Request) -> tuple[str, list[dict] | None, dict[str, Any]]:
    """What the server continues: the prompt (or the chat) and the inherited steps' text after it, and the extra
    request fields that says so for a chat (the prefix is the start of the assistant's answer)."""
    if request.prompt_ids is not None:
        raise RemoteError("a server takes its prompt as text, not token ids")
    prompt, messages = request.prompt, None
    if request.messages is not None:
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
    return _continue(prompt, messages, "".join(st.text for st in request.inherited))


def _continue(prompt: str, messages: list[dict] | None, text: str) -> tuple[str, list[dict] | None, dict]:
    if messages is None:
        return prompt + text, None, {}
    if not text:
        return prompt, messages, {}
    if messages[-1]["role"] == "assistant":
        return prompt, [*messages[:-1], {"role": "assistant", "content": messages[-1]["content"] + text}], CONTINUE
    return prompt, [*messages, {"role": "assistant", "content": text}], CONTINUE


def _chat_text(messages: Sequence[Message]) -> str:
    """The chat as a person reads it (the server applies its own template, which we do not see)."""
    return "\n".join(f"[{m.role}] {m.content}" for m in messages)


def _forced_step(model: RemoteModel, request: Request, prompt: str, messages: list[dict] | None, extra: dict,
                 seed: int) -> StepTrace:
    """The forced token's step: the server's distribution at the branch point (asked for with one token) and
    the token the branch chose there."""
    clock = Clock()
    clock.prefilled()
    params = {**request_fields(request.settings, seed, 1, dialect(model), chat=messages is not None), **extra}
    probe = [t for t in model.complete(params, prompt=None if messages else prompt, messages=messages,
                                       top_n=request.top_n) if isinstance(t, Token)]
    seen = probe[0].top if probe else ()
    top = seen[: request.top_n]
    logprob = next((c.logprob for c in seen if c.id == request.force), None)
    sample = Sample.partial(request.force, logprob, [c.id for c in top], [c.logprob for c in top], REPORTED)
    text = model.tokenizer.token_text(request.force)
    return StepTrace(len(request.inherited), sample, text, tuple(c.text for c in top), clock.token())


def _new_trace(model: RemoteModel, request: Request, seed: int, run_id: int, text: str) -> RunTrace:
    trace = RunTrace(prompt_ids=[], settings=request.settings, seed=seed, prompt_text=text)
    trace.run_id, trace.parent = run_id, request.parent
    trace.model = {"name": model.model, "backend": "remote", "source": request.model.source,
                   "server": where(model.base_url)}
    return trace


def _fork_clock(clock: Clock) -> Clock:
    """A clock for one sample, started with the request (its time to first token counts from the request)."""
    c = Clock(now=clock.now)
    c.start, c.prefilled_at = clock.start, clock.prefilled_at
    return c


def served_models(base_url: str, api_key_env: str | None = None, timeout: float = 10.0,
                  deadline: float | None = None) -> list[dict[str, Any]]:
    """The models a server serves (its /v1/models entries); a `RemoteError` line when it cannot say. `deadline`:
    the seconds the request may take in all (None: the backend's default)."""
    if not base_url:
        raise RemoteError("give the server's base URL, e.g. http://127.0.0.1:8080/v1")
    model = RemoteBackend().connect(base_url, "", api_key(base_url, api_key_env), timeout, deadline=deadline)
    try:
        return model.models()
    finally:
        model.close()


def list_models(base_url: str, api_key_env: str | None = None, timeout: float = 10.0) -> list[str]:
    """The names of the models a server serves."""
    return [m["id"] for m in served_models(base_url, api_key_env, timeout)]


@dataclass
class _Run:
    """One sample: its trace and clock, and how it ended."""

    id: int
    sequence: int
    trace: RunTrace
    clock: Clock
    reason: FinishReason | None = None
    prompt_tokens: int | None = None  # as the server reported them (None: it did not)
    received: int = 0  # tokens from the server (after the inherited and forced ones)
    stop: threading.Event = field(default_factory=threading.Event)  # set: close this sample's stream
    steps: list[StepTrace] = field(default_factory=list)
    thought: bool = False  # the server reported reasoning (its tokens after it are the answer's span)


def run_remote(model: RemoteModel, request: Request, cancel: threading.Event) -> Iterator[Event]:
    """The events of `request` run on the server (see the module's docstring)."""
    s = request.settings
    seed = s.seed if s.seed is not None else secrets.randbelow(MAX_SEED + 1)
    clock = Clock()
    prompt, messages, extra = _prompt(model, request)
    shown = request.prompt if request.messages is None else _chat_text(request.messages)
    clock.prefilled()  # the server prefills: its time is within the first token's
    yield Prefilled(request.id, (), shown, seed, 0.0)
    runs = [_Run(rid, i, _new_trace(model, request, (seed + i) % (MAX_SEED + 1), rid, shown), _fork_clock(clock))
            for i, rid in enumerate(request.run_ids)]
    try:  # a constraint the server cannot take ends the run before anything is sent
        request_fields(s, seed, 1, dialect(model), chat=messages is not None)
    except ServerConstraintError as e:
        yield from _fail_all(request, runs, str(e))
        return
    for run in runs:
        for st in request.inherited:
            yield _step(request, run, st)
    if request.force is not None:
        try:
            forced = _forced_step(model, request, prompt, messages, extra, seed)
        except RemoteError as e:
            yield from _fail_all(request, runs, str(e))
            return
        prompt, messages, extra = _continue(prompt, messages, forced.text)
        for run in runs:
            yield _step(request, run, forced)
    yield from _stream_all(model, request, runs, prompt, messages, extra, cancel)


def dialect(model: RemoteModel) -> Dialect:
    """The server's dialect, as `load_remote` recognised it (a model connected otherwise: OpenAI's)."""
    return model.dialect or OPENAI


def _stream_all(model: RemoteModel, request: Request, runs: list[_Run], prompt: str, messages: list | None,
                extra: dict, cancel: threading.Event) -> Iterator[Event]:
    """Start one request per sample (at most `concurrency` at once; one at a time on a server that interrupts a
    stream when another request arrives) and turn what arrives into events. No sample gets more than its
    max_tokens, whatever the server streams."""
    inbox: queue.Queue[tuple[int, Token | End | RemoteError]] = queue.Queue()
    kind = dialect(model)
    one_by_one = kind.interrupts_streams and len(runs) > 1
    gate = threading.BoundedSemaphore(1 if one_by_one else max(1, request.model.concurrency))
    left = request.settings.max_tokens - (request.force is not None)
    if one_by_one:
        yield Loading(request.id, f"{kind.name}'s server ends a stream when another request arrives: the "
                                  f"{len(runs)} samples run one after another")
    for run in runs:
        params = {**request_fields(request.settings, run.trace.seed, max(left, 1), kind, chat=messages is not None),
                  **extra}
        if request.ignore_eos:  # vLLM's extension (benchmarks: every request runs its full length)
            params["ignore_eos"] = True
        run.trace.model.update(server_kind=kind.name, sent=params)
        threading.Thread(target=_read, args=(model, params, prompt, messages, request.top_n, run.sequence, inbox,
                                             run.stop, gate), daemon=True, name=f"logitlab-remote-{run.id}").start()
    open_runs = {run.sequence: run for run in runs}
    if left < 1:  # the forced token was the last one asked for
        for run in runs:
            run.stop.set()
            yield _finish(request, run, "length")
        return
    while open_runs:
        if cancel.is_set():
            for run in open_runs.values():
                run.stop.set()
                yield _finish(request, run, "cancelled")
            return
        try:
            i, item = inbox.get(timeout=POLL_S)
        except queue.Empty:
            continue
        run = open_runs.get(i)
        if run is None:  # what a stream sent after its sample ended (max_tokens reached here)
            continue
        if isinstance(item, Token) and run.received >= left:  # enforced here: a server streaming on is not followed
            run.stop.set()
            yield _finish(request, open_runs.pop(i), "length", model.streams_logprobs)
        elif isinstance(item, Token):
            seconds = run.clock.token()
            if model.streams_logprobs is False and run.received:  # a whole answer: one arrival, no per-token time
                seconds = 0.0
            run.received += 1
            run.thought |= item.think
            span = "think" if item.think else "answer" if run.thought else ""  # (a server's reasoning field)
            yield _step(request, run, _record(item, len(run.steps), seconds, request.top_n, span))
        elif isinstance(item, End):
            run.prompt_tokens = item.prompt_tokens
            yield _finish(request, open_runs.pop(i), _reason(item, request.settings), model.streams_logprobs)
        else:  # this sample's error ends this sample: the others go on
            yield _finish(request, open_runs.pop(i), "error", message=str(item))


def _read(model: RemoteModel, params: dict, prompt: str, messages: list | None, top_n: int, sequence: int,
          inbox: queue.Queue, stop: threading.Event, gate: threading.BoundedSemaphore) -> None:
    """One sample's request, on its own thread: every token, then its End or its error, into `inbox`."""
    with gate:
        if stop.is_set():
            return
        try:
            for item in model.complete(params, prompt=prompt if messages is None else None, messages=messages,
                                       top_n=top_n, stop=stop):
                inbox.put((sequence, item))
        except RemoteError as e:
            inbox.put((sequence, e))
        except Exception as e:  # noqa: BLE001 - reported on the run's channel, never lost on a thread
            inbox.put((sequence, RemoteError(f"unexpected error reading the server: {type(e).__name__}: {e}")))


def _record(token: Token, step: int, seconds: float, top_n: int, span: str = "") -> StepTrace:
    top = token.top[:top_n]
    sample = Sample.partial(token.id, token.logprob, [c.id for c in top], [c.logprob for c in top], REPORTED)
    return StepTrace(step, sample, token.text, tuple(c.text for c in top), seconds, span)


def _step(request: Request, run: _Run, st: StepTrace) -> Step:
    run.steps.append(st)
    run.trace.steps.append(st)
    return Step(request.id, st.step, st.token_id, st.text, st, None, run.id, run.sequence)


def _finish(request: Request, run: _Run, reason: FinishReason, streamed: bool | None = True,
            message: str = "") -> Finished:
    """The run's end. What a server's stream shows of its time: the prefill within the time to first token; a
    whole answer arrives at once, so neither its prefill nor its decode speed is measured. What a server does not
    show is None (not measured): its KV cache, the prompt's tokens when it does not report them, and for a whole
    answer its prefill, decode and inter-token times."""
    m = run.clock.metrics(run.prompt_tokens, None)
    metrics = replace(m, prefill_s=m.ttft_s) if streamed is not False else replace(
        m, prefill_s=None, decode_s=None, itl_mean_s=None, itl_p95_s=None)
    run.trace.finish_reason, run.trace.metrics, run.trace.finish_message = reason, metrics, message
    return Finished(request.id, reason, metrics, run.trace, run.id, run.sequence, message)


def _fail_all(request: Request, runs: list[_Run], message: str) -> Iterator[Event]:
    for run in runs:
        yield _finish(request, run, "error", message=message)


def _reason(end: End, settings: SamplerSettings) -> FinishReason:
    """Ours for the server's: "stop" is a stop string when vLLM names one (or we sent some), else end of text."""
    if end.reason == "length":
        return "length"
    if isinstance(end.stop_reason, str) or (end.stop_reason is None and settings.stop and end.reason == "stop"):
        return "stop"
    return "eos"
