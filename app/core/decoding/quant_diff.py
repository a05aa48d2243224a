"""Quantization diff: one token sequence teacher-forced through two variants of a model (float32 and bfloat16, float
and MLX 4-bit, a GGUF quantization and its float source), compared position by position.

`run_diff(a, request, cancel, free_a)` runs on the model thread: an all-positions forward of the sequence through A
(in chunks, each computed before the cancel check), A's log-probabilities kept on the host; then B is loaded beside
A when the memory check says it fits, else after A is freed (`free_a`), and forced through the same chunks. Per
position it records KL(A‖B) in nats, both variants' top-1 token and each one's log-probability of the actual next
token (`QuantDiff`); `DiffSummary` is its mean KL, agreement and perplexities. No sampling settings apply: these
are the raw models. No Qt; the window's dock and `logitlab diff` both read these records.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.core.decoding.generation import PromptError, build_prompt
from app.core.decoding.prefill import ChunkedForward
from app.core.decoding.surprisal import HOST_BYTES, log_softmax, most_positions
from app.core.events import Request, job_id
from app.core.models.catalog import check_fits, estimate_memory
from app.core.models.sources import ModelSpec, model_label, resolve
from backends import get_backend
from backends.base import LoadedModel, ModelInfo, ModelLoadError, Tokenizer

KEPT_BYTES = 2**30  # A's log-probabilities kept for every position, (T - 1, V) float32, at most this much


@dataclass(frozen=True)
class DiffRequest:
    """Compare `model` (A) with `model_b` (B) on the prompt's tokens (or `prompt_ids`: a run's whole sequence)."""

    model: ModelSpec = field(default_factory=ModelSpec)
    model_b: ModelSpec = field(default_factory=ModelSpec)
    prompt: str = ""
    prompt_ids: tuple[int, ...] | None = None
    id: int = field(default_factory=job_id)  # it makes no run: its events never route to one

    @property
    def run_ids(self) -> tuple[int, ...]:
        return ()  # no run of the session: nothing to mark cancelled on a failure

    def as_request(self) -> Request:
        """The sequence part as a generation request (what `build_prompt` reads), under this one's id: no run id
        taken."""
        return Request(model=self.model, prompt=self.prompt, prompt_ids=self.prompt_ids, id=self.id)


@dataclass(frozen=True)
class TokenDiff:
    """One position: how A and B predicted the token at `position` from the ones before it."""

    position: int  # index of the predicted token in the sequence (1 .. T-1)
    token_id: int
    text: str
    kl: float  # KL(A‖B), nats
    logprob_a: float  # of the actual token
    logprob_b: float
    top_a: int  # each variant's most likely token (ties: the lowest id)
    top_b: int
    top_a_text: str
    top_b_text: str

    @property
    def agree(self) -> bool:
        return self.top_a == self.top_b


@dataclass(frozen=True)
class DiffSummary:
    tokens: int  # positions compared
    mean_kl: float
    max_kl: float
    agreement: float  # share of positions whose top-1 tokens agree
    perplexity_a: float  # exp(-mean log-probability of the actual tokens)
    perplexity_b: float


@dataclass(frozen=True)
class QuantDiff:
    """Row t is about predicting `ids[t + 1]` from `ids[: t + 1]`."""

    label_a: str
    label_b: str
    ids: tuple[int, ...]  # the sequence (T,)
    pieces: tuple[str, ...]  # (T,) what each token adds to the text (they join to the decoded sequence)
    kl: np.ndarray  # (T-1,) float64
    logprob_a: np.ndarray  # (T-1,) float64
    logprob_b: np.ndarray  # (T-1,) float64
    top_a: np.ndarray  # (T-1,) int64
    top_b: np.ndarray  # (T-1,) int64
    beside: bool  # B was loaded beside A (else after A was freed)
    top_texts: dict[int, str] = field(default_factory=dict)  # each top-1 token's text, as A's tokenizer shows it

    @property
    def agree(self) -> np.ndarray:  # (T-1,) bool
        return self.top_a == self.top_b

    def rows(self) -> list[TokenDiff]:
        return [self.row(t) for t in range(len(self.kl))]

    def row(self, t: int) -> TokenDiff:
        """Row t: the token at position t + 1."""
        a, b = int(self.top_a[t]), int(self.top_b[t])
        return TokenDiff(t + 1, self.ids[t + 1], self.pieces[t + 1], float(self.kl[t]), float(self.logprob_a[t]),
                         float(self.logprob_b[t]), a, b, self.top_texts.get(a, ""), self.top_texts.get(b, ""))

    def summary(self) -> DiffSummary:
        n = len(self.kl)
        return DiffSummary(n, float(self.kl.mean()), float(self.kl.max()), float(self.agree.mean()),
                           perplexity(self.logprob_a), perplexity(self.logprob_b))


@dataclass(frozen=True)
class DiffProgress:
    request_id: int
    message: str  # what the model thread is doing now ("Scoring with A…")


@dataclass(frozen=True)
class Diffed:
    request_id: int
    diff: QuantDiff | None  # None: cancelled


DiffEvent = DiffProgress | Diffed


@dataclass(frozen=True)
class _Pass:
    """What one variant's forward gives per position: (T-1,) log-probability of the actual token and top-1."""

    logprob: np.ndarray
    top: np.ndarray


