"""The messages between the UI (or CLI) and the model thread: one immutable `Request`, a stream of events.

Every event carries the id of the request it belongs to; events of a run (`Step`, `Finished`) also carry the
run's id, so a consumer routes them to the run they belong to. Every id is given here (`Request`'s, `job_id`). A
request of `n` samples makes `n` runs, decoded together in one batch. Errors travel on the same stream as tokens
(`Failed`), so nobody waits forever.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from app.core.metrics import Metrics
from app.core.models.sources import ModelSpec
from app.core.settings import SamplerSettings

if TYPE_CHECKING:
    from app.core.decoding.surprisal import PromptScore
    from app.core.record.multiverse import Multiverse
    from app.core.record.spec_record import SpecRound, SpecStats, SpecSummary
    from app.core.record.trace import RunTrace, StepTrace
    from backends.base import ModelInfo, Tokenizer

# Every id a request or a run has is given here. Run ids count up as the user counts them (a new window's first run
# is run 1); a request that makes no run (a load, a score, a beam search, a diff) counts down from -1, so that its
# events never route to a run and it takes no number from the runs.
_ids = itertools.count(1)
_job_ids = itertools.count(-1, -1)
FinishReason = Literal["eos", "stop", "length", "context", "cancelled", "error"]


def job_id() -> int:
    """The id of a request that makes no run (a model load, a prompt score, a beam search, a diff): below 0."""
    return next(_job_ids)


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
    lens: int = 0  # the live logit lens: each step records each layer's logits for its top-`lens` candidates (0: off)
    ignore_eos: bool = False  # keep going past end-of-text (benchmarks, fixed-length runs)
    n: int = 1  # samples of this prompt, decoded together from one prefill; sample i is seeded with seed + i
    parent: tuple[int, int] | None = None  # (run id, step) this run branches from
    inherited: tuple[StepTrace, ...] = ()  # steps taken over from the parent (a branch): its steps 0..k-1
    force: int | None = None  # the token drawn at the first new step, whatever the sampler says (a fork)
    force_after: tuple[int, ...] = ()  # taken at the steps after `force`'s, one a step (a multiverse node's path)
    branch: str = ""  # how it leaves its parent: "fork", "regenerate", "replay" or "edit" (RunTrace.branch)
    draft: ModelSpec | None = None  # speculative decoding: this draft model proposes, the target verifies
    draft_k: int = 4  # tokens the draft proposes per round, 1-8; 0: adaptive (from measured times: a seed replays
    # a fixed k's run exactly, not an adaptive one's)
    compare_plain: bool = False  # speculative: then time plain decoding of as many tokens (a `Speculated` event)
    id: int = field(default_factory=lambda: next(_ids))
    run_ids: tuple[int, ...] = ()  # one per sample; the first is the request's own id

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}")
        if len(self.run_ids) != self.n:
            object.__setattr__(self, "run_ids", (self.id, *(next(_ids) for _ in range(self.n - 1))))


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
    tokenizer: Tokenizer | None = None  # thread-safe and pure CPU: what the UI needs to count and show tokens


@dataclass(frozen=True)
class Compiling:
    """The model compiles its decode step for `rows` rows (torch with --compile, once per batch size): `seconds`
    is None as it starts, then how long it took. `message` is what the window, the CLI and the bench say."""

    request_id: int
    rows: int
    seconds: float | None = None

    @property
    def message(self) -> str:
        rows = "" if self.rows == 1 else f" for {self.rows} rows"
        if self.seconds is None:
            return f"Compiling the decode step{rows} (first run only)…"
        return f"Compiled the decode step{rows} in {self.seconds:.0f} s"


@dataclass(frozen=True)
class Prefilled:
    request_id: int
    prompt_ids: tuple[int, ...]
    prompt_text: str  # what the model sees (the chat template applied)
    seed: int  # of the first sample; sample i draws with seed + i
    seconds: float
    reused: int = 0  # prompt tokens whose KV cache was kept from an earlier run (not prefilled again)


@dataclass(frozen=True)
class Step:
    request_id: int
    step: int
    token_id: int
    text: str  # what this token adds to the visible output
    trace: StepTrace | None  # None when the request does not record
    kv_bytes: int | None  # None: not measured (a server's cache)
    run_id: int = 0  # 0: the request's own id (its first run)
    sequence: int = 0  # which of the request's n samples

    def __post_init__(self) -> None:
        if not self.run_id:
            object.__setattr__(self, "run_id", self.request_id)


@dataclass(frozen=True)
class Finished:
    request_id: int
    reason: FinishReason
    metrics: Metrics
    trace: RunTrace | None  # None when nothing was generated (a cancelled download)
    run_id: int = 0  # 0: the request's own id (its first run)
    sequence: int = 0
    message: str = ""  # for "error": what went wrong with this run, a line a person can act on

    def __post_init__(self) -> None:
        if not self.run_id:
            object.__setattr__(self, "run_id", self.request_id)


@dataclass(frozen=True)
class Stuck:
    """A constrained run that has made only whitespace, or one pattern over and over, for a while
    (`sampler.constraint.stuck`): said once per run, at its `step`; the run goes on."""

    request_id: int
    step: int
    message: str  # what it made, in words
    run_id: int = 0  # 0: the request's own id (its first run)
    sequence: int = 0

    def __post_init__(self) -> None:
        if not self.run_id:
            object.__setattr__(self, "run_id", self.request_id)


@dataclass(frozen=True)
class Scored:
    """The prompt's own token log-probabilities (prompt surprisal), for a `ModelThread.score` request."""

    request_id: int
    prompt_text: str
    score: PromptScore


@dataclass(frozen=True)
class Failed:
    request_id: int
    message: str
    opt_in: str | None = None  # a LoadOptions flag the user may turn on for this model to get past it


@dataclass(frozen=True)
class Drafted:
    """One round of speculative decoding (its tokens also come as `Step` events), and the run's totals so far."""

    request_id: int
    round: SpecRound
    stats: SpecStats
    run_id: int = 0


@dataclass(frozen=True)
class Speculated:
    """A speculative run's summary (before its `Finished`): totals, speed, and plain decoding's when measured."""

    request_id: int
    summary: SpecSummary
    run_id: int = 0


@dataclass(frozen=True)
class Explored:
    """A multiverse as it grows, once per round of look-ahead (`multiverse.reason` "running")."""

    request_id: int
    multiverse: Multiverse


@dataclass(frozen=True)
class ExploreDone:
    """A multiverse as it ended (`multiverse.reason`: "budget", "done" or "cancelled")."""

    request_id: int
    multiverse: Multiverse


Event = (Loading | Loaded | Compiling | Prefilled | Step | Finished | Scored | Failed | Drafted | Speculated | Explored
         | ExploreDone | Stuck)
