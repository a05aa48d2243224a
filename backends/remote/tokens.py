"""What an OpenAI-compatible server says about its tokens, made uniform: `Token`s with ids, text and sorted top
log-probabilities.

Servers differ: a token is named by its text (OpenAI, vLLM, llama.cpp; `bytes` when they send them) or by the
tokenizer's own string (mlx_lm.server: `Ġimport`, with ids); the chat format nests `logprobs.content`, the legacy
completions format lists `tokens` / `token_logprobs` / `top_logprobs`; and an entry's own token may not be the one
drawn (mlx_lm.server 0.32 names the first of an unsorted top-N). So the drawn token is the candidate whose bytes
make the text the server streamed (`align`), and every top list is sorted here. Every value is type-checked where
it is read (a `MalformedError` naming its field); a token id is from 0 to MAX_ID (int32: what a record holds).
Pure Python, no HTTP.
"""

from __future__ import annotations

import codecs
import math
import re
import reprlib
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
    logprob: float | None  # of the drawn token (None: the server did not report it)
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
    """Token ids for one server: its own ids where it sends them, else the model's own where its tokenizer is known
    here (`use`), else a negative id per distinct token (by bytes): a name for it in this session, not an id of
    the model's (`known` tells them apart). Thread-safe (concurrent samples share it)."""

    def __init__(self) -> None:
        self._ids: dict[bytes, int] = {}
        self._texts: dict[int, str] = {}
        self._model_ids: dict[bytes, int] = {}  # the model's vocabulary, by bytes (empty: not known here)
        self._bytes_of: dict[int, bytes] = {}
        self._encode: Any = None
        self._named = 0  # negative ids given so far (the next is -1 - this)
        self._lock = threading.Lock()

    def use(self, vocabulary: dict[str, int], encode: Any = None) -> None:
        """The model's own vocabulary (token string -> id, as a tokenizer.json holds it) and its `encode` (text ->
        ids), whose split of a text breaks a tie between alignments."""
        by_bytes: dict[bytes, int] = {}
        for name, i in sorted(vocabulary.items(), key=lambda kv: kv[1]):
            by_bytes.setdefault(token_bytes(name), i)
        with self._lock:
            self._model_ids, self._encode = by_bytes, encode
            self._bytes_of = {i: b for b, i in by_bytes.items()}

    def boundaries(self, text: bytes) -> set[int]:
        """Where the model's tokenizer splits `text` (byte offsets; empty when it is not known here)."""
        if self._encode is None:
            return set()
        try:
            ids = self._encode(text.decode("utf-8"))
        except Exception:  # noqa: BLE001 - a text it cannot take: no tie-break
            return set()
        ends, off = set(), 0
        for i in ids:
            off += len(self._bytes_of.get(i, b""))
            ends.add(off)
        return ends

    def bytes_of(self, token_id: int) -> bytes | None:
        """The bytes of the model's token `token_id` (None: not in the vocabulary, or it is not known here)."""
        return self._bytes_of.get(token_id)

    def model_id(self, data: bytes) -> int | None:
        """The model's id of the token whose bytes are `data` (None: not a token, or the vocabulary is unknown)."""
        return self._model_ids.get(data)

    @property
    def knows_vocabulary(self) -> bool:
        return bool(self._model_ids)

    def id_of(self, data: bytes, server_id: int | None = None) -> int:
        with self._lock:
            if server_id is None:
                server_id = self._model_ids.get(data, self._ids.get(data))
                if server_id is None:  # (counted, not searched for: a step may name 60,000 new tokens)
                    self._named += 1
                    server_id = -self._named
            self._ids.setdefault(data, server_id)
            self._texts.setdefault(server_id, data.decode("utf-8", errors="replace"))
            return server_id

    def text(self, token_id: int) -> str:
        return self._texts.get(token_id, f"<{token_id}>")


def known(token_id: int) -> bool:
    """Whether an id is the model's (a negative one names a token the server sent only as text)."""
    return token_id >= 0


# GPT-2's byte-level alphabet: each byte shown as one printable character (Ġ is the space).
_PRINTABLE = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
_BYTE_OF = {chr(b): b for b in _PRINTABLE}
_BYTE_OF.update({chr(256 + i): b for i, b in enumerate(b for b in range(256) if b not in _PRINTABLE)})
_HEX_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def token_bytes(token: str, raw: Any = None) -> bytes:
    """A token's bytes: the server's `bytes` list when it sent one, else its text read as a byte-level BPE
    string (`Ġimport`) when it is one, a SentencePiece piece (`▁import`, `<0x0A>`), or plain text."""
    if isinstance(raw, list) and all(type(b) is int and 0 <= b < 256 for b in raw):  # (else: read from the text)
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