def perplexity(logprobs: np.ndarray) -> float:
    return math.exp(-float(np.mean(logprobs))) if len(logprobs) else math.nan


def kl_rows(lp_a: np.ndarray, lp_b: np.ndarray) -> np.ndarray:
    """(n,) KL(A‖B) = Σ p_a (log p_a - log p_b) of each row of log-probabilities (n, V), in float64 sums; a token A
    gives no probability adds nothing, one only A gives any makes it infinite."""
    pa = np.exp(lp_a)
    with np.errstate(invalid="ignore"):
        terms = np.where(pa > 0, pa * (lp_a - lp_b), 0.0)
    return terms.sum(axis=-1, dtype=np.float64)


def variant_label(source: str, info: ModelInfo) -> str:
    """A variant as a person tells it from the other: its model, backend, precision and quantization."""
    quant = f", {info.quantization}" if info.quantization else ""
    return f"{model_label(source)} · {info.backend} {info.dtype}{quant}"


def token_pieces(tok: Tokenizer, ids: Sequence[int]) -> tuple[str, ...]:
    """What each token adds to the text, streamed as the output view does ('' while a character is partial)."""
    dec = tok.stream()
    pieces = [dec.add(int(i)) for i in ids]
    pieces[-1] += dec.flush()
    return tuple(pieces)


def check_length(n: int, vocab: int) -> None:
    """A `PromptError` unless there is a next token to predict and A's log-probabilities fit in `KEPT_BYTES`."""
    if n < 2:
        raise PromptError("a diff needs at least two tokens: each position predicts the next")
    most = KEPT_BYTES // (4 * max(1, vocab)) + 1
    if n > most:
        raise PromptError(f"the text is {n:,} tokens; a diff keeps A's log-probabilities at every position, "
                          f"{most:,} tokens at most for this {vocab:,}-token vocabulary: shorten it")


def load_variant(spec: ModelSpec, path: Path) -> LoadedModel:
    """B, through the backend its spec names (auto: as for any model at `path`)."""
    return get_backend(spec.backend, path).load(path, spec.options)


