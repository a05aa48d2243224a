"""A server's token ids and bytes: `Vocab` gives each token an id (the server's own, else the model's where its
tokenizer is known here, else a negative name for this session) and keeps its text; `token_bytes` reads a token's
text as the bytes it stands for (a byte-level BPE string, a SentencePiece piece, vLLM's `bytes:`). Thread-safe,
pure Python: no parsing of a server's messages (`logprobs`), no alignment (`tokens`).
"""

from __future__ import annotations

import codecs
import re
import threading
from typing import Any


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
