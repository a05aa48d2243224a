"""One probe's conversation with a server (`probe.py` runs its checks over it): requests built by the one settings
mapping (`server_request.request_fields`, in the server's dialect) and sent through the remote backend, counted
against a budget (`Spent` once it is used up), each with the transport's time limits; the reference distribution
every check judges by (the server's own log-probabilities at temperature 1, filters off); what earlier checks
found. It judges nothing itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.core.remote.remote_run import dialect
from app.core.remote.server_request import request_fields
from app.core.settings import MAX_SEED, SamplerSettings
from backends.remote.backend import COMPLETIONS, End, RemoteError, RemoteModel
from backends.remote.tokens import Token, UnalignedError

TOP_N = 20  # candidates asked for per step (a server that allows fewer is asked for its most)
TOL = 0.05  # nats: two reported log-probabilities closer than this may be one number (servers round to bfloat16)
NEUTRAL = SamplerSettings(temperature=1.0, max_tokens=1)  # every filter off, sent as each server's neutral value
PROMPTS = ("The", "import ", "Once upon a time,")  # the reference is the flattest of these


class Spent(Exception):  # noqa: N818 - the budget's end, not an error of the server's
    """The probe's request budget is used up."""


@dataclass(frozen=True)
class Dist:
    """One step's reported candidates, likeliest first (finite log-probabilities only)."""

    ids: tuple[int, ...]
    texts: tuple[str, ...]
    logprobs: tuple[float, ...]

    @classmethod
    def of(cls, token: Token | None) -> Dist:
        top = [c for c in (token.top if token else ()) if math.isfinite(c.logprob)]
        return cls(tuple(c.id for c in top), tuple(c.text for c in top), tuple(c.logprob for c in top))

    def __len__(self) -> int:
        return len(self.ids)

    def index(self, token_id: int) -> int | None:
        return self.ids.index(token_id) if token_id in self.ids else None

    def lp(self, token_id: int) -> float | None:
        i = self.index(token_id)
        return None if i is None else self.logprobs[i]

    def prob(self, ids: Sequence[int] | set[int]) -> float:
        """The reported probability of `ids` among the listed ones (the unlisted have none here)."""
        return sum(math.exp(lp) for i, lp in zip(self.ids, self.logprobs, strict=True) if i in ids)

    @property
    def mass(self) -> float:
        return min(1.0, self.prob(set(self.ids)))

    def plain(self, ids: set[int]) -> bool:
        """Whether each of `ids` is listed with visible text of whole characters (a draw of it can be read)."""
        return all(i in self.ids and _plain(self.texts[self.ids.index(i)]) for i in ids)

    def near(self, k: int) -> set[int]:
        """The ids whose log-probability is within TOL of the k-th's (k from 0): ties a server may order either way."""
        return {i for i, lp in zip(self.ids, self.logprobs, strict=True) if abs(lp - self.logprobs[k]) <= TOL}


@dataclass(frozen=True)
class Reply:
    """The tokens of one completion as the server reported them, and why it ended."""

    tokens: tuple[Token, ...]
    reason: str | None

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(t.id for t in self.tokens)

    @property
    def first(self) -> Token | None:
        return self.tokens[0] if self.tokens else None

    @property
    def drawn(self) -> Token | None:
        """The first token, when its text shows which it was (an end of text or half a character does not)."""
        return self.tokens[0] if self.tokens and self.tokens[0].text else None


@dataclass(frozen=True)
class Finding:
    """What one check concluded: its verdict, what it saw, how sure, and what it sent."""

    verdict: str
    detail: str
    confidence: str = "exact"
    sent: str = ""


class Session:
    """A probe's requests to one model on one server, with its budget, seeds, reference and findings so far."""

    def __init__(self, model: RemoteModel, budget: int, alpha: float, seed: int = 0) -> None:
        self.model, self.budget, self.alpha = model, budget, alpha
        self.used = 0
        self._seed = seed
        self.prompt, self.ref = "", Dist((), (), ())
        self.greedy: Reply | None = None  # the temperature-0 run the A/B checks compare with
        self.found: dict[str, str] = {}  # check name -> verdict
        self.caps: dict[str, int] = {}  # check name -> draws it may make
        self.fingerprint: str | None = None
        self.gone = False  # the server stopped answering: the checks left are not run
        self.failed = 0  # checks in a row that ended without an answer from the server

    def new_seed(self) -> int:
        self._seed = (self._seed + 1) % (MAX_SEED + 1)
        return self._seed

    def _spend(self) -> None:
        if self.used >= self.budget:
            raise Spent
        self.used += 1

    def params(self, settings: SamplerSettings) -> dict[str, Any]:
        """The request's fields for `settings` (a new seed unless they hold one), as the server's dialect names them."""
        seed = settings.seed if settings.seed is not None else self.new_seed()
        return request_fields(settings, seed, settings.max_tokens, dialect(self.model))

    def ask(self, settings: SamplerSettings, *, prompt: str | None = None, top_n: int = TOP_N) -> Reply:
        """One completion of the reference prompt (or `prompt`) with `top_n` candidates a step."""
        self._spend()
        tokens, end = [], None
        for item in self.model.complete(self.params(settings), prompt=self.prompt if prompt is None else prompt,
                                        top_n=top_n):
            if isinstance(item, End):
                end = item
            else:
                tokens.append(item)
        return Reply(tuple(tokens), end.reason if end else None)

    def draw(self, settings: SamplerSettings) -> Token | None:
        """The token one request at `settings` draws first, with the reference's candidates; None when the reply
        does not show a token of plain text (an end of text, or part of a character the reply cannot be split
        into): then it is none of the reference's plain tokens."""
        try:
            return self.ask(settings, top_n=len(self.ref)).drawn
        except RemoteError as e:
            if unreadable(e):
                return None
            raise

    def whole(self, settings: SamplerSettings, extra: dict[str, Any], top_n: int = 0) -> dict[str, Any]:
        """One whole answer with every choice, as the server sent it (`extra`: fields the settings do not hold)."""
        self._spend()
        msg = self.model.answer(COMPLETIONS, {**self.params(settings), **extra, "prompt": self.prompt}, top_n)
        if isinstance(msg.get("system_fingerprint"), str):
            self.fingerprint = msg["system_fingerprint"][:120]
        return msg

    def choose_reference(self, prompts: Sequence[str]) -> None:
        """The reference: of `prompts`, the one whose first step is flattest (its top token's share of the listed
        mass least), among those whose three likeliest tokens are plain text."""
        best: tuple[float, str, Dist] | None = None
        for prompt in prompts:
            try:
                dist = Dist.of(self.ask(NEUTRAL.with_(seed=self.new_seed()), prompt=prompt).first)
            except RemoteError as e:
                if unreadable(e):
                    continue
                raise
            if len(dist) < 3 or not dist.plain(set(dist.ids[:3])):
                continue
            share = math.exp(dist.logprobs[0]) / dist.mass
            if best is None or share < best[0]:
                best = (share, prompt, dist)
        if best is None:
            raise RemoteError("no prompt's first step listed three likeliest tokens of plain text: nothing to judge "
                              "by (give another --prompt)")
        _, self.prompt, self.ref = best


def unreadable(e: RemoteError) -> bool:
    """Whether the transport refused a reply because its text cannot be split into the tokens it names (a token of
    part of a character): the server answered, but which token it drew is unknown."""
    return isinstance(e.__context__, UnalignedError)  # (the transport raises its line from the UnalignedError)


def _plain(text: str) -> bool:
    return bool(text.strip()) and "\ufffd" not in text