def run_diff(a: LoadedModel, request: DiffRequest, cancel: threading.Event, free_a: Callable[[], None],
             load: Callable[[ModelSpec, Path], LoadedModel] = load_variant) -> Iterator[DiffEvent]:
    """A's pass, B loaded with `load` (beside A if it fits, else after `free_a`), B's pass; then `Diffed` (None when
    cancelled)."""
    ids, _ = build_prompt(a.tokenizer, request.as_request(), a.info.context_length)
    vocab, pieces, token_text = a.info.vocab_size, token_pieces(a.tokenizer, ids), a.tokenizer.token_text
    label_a = variant_label(request.model.source, a.info)
    check_length(len(ids), vocab)
    spec = request.model_b
    path = resolve(spec.source, None, cancel, offline=spec.offline)  # before A's pass: a B not found fails fast
    yield DiffProgress(request.id, f"Scoring {len(ids):,} tokens with A: {label_a}…")
    ranges: list[tuple[int, int]] = []
    kept = np.empty((len(ids) - 1, vocab), dtype=np.float32)  # (T-1, V): A's log-probabilities
    first = _forward(a, ids, cancel, None, kept, ranges)
    if first is None:
        yield Diffed(request.id, None)
        return
    beside = estimate_memory(path).fits
    if not beside:
        free_a()  # one after the other: A's logits are kept, its weights go
        check_fits(path)
    yield DiffProgress(request.id, f"Loading B: {model_label(spec.source)}…")
    b = load(spec, path)
    try:
        _check_same_tokens(b, vocab, ids, "".join(pieces))
        if spec.options.quantize_bits and not b.info.quantization:  # (torch loads it in full: B would be A)
            raise ModelLoadError(f"{b.info.backend} does not quantize on load: choose the mlx backend for B's "
                                 f"{spec.options.quantize_bits}-bit weights")
        yield DiffProgress(request.id, f"Scoring with B: {variant_label(spec.source, b.info)}…")
        kl = np.empty(len(ids) - 1, dtype=np.float64)
        second = _forward(b, ids, cancel, ranges, kept, None, kl)
        label_b = variant_label(spec.source, b.info)
    finally:
        b.close()
    if second is None:
        yield Diffed(request.id, None)
        return
    tops = {int(t): token_text(int(t)) for t in {*first.top.tolist(), *second.top.tolist()}}
    yield Diffed(request.id, QuantDiff(label_a, label_b, tuple(ids), pieces, kl, first.logprob, second.logprob,
                                       first.top, second.top, beside, tops))


def _forward(model: LoadedModel, ids: Sequence[int], cancel: threading.Event, ranges: list[tuple[int, int]] | None,
             kept: np.ndarray, record: list[tuple[int, int]] | None, kl: np.ndarray | None = None) -> _Pass | None:
    """Teacher-force `ids` through `model` in chunks (`ranges`, else sized by time within `HOST_BYTES`; each chunk
    computed to the end, then the cancel checked). The first pass (`kl` None) writes its log-probabilities into
    `kept` and its ranges into `record`; the second writes KL(kept ‖ its own) into `kl`. None when cancelled."""
    n = len(ids) - 1
    logprob, top = np.empty(n, dtype=np.float64), np.empty(n, dtype=np.int64)
    forward = ChunkedForward(model, model.new_cache(), ids[:-1], cancel, positions="all", ranges=ranges,
                             most=most_positions(model.info.vocab_size, HOST_BYTES))
    for start, end, logits in forward:  # position p predicts token p + 1
        lp = log_softmax(np.asarray(model.ops.numpy(logits)[0], dtype=np.float32))  # (end - start, V) float32
        at = np.arange(end - start)
        logprob[start:end] = lp[at, np.asarray(ids[start + 1 : end + 1])]
        top[start:end] = lp.argmax(axis=-1)  # the first maximum: the lowest id
        if kl is None:
            kept[start:end] = lp
            record.append((start, end))
        else:
            kl[start:end] = kl_rows(kept[start:end], lp)
    return None if forward.cancelled else _Pass(logprob, top)


def _check_same_tokens(b: LoadedModel, vocab: int, ids: Sequence[int], text: str) -> None:
    """A `ModelLoadError` unless B reads the sequence's tokens as A does (same vocabulary, same text)."""
    if b.info.vocab_size != vocab:
        raise ModelLoadError(f"B's vocabulary has {b.info.vocab_size:,} tokens and A's {vocab:,}: the two variants "
                             "must share a tokenizer")
    if "".join(token_pieces(b.tokenizer, ids)) != text:
        raise ModelLoadError("B reads these tokens as other text than A: the two variants must share a tokenizer")
