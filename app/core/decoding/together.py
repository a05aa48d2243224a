"""Runs together: several requests on one prompt decoded in one batch, and event streams interleaved.

`generate_together(model, requests, cancel, prefix)`: requests that share the model and the prompt (same
`share_key`) are prefilled once and decode in one batch, the cache forked into sum(n) rows; each request's
samples draw with its own settings and seeds and stop on their own EOS, stop strings and max_tokens. The events
of each request are those it would make alone (ids, order, tokens and records); only timings, `reused` (the one
shared prefill's) and the KV bytes (its rows' share of the batch's cache) tell it was not alone. A model that
samples by itself (a server) runs the requests side by side instead. `interleave` merges several event streams
(other models' runs) one Step at a time each, so that columns on different models stream together.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator, Sequence
from typing import cast

from app.core.decoding.batch import decode_batches, start_batch
from app.core.decoding.generation import Prefix, cancelled_in_prefill, checked_prompt, generate, run_seed
from app.core.decoding.prefill import prefill
from app.core.decoding.steering.steered import steers
from app.core.events import Event, Prefilled, Request, Step
from app.core.metrics import Clock
from backends.base import LoadedModel, Model


def share_key(request: Request) -> Hashable | None:
    """What requests must have in common to decode in one batch from one prefill: the model, the prompt, and
    what a step records; None for one that runs alone (a branch, a forced token, speculative decoding, steering)."""
    if request.inherited or request.force is not None or request.draft is not None or steers(request.settings):
        return None
    return (request.model, request.prompt, request.messages, request.prompt_ids, request.top_n, request.record)


def groups(requests: Sequence[Request]) -> list[list[Request]]:
    """The requests in groups that decode together (by `share_key`, in the order each group first appears)."""
    out: dict[Hashable, list[Request]] = {}
    for i, r in enumerate(requests):
        key = share_key(r)
        out.setdefault(("alone", i) if key is None else key, []).append(r)
    return list(out.values())


def generate_together(model: Model, requests: Sequence[Request], cancel: threading.Event,
                      prefix: Prefix | None = None) -> Iterator[Event]:
    """The events of every request (see the module's docstring); a ValueError where they do not share a key."""
    keys = {share_key(r) for r in requests}
    if len(requests) > 1 and (None in keys or len(keys) > 1):
        raise ValueError("requests decoded together share the model, the prompt, top_n and record, and none of "
                         "them branches, forces a token or drafts")
    prefix = prefix if prefix is not None else Prefix()
    if len(requests) == 1:
        return generate(model, requests[0], cancel, prefix)
    if not model.capabilities.forward:  # a server samples each request by itself
        return interleave([generate(model, r, cancel) for r in requests])
    return _together(cast(LoadedModel, model), requests, cancel, prefix)


def _together(model: LoadedModel, requests: Sequence[Request], cancel: threading.Event,
              prefix: Prefix) -> Iterator[Event]:
    clock = Clock()
    prompt = checked_prompt(model, requests[0])
    seeds = [run_seed(r.settings) for r in requests]
    cache, reused = prefix.take(model, prompt.context)
    logits = prefill(model, cache, prompt.context, cancel, reused)
    if logits is None:  # cancelled between chunks: the cache keeps what was computed
        prefix.keep(model, cache, prompt.context)
        for r in requests:
            yield from cancelled_in_prefill(r, clock.metrics(len(prompt.context), 0), reused)
        return
    seconds = clock.prefilled()
    for r, seed in zip(requests, seeds, strict=True):
        yield Prefilled(r.id, tuple(prompt.ids), prompt.text, seed, seconds, reused)
    total = sum(r.n for r in requests)
    rows = model.fork(cache, total)  # the prompt's cache stays whole: the next run reuses it
    vocab = int(logits.shape[-1])
    batches = [start_batch(model, r, prompt, seed, rows, clock, vocab, reused=reused, cache_rows=total)
               for r, seed in zip(requests, seeds, strict=True)]
    yield from decode_batches(batches, logits, cancel)
    prefix.keep(model, cache, prompt.context)


def interleave(streams: Sequence[Iterator[Event]]) -> Iterator[Event]:
    """The events of every stream, taken in turn one Step at a time each (other events pass as they come), until
    all have ended."""
    live = list(streams)
    while live:
        for stream in list(live):
            for event in stream:
                yield event
                if isinstance(event, Step):
                    break
            else:
                live.remove(stream)
