"""The generation loop, in layers.

`decoding.decode` is the token-level generator over a batch: forward, sample, record; no text. `batch` is a
request's samples on the text side: tokens to Step events, stop strings, Finished.
`generate(model, request, cancel, prefix)` runs them for one request: prompt -> prefill (only what the `Prefix`
cache does not already hold) -> decode of `request.n` samples in one batch -> events, one per token per sample.
It reads the model's `capabilities`: a model without a local forward pass (a server) samples by itself, and its
run is `remote_run`'s, with the same events.
It checks `cancel` before every step and between prefill chunks. Stops on EOS, stop strings (which may span
tokens and are never shown), max tokens, the context length, or cancel. Text is detokenized as a stream: no
half characters, no dropped bytes. It does not own threads or the model's lifetime: `model_thread` does.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, cast

from app.core.decoding.batch import PromptTokens, decode_batches, replay, start_batch
from app.core.decoding.prefill import prefill
from app.core.decoding.steering.steered import generate_steered, plan_for, steers
from app.core.events import Event, Finished, Message, Prefilled, Request
from app.core.metrics import Clock, Metrics
from app.core.record.spans import template_options
from app.core.remote.remote_run import run_remote
from app.core.sampler.constraint import compile_for
from app.core.settings import MAX_SEED, SamplerSettings
from backends.base import LoadedModel, Model, Tokenizer
from backends.remote.backend import RemoteModel


class PromptError(ValueError):
    """A prompt that cannot be run (empty, too long, chat without a template)."""


# A prompt of more characters than this many per token of the context cannot fit it: refused before it is tokenized
# (a tokenizer given megabytes takes seconds and gigabytes, or aborts the process). Real text runs ~2-6 characters a
# token; a generous bound, so that only what can never fit is refused unread.
MAX_CHARS_PER_TOKEN = 64


def prompt_tokens(tok: Tokenizer, prompt: str, messages: Sequence[Message] | None,
                  think: bool = True) -> tuple[list[int], str]:
    """The text the model sees (chat messages through the model's template, told thinking is off where `think` is
    False) and its token ids: one definition for a run and for the editor's token count."""
    if messages is None:
        return tok.encode(prompt), prompt
    try:
        text = tok.apply_chat_template([{"role": m.role, "content": m.content} for m in messages],
                                       template_options(think))
    except ValueError as e:
        raise PromptError(str(e)) from e
    return tok.encode(text, add_special_tokens=False), text


def build_prompt(tok: Tokenizer, request: Request, context_length: int = 0) -> tuple[list[int], str]:
    check_length(request, context_length)
    if request.prompt_ids is not None:
        ids, text = list(request.prompt_ids), tok.decode(request.prompt_ids)
    else:
        ids, text = prompt_tokens(tok, request.prompt, request.messages, request.settings.think)
    if not ids:
        if tok.bos_id is None:
            raise PromptError("the prompt is empty: type something to continue")
        ids = [tok.bos_id]  # an empty prompt starts from the beginning-of-text token
    if context_length and len(ids) >= context_length:
        raise PromptError(f"the prompt is {len(ids)} tokens; this model's context holds {context_length}")
    return ids, text


def check_length(request: Request, context_length: int) -> None:
    """A PromptError when the prompt's text (its messages' text in chat) is too long to fit `context_length` tokens
    at any tokenization (`MAX_CHARS_PER_TOKEN`): said before the tokenizer sees it."""
    if not context_length or request.prompt_ids is not None:
        return
    chars = len(request.prompt) if request.messages is None else sum(len(m.content) for m in request.messages)
    if chars > context_length * MAX_CHARS_PER_TOKEN:
        raise PromptError(f"the prompt is {chars:,} characters: far more than this model's context of "
                          f"{context_length:,} tokens holds")


