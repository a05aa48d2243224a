"""The messages between the UI (or CLI) and the model thread: one immutable `Request`, a stream of events.

Every event carries the id of the request it belongs to, so a consumer can ignore a stale run's tail.
Errors travel on the same stream as tokens (`Failed`), so nobody waits forever.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Literal

from app.core.metrics import Metrics
from app.core.models import ModelSpec
from app.core.settings import SamplerSettings
from app.core.trace import RunTrace, StepTrace
from backends.base import ModelInfo

_ids = itertools.count(1)
FinishReason = Literal["eos", "stop", "length", "cancelled"]


@dataclass(frozen=True)
class Message:
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class Request:
    model: ModelSpec = field(default_factory=ModelSpec)
    prompt: str = ""
    messages: tuple[Message, ...] | None = None  # chat mode when given
    prompt_ids: tuple[int, ...] | None = None  # exact token ids instead of text (benchmarks, branches)
    settings: SamplerSettings = field(default_factory=SamplerSettings)
    top_n: int = 20
    record: bool = True  # False: tokens only, no per-step trace (benchmarks)
    ignore_eos: bool = False  # keep going past end-of-text (benchmarks, fixed-length runs)
    id: int = field(default_factory=lambda: next(_ids))


@dataclass(frozen=True)
class Loading:
    request_id: int
    message: str
    done: int = 0  # bytes, while downloading
    total: int = 0


@dataclass(frozen=True)
class Loaded:
    request_id: int
    info: ModelInfo
    seconds: float


@dataclass(frozen=True)
class Prefilled:
    request_id: int
    prompt_ids: tuple[int, ...]
    prompt_text: str  # what the model sees (the chat template applied)
    seed: int
    seconds: float


@dataclass(frozen=True)
class Step:
    request_id: int
    step: int
    token_id: int
    text: str  # what this token adds to the visible output
    trace: StepTrace | None  # None when the request does not record
    kv_bytes: int


@dataclass(frozen=True)
class Finished:
    request_id: int
    reason: FinishReason
    metrics: Metrics
    trace: RunTrace | None  # None when nothing was generated (a cancelled download)


@dataclass(frozen=True)
class Failed:
    request_id: int
    message: str
    opt_in: str | None = None  # a LoadOptions flag the user may turn on for this model to get past it


Event = Loading | Loaded | Prefilled | Step | Finished | Failed
