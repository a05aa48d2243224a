"""What an OpenAI-compatible server says about its tokens, made uniform: `Token`s with ids, text and sorted top
log-probabilities.

Servers differ: a token is named by its text (OpenAI, vLLM, llama.cpp; `bytes` when they send them) or by the
tokenizer's own string (mlx_lm.server: `Ġimport`, with ids); the chat format nests `logprobs.content`, the legacy
completions format lists `tokens` / `token_logprobs` / `top_logprobs`; and an entry's own token may not be the one
drawn (mlx_lm.server 0.32 names the first of an unsorted top-N). So the drawn token is the candidate whose bytes
make the text the server streamed (`align`), and every top list is sorted here. Pure Python, no HTTP.
"""

from __future__ import annotations

import codecs
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class MalformedError(ValueError):
    """A server message that is not what the OpenAI API describes."""


@dataclass(frozen=True)
class Candidate:
    id: int
    text: str  # for display (a partial UTF-8 character shows as U+FFFD)
    logprob: float


@dataclass(frozen=True)
class Token:
    """One generated token as the server reported it."""

    id: int
    text: str  # what it adds to the output (a half character waits for the token that completes it)
    logprob: float  # of the drawn token
    top: tuple[Candidate, ...]  # by log-probability, descending


@dataclass(frozen=True)
class _Cand:
    server_id: int | None
    data: bytes
    logprob: float


@dataclass(frozen=True)
class _Entry:
    own: _Cand
    top: tuple[_Cand, ...]  # sorted, descending

    def choices(self) -> list[_Cand]:
        """Who may have been drawn, the likeliest first (the entry's own token too, last if not in the top)."""
        return [*self.top, self.own] if self.own not in self.top else list(self.top)


class Vocab:
    """Token ids for one server: its own ids where it sends them, else one id per distinct token (by bytes),
    handed out in order. Thread-safe (concurrent samples share it)."""

    def __init__(self) -> None:
        self._ids: dict[bytes, int] = {}
        self._texts: dict[int, str] = {}
        self._lock = threading.Lock()

    def id_of(self, data: bytes, server_id: int | None = None) -> int:
        with self._lock:
            if server_id is None:
                server_id = self._ids.get(data)
                if server_id is None:
                    server_id = len(self._texts)
                    while server_id in self._texts:
                        server_id += 1
            self._ids.setdefault(data, server_id)
            self._texts.setdefault(server_id, data.decode("utf-8", errors="replace"))
            return server_id

    def text(self, token_id: int) -> str:
        return self._texts.get(token_id, f"<{token_id}>")


# GPT-2's byte-level alphabet: each byte shown as one printable character (Ġ is the space).
_PRINTABLE = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
_BYTE_OF = {chr(b): b for b in _PRINTABLE}
_BYTE_OF.update({chr(256 + i): b for i, b in enumerate(b for b in range(256) if b not in _PRINTABLE)})
_HEX_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def token_bytes(token: str, raw: Any = None) -> bytes:
    """A token's bytes: the server's `bytes` list when it sent one, else its text read as a byte-level BPE
    string (`Ġimport`) when it is one, a SentencePiece piece (`▁import`, `<0x0A>`), or plain text."""
    if isinstance(raw, list) and all(isinstance(b, int) and 0 <= b < 256 for b in raw):
        return bytes(raw)
    if token.startswith("bytes:"):  # vLLM's name for a partial character: bytes:\xe2\x80
        try:
            return codecs.escape_decode(token[6:])[0]
        except ValueError:
            pass
    if m := _HEX_BYTE.match(token):
        return bytes([int(m[1], 16)])
    if token and all(c in _BYTE_OF for c in token) and any(ord(c) >= 128 for c in token):
        return bytes(_BYTE_OF[c] for c in token)
    return token.replace("▁", " ").encode("utf-8")


def _cand(obj: Any, token_key: str = "token") -> _Cand:
    if not isinstance(obj, dict) or not isinstance(obj.get(token_key), str):
        raise MalformedError(f"a log-probability entry without a token: {str(obj)[:80]}")
    sid = obj.get("id")
    return _Cand(sid if isinstance(sid, int) else None, token_bytes(obj[token_key], obj.get("bytes")),
                 _logprob(obj.get("logprob")))


