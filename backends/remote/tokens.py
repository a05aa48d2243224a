"""What an OpenAI-compatible server says about its tokens, made uniform: `Token`s with ids, text and sorted top
log-probabilities. Servers differ: a token is named by its text (OpenAI, vLLM, llama.cpp) or by the tokenizer's own
string (mlx_lm.server: `Ġimport`, with ids), and an entry's own token may not be the one drawn (mlx_lm.server 0.32
names the first of an unsorted top-N). So the drawn token is the candidate whose bytes make the text the server
streamed (`align`, `align_unlisted`); `TokenMaker` turns a request's entries (`logprobs`) into `Token`s. No HTTP.
"""

from __future__ import annotations

import codecs
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from backends.remote.logprobs import MalformedError, _Cand, _Entry
from backends.remote.vocab import Vocab


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
    think: bool = False  # reported as the model's reasoning (`reasoning_content`), apart from its answer


def thinking(tokens: list[Token], chars: int) -> list[Token]:
    """`tokens` of a text whose first `chars` characters were the model's reasoning: those that begin there marked."""
    out, at = [], 0
    for t in tokens:
        out.append(replace(t, think=True) if at < chars else t)
        at += len(t.text)
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
