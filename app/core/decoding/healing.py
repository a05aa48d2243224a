"""Token healing, the prompt-boundary doctor. A prompt that ends inside what the model usually writes as one token
(`http:` before `//`, a trailing space before a word) makes it continue from a boundary it rarely saw. `boundary`
reads the prompt's surprisal record (`surprisal.PromptScore`) for that sign: the model's recorded alternatives at the
last position that extend the last token's text outweigh the token itself. `heal` backs off the last token and
constrains the text to start with it: a regular expression (its text escaped, then anything) that the grammar stage
applies, so the first step allows only tokens that start with the backed-off text (or, for text of several
characters, a start of it) and the run is otherwise a normal one. No model here: ids and texts in, plain data out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from app.core.decoding.generation import prompt_tokens
from app.core.decoding.surprisal import PromptScore
from app.core.events import Request, job_id
from app.core.stage_inputs import Constraint
from backends.base import Tokenizer

TokenText = Callable[[int], str]
REGEX_SPECIAL = set("\\.+*?()|[]{}^$#&-~")  # escaped for the engine's regular expressions (Rust's syntax)


@dataclass(frozen=True)
class Boundary:
    """The prompt's last token as its surprisal record sees it."""

    token: int
    text: str
    logprob: float  # log p(last token | the tokens before it)
    extensions: tuple[tuple[int, str, float], ...]  # recorded alternatives there whose text extends it: (id, text, p)

    @property
    def extension_mass(self) -> float:
        return sum(p for _, _, p in self.extensions)

    @property
    def rare(self) -> bool:
        """The model put more probability on longer tokens starting with this text than on the token itself."""
        return self.extension_mass > math.exp(self.logprob)


@dataclass(frozen=True)
class Healed:
    prompt_ids: tuple[int, ...]  # the prompt without its last token
    text: str  # the backed-off token's text: what the continuation must start with
    constraint: Constraint  # the regular expression that says so (the grammar stage applies it)


def boundary(score: PromptScore, token_text: TokenText) -> Boundary | None:
    """The last token's boundary, or None for a prompt of one token (nothing precedes it) or an empty-text token."""
    if len(score.ids) < 2 or math.isnan(float(score.logprobs[-1])):
        return None
    last = score.ids[-1]
    text = token_text(last)
    if not text:
        return None
    longer = []
    for tid, lp in zip(score.top_ids[-1].tolist(), score.top_logprobs[-1].tolist(), strict=True):
        alt = token_text(tid)
        if not math.isnan(lp) and tid != last and len(alt) > len(text) and alt.startswith(text):
            longer.append((tid, alt, math.exp(lp)))
    return Boundary(last, text, float(score.logprobs[-1]), tuple(longer))


def text_of(tokenizer: Tokenizer) -> TokenText:
    """Each token's own text, decoded (a token holding part of a character ends in U+FFFD): what healing compares."""
    return lambda t: tokenizer.decode([t])


def heal(ids: Sequence[int], token_text: TokenText) -> Healed:
    """`ids` with the last token backed off and the constraint that its text comes first (ValueError for a prompt
    of one token, or a last token with no text or only part of a character)."""
    if len(ids) < 2:
        raise ValueError("healing backs off the prompt's last token: the prompt needs at least two")
    text = token_text(ids[-1])
    if not text or "\ufffd" in text:
        raise ValueError("the prompt's last token has no whole character to heal")
    return Healed(tuple(ids[:-1]), text, Constraint("regex", prefix_regex(text)))


def prefix_regex(text: str) -> str:
    """A regular expression for any text that starts with `text`."""
    return "".join("\\" + ch if ch in REGEX_SPECIAL else ch for ch in text) + "(?s:.*)"


def first_tokens(text: str, token_text: TokenText, vocab: int) -> tuple[int, ...]:
    """The tokens the healed run's first step allows (by their decoded text, `text_of`): those that start with
    `text`, and those that are a start of it (the next then continues it)."""
    return tuple(t for t in range(vocab) if (s := token_text(t)) and (s.startswith(text) or text.startswith(s)))


def healed_request(request: Request, tokenizer: Tokenizer) -> tuple[Request, Healed]:
    """`request` healed: its prompt's ids without the last token, its settings constrained to start with that
    token's text. Refused (ValueError, one line) in chat (the template ends the prompt) or with a constraint set."""
    if request.messages is not None or request.prompt_ids is not None:
        raise ValueError("healing works on a completion prompt typed as text, not a chat or token ids")
    if request.settings.constraint is not None:
        raise ValueError("healing constrains the text to start with the backed-off token: turn the constraint off")
    ids, _ = prompt_tokens(tokenizer, request.prompt, None)
    healed = heal(ids, text_of(tokenizer))
    prompt = request.prompt.removesuffix(healed.text)
    settings = request.settings.with_(constraint=healed.constraint)
    return replace(request, prompt=prompt, prompt_ids=healed.prompt_ids, settings=settings, id=job_id(),
                   run_ids=()), healed
