"""Inside the model at a step: the logit lens and attention as plain data, and their jobs on the model thread.

`look(model, request, cancel, prefix)` reads the position that predicts step k of a sequence (its context: the prompt
and the first k tokens): the context but its last token is in the cache (the `Prefix` cache's reusable part, then a
chunked prefill of the rest), and the backend forwards that last token with its layers watched (`backends.base.Layers`).
It yields one `Looked` with a `LensGrid` (layers × top tokens, the drawn token's probability and rank per layer, the
layer where it first leads) or an `AttentionMap` (per layer and head, the position's weights over its context).
`watching(model, k)` turns the live lens on for a run (each step's Sample gets its `LiveLens`: `decoding.loop`).
A model whose layers are not exposed (a server's) is refused in one line. No Qt; the views draw these records.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from app.core.decoding.generation import Prefix
from app.core.decoding.prefill import ChunkedForward
from app.core.events import job_id
from app.core.models.sources import ModelSpec
from backends import connects
from backends.base import LayerAttention, LayerLens, Model, ModelLoadError

Kind = Literal["lens", "attention"]
TOP_K = 10  # candidates per layer in a full lens
LIVE_K = 8  # candidates per step in the live lens
APPROXIMATION = "an approximation: intermediate layers read through the last layer's norm and head"
NO_LAYERS = "a server's model exposes no layers: open a local model to see inside it ({})"


class InsideRefusedError(ModelLoadError):
    """A model whose layers cannot be read (a server's)."""


@dataclass(frozen=True)
class InsideRequest:
    """The lens (or attention) at `step` of the sequence `prompt_ids` + `tokens` (a run's drawn tokens): the position
    that predicts tokens[step], whose context is the prompt and tokens[:step]. Where `tokens` stops at `step`, no
    token is known there (the lens then marks none)."""

    model: ModelSpec = field(default_factory=ModelSpec)
    prompt_ids: tuple[int, ...] = ()
    tokens: tuple[int, ...] = ()
    step: int = 0
    top_k: int = TOP_K
    id: int = field(default_factory=job_id)  # it makes no run: its events never route to one

    @property
    def run_ids(self) -> tuple[int, ...]:
        return ()

    @property
    def context(self) -> list[int]:
        return [*self.prompt_ids, *self.tokens[: self.step]]

    @property
    def target(self) -> int | None:
        return self.tokens[self.step] if self.step < len(self.tokens) else None

    def check(self) -> None:
        if not self.prompt_ids:
            raise ValueError("the lens needs the run's prompt tokens")
        if not 0 <= self.step <= len(self.tokens):
            raise ValueError(f"step {self.step} is not one of the run's steps (0 to {len(self.tokens) - 1})")
        if self.top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {self.top_k}")


@dataclass(frozen=True)
class LensGrid:
    """The full lens at one step: per layer (row 0 the embeddings, row i layer i's output, the last row the model's
    own distribution) its top-K tokens over the whole vocabulary with their probabilities, and the drawn token's
    probability and rank. An approximation: intermediate layers are read through the last layer's norm and head."""

    step: int
    position: int  # the index in the sequence of the context's last token (the position read)
    top_ids: np.ndarray  # (L+1, K) int32
    top_probs: np.ndarray  # (L+1, K) float32
    top_texts: tuple[tuple[str, ...], ...]
    token_id: int | None  # the token drawn at the step (None: not known)
    token_text: str
    token_probs: np.ndarray  # (L+1,) float32 (NaN without a token)
    token_ranks: np.ndarray  # (L+1,) int64, 0-based (-1 without a token)
    lse: np.ndarray  # (L+1,) each row's logsumexp over the vocabulary: a token's logit is log(prob) + lse

    @property
    def layers(self) -> int:
        return len(self.top_ids)

    @property
    def layer_names(self) -> tuple[str, ...]:
        return ("embeddings", *(str(i) for i in range(1, self.layers)))

    @property
    def appears(self) -> int | None:
        """The first row where the drawn token is the top-1 (None: never, or no token)."""
        hits = np.flatnonzero(self.token_ranks == 0)
        return int(hits[0]) if hits.size else None

    def to_json(self) -> dict[str, Any]:
        layers = [{"layer": name, "token_prob": _num(self.token_probs[i]), "token_rank": int(self.token_ranks[i]),
                   "top": [{"token_id": int(t), "text": x, "prob": float(p)} for t, x, p in
                           zip(self.top_ids[i], self.top_texts[i], self.top_probs[i], strict=True)]}
                  for i, name in enumerate(self.layer_names)]
        return {"step": self.step, "position": self.position, "token_id": self.token_id, "token_text": self.token_text,
                "appears": self.appears, "approximation": APPROXIMATION, "layers": layers}


@dataclass(frozen=True)
class AttentionMap:
    """The attention of the position that predicts step `step`, over its context (positions 0 .. position): per layer
    and query head (`weights` (L, H, T)); query head h reads KV head h // (H // kv_heads). A layer with a sliding
    window sees only its last `windows[l]` positions (the others are 0)."""

    step: int
    position: int
    weights: np.ndarray  # (L, H, T) float32
    kv_heads: int
    windows: tuple[int | None, ...]
    context_texts: tuple[str, ...]  # (T,) each context token's display text

    @property
    def layers(self) -> int:
        return self.weights.shape[0]

    @property
    def heads(self) -> int:
        return self.weights.shape[1]

    @property
    def group(self) -> int:
        """Query heads per KV head (1: no grouping)."""
        return max(1, self.heads // max(1, self.kv_heads))

    def head_mean(self) -> np.ndarray:
        """(L, T) each layer's weights averaged over its heads."""
        return self.weights.mean(axis=1)

    def kv_head_of(self, head: int) -> int:
        return head // self.group

    def sharing(self, head: int) -> range:
        """The query heads that read the same KV head as `head` (itself included)."""
        start = self.kv_head_of(head) * self.group
        return range(start, start + self.group)

    def to_json(self, layer: int | None = None) -> dict[str, Any]:
        layers = range(self.layers) if layer is None else [layer]
        return {"step": self.step, "position": self.position, "heads": self.heads, "kv_heads": self.kv_heads,
                "context": list(self.context_texts),
                "layers": [{"layer": i + 1, "window": self.windows[i], "mean": self.head_mean()[i].tolist(),
                            "heads": self.weights[i].tolist()} for i in layers]}


@dataclass(frozen=True)
class Looked:
    """A lens or attention job's answer (`result` None: cancelled while the context was prefilled)."""

    request_id: int
    result: LensGrid | AttentionMap | None


def refuse_remote(spec: ModelSpec) -> None:
    """A server's model is refused before anything connects to it (its answer could not give it layers)."""
    if connects(spec.backend):
        raise InsideRefusedError(NO_LAYERS.format(spec.label))


def layered(model: Model) -> Any:
    """`model`, where its layers are exposed (`capabilities.layers`); else the one-line refusal."""
    if not model.capabilities.layers:
        raise InsideRefusedError(NO_LAYERS.format(model.info.name))
    return model


def look(model: Model, request: InsideRequest, kind: Kind, cancel: threading.Event,
         prefix: Prefix | None = None) -> Iterator[Looked]:
    """The lens or attention at the request's step, through `prefix`'s cache (which then holds the context)."""
    local = layered(model)
    request.check()
    context = request.context
    if local.info.context_length and len(context) > local.info.context_length:
        raise ValueError(f"the context is {len(context)} tokens; this model's holds {local.info.context_length}")
    prefix = prefix if prefix is not None else Prefix()
    cache, reused = prefix.take(local, context)
    ahead = ChunkedForward(local, cache, context[:-1], cancel, start=reused)
    for _ in ahead:
        pass
    if ahead.cancelled:
        prefix.keep(local, cache, context)
        yield Looked(request.id, None)
        return
    if kind == "lens":
        found = local.lens(cache, context[-1], request.target, request.top_k)
        result: LensGrid | AttentionMap = lens_grid(local.tokenizer, request, found)
    else:
        result = attention_map(local.tokenizer, request, local.attention(cache, context[-1]))
    prefix.keep(local, cache, context)
    yield Looked(request.id, result)


def lens_grid(tok: Any, request: InsideRequest, found: LayerLens) -> LensGrid:
    target = request.target
    texts: dict[int, str] = {}
    rows = tuple(tuple(_text(tok, int(t), texts) for t in row) for row in found.top_ids)
    probs = np.exp(found.top_logprobs).astype(np.float32)
    text = "" if target is None else _text(tok, target, texts)
    return LensGrid(request.step, len(request.context) - 1, found.top_ids, probs, rows, target, text,
                    np.exp(found.target_logprob).astype(np.float32), found.target_rank, found.lse)


def attention_map(tok: Any, request: InsideRequest, found: LayerAttention) -> AttentionMap:
    texts: dict[int, str] = {}
    context = request.context
    return AttentionMap(request.step, len(context) - 1, found.weights, found.kv_heads, tuple(found.windows),
                        tuple(_text(tok, t, texts) for t in context))


@contextmanager
def watching(model: Model, k: int) -> Iterator[None]:
    """The live lens on for what runs inside (k > 0: each step records its top-k's logits per layer). A model whose
    layers are not exposed (a server's) records none: its steps' lens is absent, as anything it cannot observe."""
    if k <= 0 or not model.capabilities.layers:
        yield
        return
    local: Any = model
    local.watch_layers(True)
    try:
        yield
    finally:
        local.watch_layers(False)


def _text(tok: Any, t: int, known: dict[int, str]) -> str:
    if t not in known:
        known[t] = tok.token_text(t)
    return known[t]


def _num(v: float) -> float | None:
    return None if np.isnan(v) else float(v)