MAX_ID = 2**31 - 1  # the largest token id a record holds (int32); a server's ids are from 0 to this


class _Brief(reprlib.Repr):
    """reprlib's bounded repr, cutting a string's end only (what `redact` finds of a secret is its start)."""

    maxstring = maxother = 40

    def repr_str(self, x: str, level: int) -> str:
        return repr(x[: self.maxstring]) + ("…" if len(x) > self.maxstring else "")


_brief = _Brief().repr  # a server's value as a message quotes it, however big or deep


def _token_id(value: Any, field: str) -> int | None:
    """A token id as sent (`field` names it): None where there is none; else a whole number from 0 to MAX_ID, or a
    `MalformedError` (a float, a negative id or one past int32 names no token of any vocabulary)."""
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= MAX_ID:
        raise MalformedError(f"{field} is not a token id (a whole number from 0 to {MAX_ID}): {_brief(value)}")
    return value


def _logprob(value: Any, field: str) -> float:
    """A log-probability as sent (`field` names it): a number <= 0; -inf is a probability of 0 (recorded as it is:
    a trace writes it as "-Infinity"); rounding above 0 by up to 1e-3 is 0. NaN, +inf, anything above and
    anything not a number are a `MalformedError`."""
    if type(value) not in (int, float):  # (not a bool, a string, null)
        raise MalformedError(f"{field} is not a number: {_brief(value)}")
    try:
        v = float(value)
    except OverflowError:  # an integer past a float's range
        v = -math.inf if value < 0 else math.inf
    if math.isnan(v) or v > 1e-3:
        raise MalformedError(f"{field} is {v:g}, which no log-probability is")
    return min(v, 0.0)