class Prefix:
    """The KV cache a run leaves behind and the tokens it holds, so that the next run sharing a prefix of them
    prefills only what follows (a re-run, a changed ending, a branch). Owned by the thread that owns the model."""

    def __init__(self) -> None:
        self.cache: Any = None
        self.ids: list[int] = []

    def take(self, model: LoadedModel, ids: Sequence[int]) -> tuple[Any, int]:
        """A cache holding the longest reusable prefix of `ids` (at least the last token is left to compute: its
        logits are needed), and that prefix's length."""
        cache, held, self.cache, self.ids = self.cache, self.ids, None, []
        n = min(common_prefix(held, ids), len(ids) - 1)
        if cache is None or n <= 0 or not model.capabilities.trim_fork:
            return model.new_cache(), 0
        model.trim(cache, model.cache_len(cache) - n)
        return cache, n

    def keep(self, model: LoadedModel, cache: Any, ids: Sequence[int]) -> None:
        """Keep `cache`, which holds the first `cache_len` of `ids` (a last drawn token may not be in it)."""
        self.cache, self.ids = cache, list(ids[: model.cache_len(cache)])

    def clear(self) -> None:
        self.cache, self.ids = None, []


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n



def generate(model: Model, request: Request, cancel: threading.Event,
             prefix: Prefix | None = None) -> Iterator[Event]:
    """The events of one request, by what the model declares: a model with a local forward pass is prefilled and
    decoded here (reusing `prefix`'s cache); one that samples by itself (a server) streams what it reports.

    A branch (`request.inherited`) starts after its parent's first k steps: they are prefilled (mostly from the
    `Prefix` cache), taken into its trace and re-sent as its first Step events, and its draws continue the
    seed's sequence at step k (the same uniform per step as its parent); `request.force` is taken at step k."""
    if steers(request.settings):
        plan_for(model, request.settings.steering)  # type: ignore[arg-type]  # (a server's model is refused here)
    if not model.capabilities.forward:
        return run_remote(cast(RemoteModel, model), request, cancel)
    return _generate(cast(LoadedModel, model), request, cancel, prefix if prefix is not None else Prefix())


def _generate(model: LoadedModel, request: Request, cancel: threading.Event, prefix: Prefix) -> Iterator[Event]:
    clock = Clock()
    prompt = checked_prompt(model, request)
    seed = run_seed(request.settings)
    if request.settings.constraint is not None:  # compiled before the prefill: one that cannot be fails at once
        compile_for(request.settings.constraint, model.tokenizer, model.info.vocab_size)
    if steers(request.settings):  # its own cache, of steered and unsteered rows: the prefix is left as it is
        yield from generate_steered(model, request, prompt, seed, clock, cancel)
        return
    cache, reused = prefix.take(model, prompt.context)
    logits = prefill(model, cache, prompt.context, cancel, reused)
    if logits is None:  # cancelled between chunks: the cache keeps what was computed
        prefix.keep(model, cache, prompt.context)
        yield from cancelled_in_prefill(request, clock.metrics(len(prompt.context), 0), reused)
        return
    yield Prefilled(request.id, tuple(prompt.ids), prompt.text, seed, clock.prefilled(), reused)
    rows = model.fork(cache, request.n) if request.n > 1 else cache  # n > 1: the prompt's cache stays reusable
    batch = start_batch(model, request, prompt, seed, rows, clock, int(logits.shape[-1]), reused=reused)
    yield from replay(batch)
    yield from decode_batches([batch], logits, cancel)
    prefix.keep(model, cache, prompt.ids + batch.runs[0].drawn if request.n == 1 else prompt.context)


def checked_prompt(model: LoadedModel, request: Request) -> PromptTokens:
    """The prompt's ids and text, and the context the model sees before the first new step (the prompt and a
    branch's inherited tokens); a PromptError where they do not fit the model's context."""
    ids, text = build_prompt(model.tokenizer, request, model.info.context_length)
    context = ids + [st.token_id for st in request.inherited]
    ctx = model.info.context_length
    if ctx and len(context) >= ctx:
        raise PromptError(f"the prompt and the branch's first {len(request.inherited)} tokens are {len(context)} "
                          f"tokens; this model's context holds {ctx}")
    return PromptTokens(ids, text, context)


def run_seed(settings: SamplerSettings) -> int:
    """The run's seed: the one set, else a new one (reported, so that the run can be repeated)."""
    return settings.seed if settings.seed is not None else secrets.randbelow(MAX_SEED + 1)


def cancelled_in_prefill(request: Request, metrics: Metrics, reused: int) -> Iterator[Finished]:
    for rid in request.run_ids:
        yield Finished(request.id, "cancelled", replace(metrics, reused_tokens=reused), None, rid)
