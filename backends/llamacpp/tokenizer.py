"""llama.cpp's own tokenizer (the GGUF file's vocabulary) behind the `Tokenizer` interface: it encodes as llama.cpp
does (special tokens parsed, BOS where the file says so), decodes without special tokens, streams whole UTF-8
characters (`flush` keeps every byte), shows a piece of a character as its bytes (‹e3 81›), and renders the chat
template in the HF tokenizer's Jinja sandbox and time limit. It loads the vocabulary on its own (no weights), so it
outlives the model (the window keeps its tokenizer after the model is closed); any thread may use it.
"""

from __future__ import annotations

import codecs
import ctypes
import json
import weakref
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import llama_cpp

from backends.base import ModelLoadError
from backends.hf.tokenizer import guarded_template


class StreamDecoder:
    """Token pieces as bytes, emitted as text once they complete a character."""

    def __init__(self, tok: LlamaTokenizer) -> None:
        self._tok = tok
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token_id: int) -> str:
        return self._utf8.decode(self._tok.piece(token_id, special=False))

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)


class LlamaTokenizer:
    def __init__(self, path: Path) -> None:
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        model = llama_cpp.llama_model_load_from_file(str(path).encode("utf-8"), params)
        if not model:
            raise ModelLoadError(f"llama.cpp cannot read the vocabulary of {path.name}")
        weakref.finalize(self, llama_cpp.llama_model_free, model)  # (freed with this tokenizer, on any thread)
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        bos = llama_cpp.llama_vocab_bos(self._vocab)
        self.bos_id: int | None = bos if bos >= 0 else None
        self.eos_ids = frozenset(i for i in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self._vocab, i))
        template = llama_cpp.llama_model_chat_template(model, None)
        self._template = template.decode("utf-8", errors="replace") if template else None
        self._texts: dict[int, str] = {}

    @property
    def has_chat_template(self) -> bool:
        return bool(self._template)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 8
        out = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), out, n_max, add_special_tokens, True)
        if n < 0:  # (more tokens than bytes: a vocabulary of special tokens only)
            n_max = -n
            out = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), out, n_max, add_special_tokens, True)
        return list(out[:n])

    def piece(self, token_id: int, special: bool) -> bytes:
        """The bytes of one token (a control token's are empty unless `special`)."""
        buf = ctypes.create_string_buffer(64)  # (one per call: threads share the tokenizer)
        n = llama_cpp.llama_token_to_piece(self._vocab, token_id, buf, len(buf), 0, special)
        if n < 0:  # longer than the buffer
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token_id, buf, len(buf), 0, special)
        return buf.raw[:n]

    def decode(self, ids: Sequence[int]) -> str:
        if not ids:
            return ""
        tokens = (llama_cpp.llama_token * len(ids))(*ids)
        size = 8 * len(ids) + 16
        text = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_detokenize(self._vocab, tokens, len(ids), text, size, True, False)
        if n < 0:
            size = -n
            text = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_detokenize(self._vocab, tokens, len(ids), text, size, True, False)
        return text.raw[:n].decode("utf-8", errors="replace")

    def token_text(self, token_id: int) -> str:
        """One token for display; a byte-level piece of a character shows its bytes, e.g. ‹e3 81›."""
        text = self._texts.get(token_id)
        if text is None:
            raw = self.piece(token_id, special=True)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = "‹" + raw.hex(" ") + "›"
            self._texts[token_id] = text
        return text

    def apply_chat_template(self, messages: Sequence[dict[str, str]], options: Mapping[str, Any] | None = None) -> str:
        """The messages through the GGUF file's template (`options`: variables it reads, e.g. enable_thinking)."""
        if not self._template:
            raise ValueError("this model has no chat template: use completion mode")
        template = self._template
        bos = self.token_text(self.bos_id) if self.bos_id is not None else ""
        eos = self.token_text(min(self.eos_ids)) if self.eos_ids else ""
        return guarded_template(lambda: _compile(template).render(
            messages=list(messages), add_generation_prompt=True, bos_token=bos, eos_token=eos, **(options or {})))

    def stream(self) -> StreamDecoder:
        return StreamDecoder(self)

    def vocabulary_json(self) -> str | None:
        return None  # llama.cpp's vocabulary is no `tokenizers` JSON: a grammar engine has none to read here


def _compile(template: str) -> Any:
    """The template in an immutable Jinja sandbox with the helpers chat templates use (as transformers gives them)."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        from jinja2.exceptions import TemplateError

        raise TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)