def _cand(obj: Any, field: str) -> _Cand:
    """One candidate of the chat format ({"token", "logprob"}, and "bytes", "id" where sent)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("token"), str):
        raise MalformedError(f"{field} is not a log-probability entry (an object with a token): {_brief(obj)}")
    return _Cand(_token_id(obj.get("id"), f"{field}.id"), token_bytes(obj["token"], obj.get("bytes")),
                 _logprob(obj.get("logprob"), f"{field}.logprob"))


def _sorted(cands: Sequence[_Cand]) -> tuple[_Cand, ...]:
    return tuple(sorted(cands, key=lambda c: -c.logprob))


def entries(choice: dict) -> list[_Entry] | None:
    """The log-probability entries of one streamed or whole choice (chat or legacy format); None when it has none.
    Every value is checked: one of the wrong type is a `MalformedError` naming its field."""
    lp = choice.get("logprobs")
    if not lp:
        return None
    if not isinstance(lp, dict):
        raise MalformedError(f"logprobs is not an object: {_brief(lp)}")
    if isinstance(lp.get("content"), list):
        return [_chat_entry(e, f"logprobs.content[{i}]") for i, e in enumerate(lp["content"]) if e]
    if isinstance(lp.get("tokens"), list):
        return _legacy_entries(lp)
    raise MalformedError(f"logprobs in an unknown format (no content or tokens list): {_brief(lp)}")


def _chat_entry(e: Any, field: str) -> _Entry:
    top = e.get("top_logprobs") if isinstance(e, dict) else None
    if top and not isinstance(top, list):
        raise MalformedError(f"{field}.top_logprobs is not a list: {_brief(top)}")
    return _Entry(_cand(e, field), _sorted([_cand(t, f"{field}.top_logprobs[{j}]") for j, t in enumerate(top or [])]))


def _legacy_entries(lp: dict) -> list[_Entry]:
    """The legacy completions format: `tokens` (text), `token_logprobs` and `top_logprobs` (token -> log-probability,
    or null), one of each per token."""
    tokens, logprobs = lp["tokens"], lp.get("token_logprobs")
    tops = lp.get("top_logprobs") or [None] * len(tokens)
    for name, values in (("token_logprobs", logprobs), ("top_logprobs", tops)):
        if not isinstance(values, list) or len(values) != len(tokens):
            raise MalformedError(f"logprobs.{name} is not a list of one per token ({len(tokens)}): {_brief(values)}")
    out = []
    for i, (t, g, top) in enumerate(zip(tokens, logprobs, tops, strict=True)):
        if not isinstance(t, str):
            raise MalformedError(f"logprobs.tokens[{i}] is not text: {_brief(t)}")
        if top is not None and not isinstance(top, dict):
            raise MalformedError(f"logprobs.top_logprobs[{i}] is not an object (token -> log-probability): "
                                 f"{_brief(top)}")
        cands = [_Cand(None, token_bytes(k), _logprob(v, f"logprobs.top_logprobs[{i}][{_brief(k)}]"))
                 for k, v in (top or {}).items()]
        out.append(_Entry(_Cand(None, token_bytes(t), _logprob(g, f"logprobs.token_logprobs[{i}]")), _sorted(cands)))
    return out


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
        end = _spells(choices[j].data, text, off)
        if end is not None:
            return j, end
    return None


def _spells(data: bytes, text: bytes, off: int) -> int | None:
    """Where a token of bytes `data` drawn at `off` ends the visible `text` (None: it does not continue it)."""
    if data and text.startswith(data, off):
        return off + len(data)
    if data and data.startswith(text[off:]):
        return len(text)  # the text ends inside it (a stop string the server trimmed)
    if off == 0 and data[:1].isspace():  # a server may strip the output's leading whitespace
        rest = data.lstrip()
        cut = next((m for m in range(len(data) - len(rest) + 1) if text.startswith(data[m:])), None)
        if cut is not None:
            return len(data) - cut
    return None


def drawn_tokens(choice: dict) -> list[tuple[int, float]] | None:
    """The drawn tokens of a choice whose entries name them by id alone (mlx_lm.server asked for no top-N):
    [(id, log-probability)], or None when its entries are not of that form."""
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(content, list) or not content:
        return None
    if not all(isinstance(e, dict) and type(e.get("id")) is int for e in content):
        return None
    field = "logprobs.content[{}].{}".format
    return [(_token_id(e["id"], field(i, "id")), _logprob(e.get("logprob"), field(i, "logprob")))
            for i, e in enumerate(content)]


def _spelt(picked: Sequence[_Cand], text: bytes) -> list[tuple[int, int]]:
    """Where each of the tokens `picked` ends `text` (those after it is spelt were hidden); UnalignedError when
    they do not spell it."""
    ends, off = [], 0
    for c in picked:
        if off >= len(text):
            break
        end = _spells(c.data, text, off)
        if end is None:
            raise UnalignedError("the tokens the server drew do not spell the text it returned")
        ends.append((0, end))
        off = end
    if off < len(text):
        raise UnalignedError("the tokens the server drew do not spell the text it returned")
    return ends


UNLISTED = -1  # a pick of `align_unlisted`: the entry drew a token that is not in its reported list
MAX_SPAN = 16  # bytes an unlisted token may span when the model's vocabulary is not known here
MAX_STATES = 64  # alignments kept per entry (the likeliest: most listed picks)


class UnalignedError(MalformedError):
    """A reply whose tokens cannot be told apart from its text (said on the run instead of recording wrong steps)."""


def align_unlisted(choices: Sequence[Sequence[_Cand]], text: bytes, vocab: Vocab) -> list[tuple[int, int]]:
    """As `align`, where an entry may have drawn a token outside its reported list (`UNLISTED`: mlx_lm.server
    reports the top-N but not the token it drew). The alignment with the most listed picks wins, then the one
    that splits the text most as the model's tokenizer does; an unlisted token is one of the model's vocabulary
    when it is known here (else up to MAX_SPAN bytes). `UnalignedError` when no
    alignment spells the text, or when two differ in where the tokens split it."""
    end_of_text, canonical = len(text), vocab.boundaries(text)
    layers: list[dict[int, tuple[int, int, tuple[int, int] | None]]] = [{0: (0, 1, None)}]  # off: score, paths, back
    for cands in choices:
        layer: dict[int, tuple[int, int, tuple[int, int] | None]] = {}
        for off, (score, paths, _) in layers[-1].items():
            if off >= end_of_text:
                continue
            for end, (gain, j) in _moves(cands, text, off, vocab).items():
                gain = gain * (end_of_text + 1) + (end in canonical)  # listed picks first; then the tokenizer's split
                best = layer.get(end)
                if best is None or score + gain > best[0]:
                    layer[end] = (score + gain, paths, (off, j))
                elif score + gain == best[0]:
                    layer[end] = (best[0], min(2, best[1] + paths), best[2])
        if len(layer) > MAX_STATES:
            layer = dict(sorted(layer.items(), key=lambda kv: -kv[1][0])[:MAX_STATES])
        layers.append(layer)
    done = [(layer[end_of_text], k) for k, layer in enumerate(layers) if end_of_text in layer]
    if not done:
        raise UnalignedError("the server's reply cannot be aligned token by token: no tokens spell its text")
    top = max(score for (score, _, _), _ in done)
    best = [(state, k) for state, k in done if state[0] == top]
    if len(best) > 1 or best[0][0][1] > 1:
        raise UnalignedError("the server's reply cannot be aligned token by token: its text splits into its tokens in "
                        "more than one way (a token it drew is not among the log-probabilities it reported)")
    (_, _, back), k = best[0]
    picks, end = [], end_of_text
    while back is not None:
        off, j = back
        picks.append((j, end))
        k -= 1
        end, back = off, layers[k][off][2]
    return picks[::-1]


def _moves(cands: Sequence[_Cand], text: bytes, off: int, vocab: Vocab) -> dict[int, tuple[int, int]]:
    """Where an entry's token may end the text from `off`: end -> (1, j) for a listed candidate (the likeliest
    first), (0, UNLISTED) for a token outside the list."""
    moves: dict[int, tuple[int, int]] = {}
    for j, c in enumerate(cands):
        end = _spells(c.data, text, off)
        if end is not None:
            moves.setdefault(end, (1, j))
    limit = len(text) if vocab.knows_vocabulary else min(len(text), off + MAX_SPAN)
    for end in range(off + 1, limit + 1):
        if end not in moves and (not vocab.knows_vocabulary or vocab.model_id(text[off:end]) is not None):
            moves[end] = (0, UNLISTED)
    return moves


class TokenMaker:
    """Turns one request's entries into `Token`s: picks the drawn candidate, gives ids, and decodes the text
    as a stream (a character split across tokens shows with the token that completes it)."""

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def tokens(self, found: list[_Entry], text: str, drawn: list[tuple[int, float]] | None = None) -> list[Token]:
        """`found` entries whose drawn tokens made `text` (a streamed chunk, or a whole response); `drawn`: the
        tokens drawn (id, log-probability) where the server named them apart from the entries."""
        choices = [e.choices() for e in found]
        data, pending = text.encode("utf-8"), self.decoder.getstate()[0]
        if pending and data.startswith(pending):  # the text shows a character begun by an earlier token
            data = data[len(pending):]
        if not data:  # nothing visible yet (half a character, a hidden token): as the server named them
            return [self._token(e, e.own, self.decoder.decode(e.own.data)) for e in found]
        if drawn is not None:
            picked = self._named(found, drawn)
            picks = _spelt(picked, data)
        else:
            picks = align(choices, data) or align_unlisted(choices, data, self.vocab)
            starts = [0, *(end for _, end in picks)]
            picked = [c[j] if j != UNLISTED else _Cand(None, data[a:end], math.nan)
                      for c, (j, end), a in zip(choices, picks, starts, strict=False)]
        picked += [e.own for e in found[len(picked):]]  # hidden: as the server named them
        ends = [end for _, end in picks] + [len(data)] * (len(found) - len(picks))
        texts = [self.decoder.decode(data[a:b]) for a, b in zip([0, *ends], ends, strict=False)]
        return [self._token(e, c, t) for e, c, t in zip(found, picked, texts, strict=True)]

    def _named(self, found: list[_Entry], drawn: list[tuple[int, float]]) -> list[_Cand]:
        """The drawn tokens by the model's ids (their bytes from its vocabulary)."""
        if len(drawn) != len(found):
            raise UnalignedError(f"the server named {len(drawn)} drawn tokens for {len(found)} steps")
        picked = []
        for i, lp in drawn:
            data = self.vocab.bytes_of(i)
            if data is None:
                raise UnalignedError(f"the server drew token {i}, which the model's vocabulary does not have")
            picked.append(_Cand(i, data, lp))
        return picked

    def _token(self, entry: _Entry, drawn: _Cand, text: str) -> Token:
        top = tuple(Candidate(self.vocab.id_of(c.data, c.server_id), c.data.decode("utf-8", errors="replace"),
                              c.logprob) for c in entry.top)
        logprob = None if math.isnan(drawn.logprob) else drawn.logprob  # an unlisted token's is not reported
        return Token(self.vocab.id_of(drawn.data, drawn.server_id), text, logprob, top)
