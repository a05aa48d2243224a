"""Steering vectors made on the model thread from contrastive prompt pairs (`VectorRequest` -> `VectorMade`): each
prompt's residual stream at its last token, read after every chosen layer (`Layers.watch_layers`, unsteered), then the
pairs' differences made into a vector (`control_vectors.make_vector`) and saved as llama.cpp's control-vector GGUF.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from app.core.control_vectors import ControlVector, VectorError, make_vector, write_vector
from app.core.events import Event, job_id
from app.core.models.sources import ModelSpec
from app.core.settings import SettingsError
from backends.base import LoadedModel


@dataclass(frozen=True)
class VectorRequest:
    """Make a vector on `model` from contrastive pairs (`positive[i]` against `negative[i]`), at `layers` (): every
    layer from 1), by `method` ("mean" or "pca"); saved to `path` where one is given."""

    model: ModelSpec = field(default_factory=ModelSpec)
    positive: tuple[str, ...] = ()
    negative: tuple[str, ...] = ()
    layers: tuple[int, ...] = ()
    method: str = "mean"
    path: str = ""
    id: int = field(default_factory=job_id)  # it makes no run

    @property
    def run_ids(self) -> tuple[int, ...]:
        return ()


@dataclass(frozen=True)
class VectorMade:
    request_id: int
    vector: ControlVector
    path: str  # where it was saved ("": not saved)


def make_from_pairs(model: LoadedModel, request: VectorRequest, cancel: threading.Event) -> Iterator[Event]:
    """The vector `request` asks for (`VectorMade`); a SettingsError (one line) where the pairs or layers cannot
    make one. The residual stream is read at each prompt's last token, unsteered (`Layers.watch_layers`)."""
    if not model.capabilities.layers:
        raise SettingsError(f"{model.info.name} exposes no layers: a vector is made on a local model")
    pairs = list(zip(request.positive, request.negative, strict=False))
    if not pairs or len(request.positive) != len(request.negative):
        raise SettingsError(f"a vector needs pairs: {len(request.positive)} positive and {len(request.negative)} "
                            "negative prompts given")
    if any(not a.strip() or not b.strip() for a, b in pairs):
        raise SettingsError("a prompt of a pair is empty")
    layers = request.layers or tuple(range(1, model.info.layers))
    if past := [n for n in layers if not 0 < n < model.info.layers]:
        raise SettingsError(f"layer {past[0]} cannot be steered: {model.info.name}'s layers run from 1 to "
                            f"{model.info.layers - 1} (llama.cpp's control vectors never steer layer 0)")
    positive = pair_states(model, request.positive, layers, cancel)
    negative = pair_states(model, request.negative, layers, cancel)
    if positive is None or negative is None:
        return
    try:
        vector = make_vector(positive, negative, layers, request.method, model.info.name)
        if request.path:
            write_vector(request.path, vector)
    except VectorError as e:
        raise SettingsError(str(e)) from None
    except OSError as e:
        raise SettingsError(f"cannot write {request.path}: {e.strerror or e}") from None
    yield VectorMade(request.id, vector, request.path)


def pair_states(model: LoadedModel, texts: Sequence[str], layers: Sequence[int],
                cancel: threading.Event | None = None) -> np.ndarray | None:
    """(P, layers, hidden) float32: the residual stream after each of `layers` at each text's last token (None if
    cancelled). Each text runs alone, from an empty cache, at most the model's context long (its last tokens)."""
    out = []
    ctx = model.info.context_length or 0
    model.watch_layers(True)  # type: ignore[attr-defined]  # (capabilities.layers: a `Layers`)
    try:
        for text in texts:
            if cancel is not None and cancel.is_set():
                return None
            ids = model.tokenizer.encode(text) or [model.tokenizer.bos_id or 0]
            model.forward([ids[-ctx:] if ctx else ids], model.new_cache())
            states = np.asarray(model.ops.numpy(model.layer_states()), dtype=np.float32)  # type: ignore[attr-defined]
            out.append(states[0, [n + 1 for n in layers]])  # (row 0: the embeddings)
    finally:
        model.watch_layers(False)  # type: ignore[attr-defined]
    return np.stack(out)
