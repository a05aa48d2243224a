"""Steering as a stage: a control vector added to the residual stream (`SamplerSettings.steering`), recorded step by
step against an unsteered twin. A steered request decodes its n samples and n twins in one batched forward (2n rows):
the samples draw and continue their texts; each twin is the same model without the vector, fed its sample's tokens.
Every step's record gets a `SteerStep` (the KL between the two rows, the tokens steering moved most, what the twin
would have drawn with the same uniform). Strength 0 is no steering: such a request runs as a plain one, unchanged.
Also the vectors made from contrastive prompt pairs on the model thread (`VectorRequest` -> `VectorMade`).
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from app.core.control_vectors import ControlVector, VectorError, read_vector
from app.core.decoding.batch import PromptTokens, decode_batches, replay, start_batch
from app.core.decoding.loop import Row, decode, token_of
from app.core.decoding.prefill import chunks
from app.core.events import Event, Finished, Prefilled, Request
from app.core.metrics import Clock
from app.core.record.record import Sample
from app.core.record.steer_record import SteerStep
from app.core.sampler.sampling import start_sample
from app.core.settings import SamplerSettings, SettingsError
from app.core.stage_inputs import Steering
from backends.base import LoadedModel, Model, Steer

MOVED = 5  # tokens recorded per step that steering raised most, and as many it lowered most


def steers(settings: SamplerSettings) -> bool:
    """Whether these settings steer: a vector at a strength other than 0 (the stage table's row says the same)."""
    return settings.steering is not None and settings.steering.strength != 0


@dataclass(frozen=True)
class SteerPlan:
    """A steering as the model runs it: the vector read from its file, the layers it is added at, the strength."""

    vector: ControlVector
    layers: tuple[int, ...]
    strength: float

    def steer(self, scales: Sequence[float]) -> Steer:
        """What the forward adds: at each layer, row b gets strength × scales[b] × the layer's direction."""
        s = np.asarray(scales, dtype=np.float32)[:, None] * np.float32(self.strength)
        return Steer({layer: s * self.vector.directions[layer][None, :] for layer in self.layers})

    def relative(self) -> dict[int, float | None]:
        """Each layer's strength relative to the residual stream's norm there (None: the file records none)."""
        return {layer: self.vector.relative(layer, self.strength) for layer in self.layers}


def plan_for(model: Model, steering: Steering) -> SteerPlan:
    """`steering` checked against `model`; a SettingsError (one line) where the model cannot be steered, the file
    cannot be read, or it does not fit the model."""
    if not model.capabilities.steer:
        raise SettingsError(f"{model.info.name} cannot be steered: a server's model exposes no layers")
    try:
        vector = read_vector(steering.path)
    except VectorError as e:
        raise SettingsError(f"steering: {e}") from None
    name, info = steering.path.replace("\\", "/").rsplit("/", 1)[-1], model.info
    if vector.hidden != info.hidden_size:
        raise SettingsError(f"steering: {name} is for a hidden size of {vector.hidden}; {info.name}'s is "
                            f"{info.hidden_size}")
    layers = steering.layers or vector.layers
    for layer in layers:
        if layer not in vector.directions:
            raise SettingsError(f"steering: {name} has no direction for layer {layer} (it has "
                                f"{', '.join(map(str, vector.layers))})")
        if layer >= info.layers:
            raise SettingsError(f"steering: layer {layer} is past {info.name}'s last layer ({info.layers - 1})")
    return SteerPlan(vector, tuple(layers), steering.strength)


def generate_steered(model: LoadedModel, request: Request, prompt: PromptTokens, seed: int, clock: Clock,
                     cancel: threading.Event) -> Iterator[Event]:
    """A steered request's events, as `generation.generate` makes a plain one's (its own cache: a steered prefix is
    of no use to an unsteered run, and the kept `Prefix` is left as it was)."""
    plan = plan_for(model, request.settings.steering)  # type: ignore[arg-type]  # (steers: set)
    n = request.n
    cache = model.new_cache()
    model.steer(plan.steer([1.0] * n + [0.0] * n))
    try:
        logits = prefill_rows(model, cache, prompt.context, 2 * n, cancel)
        if logits is None:
            metrics = clock.metrics(len(prompt.context), 0)
            yield from (Finished(request.id, "cancelled", metrics, None, rid) for rid in request.run_ids)
            return
        yield Prefilled(request.id, tuple(prompt.ids), prompt.text, seed, clock.prefilled(), 0)
        batch = start_batch(model, request, prompt, seed, cache, clock, int(logits.shape[-1]), reused=0,
                            cache_rows=2 * n)
        yield from replay(batch)
        yield from decode_batches([batch], logits, cancel, twinned)
    finally:
        model.steer(None)


def prefill_rows(model: LoadedModel, cache: Any, ids: Sequence[int], rows: int,
                 cancel: threading.Event | None) -> Any:
    """`ids` forwarded into `rows` rows of `cache` in chunks sized by time (as `prefill.prefill`, cancellable
    between chunks); the last position's logits (rows, V), or None if cancelled."""
    logits = None
    for i, j in chunks(0, len(ids)):
        if cancel is not None and cancel.is_set():
            return None
        logits = model.forward([list(ids[i:j])] * rows, cache)
        model.ops.sync([logits])
    return logits


class _Twinned:
    """The model as `decode` sees it in a steered run: n rows, each forward made for 2n (the steered rows, then their
    twins fed the same tokens). Every forward's whole logits are kept, in order, for the step that reads them."""

    def __init__(self, model: LoadedModel, n: int, first: Any) -> None:
        self.model, self.ops, self.n = model, model.ops, n
        self.kept: deque[Any] = deque([first])

    def forward(self, tokens: Any, cache: Any, positions: str = "last") -> Any:
        if isinstance(tokens, list):
            both = tokens + tokens
        else:  # drawn tokens still on the device, (n, 1)
            rows = [tokens[i] for i in range(self.n)]
            both = self.ops.stack(rows + rows)
        logits = self.model.forward(both, cache)
        self.kept.append(logits)
        return logits[: self.n]


@dataclass
class _Twin:
    """A sample's unsteered twin: the same uniforms (its generator a copy of the sample's) and penalty counts that
    follow the sample's tokens."""

    rng: np.random.Generator
    history: Any


def twinned(model: LoadedModel, logits: Any, cache: Any, settings: SamplerSettings, rows: list[Row], *, steps: int,
            top_n: int = 20, record: bool = True,
            cancel: threading.Event | None = None) -> Iterator[list[Sample | int | None]]:
    """`decode` over the steered rows of a cache of 2n (`logits` (2n, V): the samples', then their twins'), each step's
    records measured against the twins (`SteerStep`)."""
    n, ops = len(rows), model.ops
    proxy = _Twinned(model, n, logits)
    twins = [_Twin(copy.deepcopy(r.rng), copy.deepcopy(r.history)) for r in rows]
    texts: dict[int, str] = {}
    for outs in decode(proxy, logits[:n], cache, settings, rows, steps=steps, top_n=top_n,  # type: ignore[arg-type]
                       record=record, cancel=cancel):
        step_logits = proxy.kept.popleft()  # (2n, V): this step's
        host = None
        measured: list[Sample | int | None] = []
        for i, (row, twin, out) in enumerate(zip(rows, twins, outs, strict=True)):
            u = float(twin.rng.random())  # the uniform the sample drew this step with (its generator's copy)
            if out is None:
                measured.append(None)
                continue
            s = row.settings or settings
            drawn = token_of(start_sample(ops, step_logits[n + i], s, u, history=twin.history, record=False).result())
            if twin.history is not None and drawn != token_of(out):
                twin.history.swap(ops, drawn, token_of(out))  # the twin is fed the sample's token
            if isinstance(out, Sample):
                host = ops.numpy(step_logits) if host is None else host
                out = replace(out, steer=measure(host[i], host[n + i], out, drawn, model.tokenizer, texts))
            measured.append(out)
        yield measured


def measure(steered: np.ndarray, unsteered: np.ndarray, out: Sample, twin_token: int, tokenizer: Any,
            texts: dict[int, str]) -> SteerStep:
    """What steering did at a step: the two rows' logits (V,) compared over the whole vocabulary."""
    ls, lu = _log_softmax(steered), _log_softmax(unsteered)
    ps, pu = np.exp(ls), np.exp(lu)
    with np.errstate(invalid="ignore"):
        kl = float(np.sum(np.where(ps > 0, ps * (ls - lu), 0.0)))
    d = ps - pu
    k = min(MOVED, len(d) - 1)
    up = np.argpartition(-d, k)[:k]
    down = np.argpartition(d, k)[:k]
    up, down = up[np.argsort(-d[up], kind="stable")], down[np.argsort(d[down], kind="stable")]
    ids = np.concatenate([up[d[up] > 0], down[d[down] < 0]]).astype(np.int32)
    for t in ids.tolist():
        if t not in texts:
            texts[t] = tokenizer.token_text(t)
    return SteerStep(kl=kl, unsteered=pu[out.top_ids[: out.top_n]].astype(np.float32),
                     token_logprob=float(lu[out.token]), twin_token=int(twin_token), moved_ids=ids,
                     moved=np.stack([pu[ids], ps[ids]], axis=-1).astype(np.float32).reshape(-1, 2),
                     moved_texts=tuple(texts[t] for t in ids.tolist()))


def _log_softmax(x: np.ndarray) -> np.ndarray:
    """(V,) float64 log-probabilities; a NaN logit counts as -inf."""
    x = np.asarray(x, dtype=np.float64)
    x = np.where(np.isnan(x), -np.inf, x)
    m = np.max(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return x - m - np.log(np.sum(np.exp(x - m)))
