"""Logit bias by a token's text or its id: `TOKEN=VALUE` as the command line takes it, and the one rule (used by the
window's editor and the command line) that turns a typed token into a token id of the loaded model.

A typed token is an id when it is all digits; otherwise it is text, which must encode (without special tokens) to
exactly one token. Anything else is a `SettingsError` whose one line names the text and how it tokenizes.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from app.core.files import typed as quoted
from app.core.settings import MAX_BIAS, SettingsError, read_escapes
from backends.base import Tokenizer

SHOWN_PIECES = 8  # a long text's pieces listed in its message, then "..."
MAX_ID_DIGITS = 12  # a token id typed with more digits is past every vocabulary


@dataclass(frozen=True)
class BiasEntry:
    """One `--logit-bias TOKEN=VALUE`: the token as an id, or as text to find in the model's vocabulary."""

    token: int | str
    value: float


def parse_entry(typed: str) -> BiasEntry:
    """`TOKEN=VALUE`, split at the last '=': TOKEN an id (digits) or a text (quotes allowed, `\\n`-style escapes
    read, spaces kept: `" the"=-5`); VALUE within ±MAX_BIAS."""
    token, sep, value = typed.rpartition("=")
    try:
        number = float(value)
    except ValueError:
        number = None
    if not sep or not token or number is None or not -MAX_BIAS <= number <= MAX_BIAS:
        raise SettingsError(f"expected TOKEN=VALUE (a token's text or id, a value from {-MAX_BIAS:g} to "
                            f"{MAX_BIAS:g}), got {quoted(typed)}")
    return BiasEntry(typed_token(token) if _is_id(token) else read_text(token), number)


def read_text(token: str) -> str:
    """A token's text as typed: a quoted string read as Python reads it ('…' or "…"), else with `read_escapes`."""
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"":
        try:
            text = ast.literal_eval(token)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise SettingsError(f"logit bias: cannot read the quoted token {quoted(token)}") from None
        if isinstance(text, str) and text:
            return text
        raise SettingsError(f"logit bias: the quoted token {token} is empty")
    return read_escapes(token)


def token_id(token: int | str, tokenizer: Tokenizer | None, vocab_size: int) -> int:
    """The id `token` names in this vocabulary; else `SettingsError` with why, e.g. "' hello' is 2 tokens here
    (' hel', 'lo'); give one token or its id" (`vocab_size` 0: any id goes; `tokenizer` None: ids only)."""
    if isinstance(token, int):
        if vocab_size and not 0 <= token < vocab_size:
            raise SettingsError(f"token id {token} is past this vocabulary ({vocab_size} tokens, ids 0 to "
                                f"{vocab_size - 1})")
        return token
    if tokenizer is None:
        raise SettingsError(f"{quoted(token)} is text, and this model has no tokenizer here: give a token id")
    ids = tokenizer.encode(token, add_special_tokens=False)
    if len(ids) != 1:
        pieces = ", ".join(repr(tokenizer.token_text(i)) for i in ids[:SHOWN_PIECES])
        more = ", ..." if len(ids) > SHOWN_PIECES else ""
        how = f"{len(ids)} tokens here ({pieces}{more})" if ids else "no token here"
        raise SettingsError(f"{quoted(token)} is {how}; give one token or its id")
    return ids[0]


def resolve(entries: Sequence[BiasEntry], tokenizer: Tokenizer | None,
            vocab_size: int) -> tuple[tuple[int, float], ...]:
    """Each entry as a (token id, value) pair, sorted by id; an id given twice keeps its last value. A token that
    is not found raises `SettingsError`, its line starting "logit bias: "."""
    pairs: dict[int, float] = {}
    for e in entries:
        try:
            pairs[token_id(e.token, tokenizer, vocab_size)] = e.value
        except SettingsError as err:
            raise SettingsError(f"logit bias: {err}") from None
    return tuple(sorted(pairs.items()))


def check_ids(pairs: Sequence[tuple[int, float]], vocab_size: int) -> None:
    """Settings' logit bias (id, value) pairs against the model that runs them: an id past its vocabulary raises
    `SettingsError` as `resolve` says it, whichever command or view asked (0: a server's, unknown here)."""
    for tid, _ in pairs:
        try:
            token_id(tid, None, vocab_size)
        except SettingsError as err:
            raise SettingsError(f"logit bias: {err}") from None


def typed_token(typed: str) -> int | str:
    """A token as typed in the window's box: an id when it is digits (spaces around allowed), else the text as is. An
    id of more digits than any vocabulary needs is refused (Python reads at most 4,300 digits)."""
    if not _is_id(typed.strip()):
        return typed
    if len(typed.strip()) > MAX_ID_DIGITS:
        raise SettingsError(f"token id {quoted(typed.strip())} is past any vocabulary")
    return int(typed)


def _is_id(text: str) -> bool:
    """Digits, 0-9 only (int() reads other scripts' digits too: those are a text token here)."""
    return text.isascii() and text.isdigit()