def _logprob(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise MalformedError(f"a log-probability that is not a number: {v!r}")
    return float(v)


def _sorted(cands: Sequence[_Cand]) -> tuple[_Cand, ...]:
    return tuple(sorted(cands, key=lambda c: -c.logprob))


def entries(choice: dict) -> list[_Entry] | None:
    """The log-probability entries of one streamed or whole choice (chat or legacy format); None when it has none."""
    lp = choice.get("logprobs")
    if not lp:
        return None
    if not isinstance(lp, dict):
        raise MalformedError(f"logprobs is not an object: {str(lp)[:80]}")
    if isinstance(lp.get("content"), list):
        return [_Entry(_cand(e), _sorted([_cand(t) for t in e.get("top_logprobs") or []]))
                for e in lp["content"] if e]
    if isinstance(lp.get("tokens"), list):
        tops = lp.get("top_logprobs") or [None] * len(lp["tokens"])
        return [_Entry(_Cand(None, token_bytes(t), _logprob(g)),
                       _sorted([_Cand(None, token_bytes(k), _logprob(v)) for k, v in (top or {}).items()]))
                for t, g, top in zip(lp["tokens"], lp.get("token_logprobs") or [], tops, strict=False)]
    raise MalformedError(f"logprobs in an unknown format: {str(lp)[:80]}")


def align(choices: Sequence[Sequence[_Cand]], text: bytes) -> list[tuple[int, int]] | None:
    """Which candidate each entry drew so that their bytes spell `text` (not empty), likeliest first (a
    depth-first search that backtracks), and where each one's visible text ends. The picks may stop short of the
    entries: those after the text is spelt were hidden (end of text, a stop string the server trimmed); leading
    whitespace the server stripped is hidden too. None when no choice spells it."""
    picks: list[tuple[int, int]] = []
    dead: set[tuple[int, int]] = set()
    k = 0
    while True:
        i, off = len(picks), picks[-1][1] if picks else 0
        if off >= len(text):
            return picks
        found = None
        if i < len(choices) and (i, off) not in dead:
            found = _match(choices[i], k, text, off)
        if found is not None:
            picks.append(found)
            k = 0
            continue
        dead.add((i, off))
        if not picks:
            return None
        k = picks.pop()[0] + 1


def _match(choices: Sequence[_Cand], k: int, text: bytes, off: int) -> tuple[int, int] | None:
    """The first candidate from k on that continues `text` at `off`, and where its visible text ends."""
    for j in range(k, len(choices)):
        data = choices[j].data
        if data and text.startswith(data, off):
            return j, off + len(data)
        if data and data.startswith(text[off:]):
            return j, len(text)
        if off == 0 and data[:1].isspace():  # a server may strip the output's leading whitespace
            rest = data.lstrip()
            cut = next((m for m in range(len(data) - len(rest) + 1) if text.startswith(data[m:])), None)
            if cut is not None:
                return j, len(data) - cut
    return None


class TokenMaker:
    """Turns one request's entries into `Token`s: picks the drawn candidate, gives ids, and decodes the text
    as a stream (a character split across tokens shows with the token that completes it)."""

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def tokens(self, found: list[_Entry], text: str) -> list[Token]:
        """`found` entries whose drawn tokens made `text` (a streamed chunk, or a whole response)."""
        choices = [e.choices() for e in found]
        data = text.encode("utf-8")
        picks = align(choices, data) if data else None
        if picks is None:  # trust each entry's own token; the text goes with the last one
            picked = [e.own for e in found]
            texts = [self.decoder.decode(c.data) for c in picked]
            if "".join(texts) != text and found:
                self.decoder.reset()
                texts = [""] * (len(found) - 1) + [text]
        else:
            picked = [c[j] for c, (j, _) in zip(choices, picks, strict=False)]
            picked += [e.own for e in found[len(picks):]]  # hidden: as the server named them
            ends = [end for _, end in picks] + [len(data)] * (len(found) - len(picks))
            texts = [self.decoder.decode(data[a:b]) for a, b in zip([0, *ends], ends, strict=False)]
        return [self._token(e, c, t) for e, c, t in zip(found, picked, texts, strict=True)]

    def _token(self, entry: _Entry, drawn: _Cand, text: str) -> Token:
        top = tuple(Candidate(self.vocab.id_of(c.data, c.server_id), c.data.decode("utf-8", errors="replace"),
                              c.logprob) for c in entry.top)
        return Token(self.vocab.id_of(drawn.data, drawn.server_id), text, drawn.logprob, top)
