"""The tokenizer both backends share: a Hugging Face tokenizer behind the small `Tokenizer` interface.

Streaming detokenization uses `tokenizers.DecodeStream` (constant cost per token, never emits half a UTF-8
character); `flush` returns what is still held so no byte is ever dropped. Chat templates render only through
the tokenizer's own sandboxed `apply_chat_template`.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from copy import copy
from pathlib import Path
from types import FrameType
from typing import Any

from backends.base import LoadOptions, ModelLoadError

TEMPLATE_LIMIT_S = 1.0  # a chat template renders in milliseconds; one still running after this is stopped
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


class StreamDecoder:
    def __init__(self, tok: Any) -> None:  # (HFTokenizer or the lean one: `raw`, the tokenizers object, `decode`)
        from tokenizers.decoders import DecodeStream

        self._tok = tok
        self._fast = tok.raw
        self._stream = DecodeStream(skip_special_tokens=True) if self._fast is not None else None
        self._ids: list[int] = []
        self._emitted = 0  # characters emitted so far

    def add(self, token_id: int) -> str:
        self._ids.append(token_id)
        if self._stream is not None:
            try:
                piece = self._stream.step(self._fast, token_id) or ""
                self._emitted += len(piece)
                return piece
            except Exception:  # noqa: BLE001 - an id the fast tokenizer rejects: fall back to full decode
                self._stream = None
        text = self._tok.decode(self._ids)
        if text.endswith("\ufffd"):
            return ""
        piece, self._emitted = text[self._emitted :], len(text)
        return piece

    def flush(self) -> str:
        text = self._tok.decode(self._ids)
        return text[self._emitted :] if len(text) > self._emitted else ""


class HFTokenizer:
    def __init__(self, hf: Any, extra_eos: Sequence[int] = ()) -> None:
        self.hf = hf
        eos = {hf.eos_token_id} if hf.eos_token_id is not None else set()
        self.eos_ids = frozenset(eos | set(extra_eos))
        self.bos_id: int | None = hf.bos_token_id
        self._texts: dict[int, str] = {}

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.hf, "chat_template", None))

    @property
    def raw(self) -> Any:
        """The `tokenizers` object a fast tokenizer wraps (None for a slow one)."""
        return getattr(self.hf, "_tokenizer", None)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: Sequence[int]) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=True)

    def token_text(self, token_id: int) -> str:
        """One token for display; a byte-level piece of a character shows its bytes, e.g. ‹e3 81›."""
        text = self._texts.get(token_id)
        if text is None:
            text = self.hf.decode([token_id], skip_special_tokens=False)
            if "\ufffd" in text:
                raw = token_bytes(self.hf.convert_ids_to_tokens(token_id))
                text = text if raw is None else "‹" + raw.hex(" ") + "›"
            self._texts[token_id] = text
        return text

    def apply_chat_template(self, messages: Sequence[dict[str, str]], options: Mapping[str, Any] | None = None) -> str:
        """The messages through the model's template, in transformers' Jinja sandbox and within
        `TEMPLATE_LIMIT_S` (`options`: variables the template reads, e.g. enable_thinking); a template that breaks
        out, errs or loops is a ValueError of one line."""
        if not self.has_chat_template:
            raise ValueError("this model has no chat template: use completion mode")
        return guarded_template(lambda: self.hf.apply_chat_template(list(messages), tokenize=False,
                                                                     add_generation_prompt=True, **(options or {})))

    def stream(self) -> StreamDecoder:
        return StreamDecoder(self)

    def vocabulary_json(self) -> str | None:
        """The fast tokenizer's own description (the `tokenizers` JSON, added tokens included, without padding or
        truncation): what a grammar engine builds its token table from (llguidance, as its `hf.from_tokenizer`
        does). None for a slow tokenizer, which has none."""
        backend = getattr(self.hf, "backend_tokenizer", None)
        if backend is None:
            return None
        backend = copy(backend)  # (a copy: the model's own keeps its settings)
        backend.no_padding()
        backend.no_truncation()
        return backend.to_str()


def guarded_template(render: Callable[[], str]) -> str:
    """`render()` (a chat template rendering in a Jinja sandbox) within `TEMPLATE_LIMIT_S`; a template that breaks
    out, errs or loops is a ValueError of one line. Every tokenizer renders its template through this."""
    from jinja2.exceptions import SecurityError, TemplateError

    try:
        with _time_limit(TEMPLATE_LIMIT_S):
            return render()
    except SecurityError as e:
        what = str(e).removeprefix("access to ").removesuffix(" is unsafe.")
        raise ValueError(f"this model's chat template tried to access {what}; it was blocked") from None
    except TemplateTooSlowError:
        raise ValueError(f"this model's chat template ran for over {TEMPLATE_LIMIT_S:g} s; it was stopped") from None
    except RecursionError:
        raise ValueError("this model's chat template recursed too deeply; it was stopped") from None
    except TemplateError as e:
        raise ValueError(f"this model's chat template failed: {_one_line(e)}") from None
    except Exception as e:  # noqa: BLE001 - the template is the model's code: whatever it raises is its fault
        raise ValueError(f"this model's chat template failed: {type(e).__name__}: {_one_line(e)}") from None


class TemplateTooSlowError(Exception):
    """Raised inside template code that runs past its time limit."""


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Stops Jinja template code (compiled to Python, its file named "<template>") that runs past `seconds`: a
    trace function checks the clock on each line of template code; no other code is traced line by line."""
    deadline = time.monotonic() + seconds

    def on_line(frame: FrameType, event: str, arg: Any) -> Any:
        if time.monotonic() > deadline:
            raise TemplateTooSlowError
        return on_line

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        return on_line if frame.f_code.co_filename == "<template>" else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        yield
    finally:
        sys.settrace(previous)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def load_tokenizer(path: Path, options: LoadOptions) -> HFTokenizer:
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoTokenizer

    if not any((path / f).exists() for f in _TOKENIZER_FILES):
        raise ModelLoadError(f"{path} has no tokenizer (none of {', '.join(_TOKENIZER_FILES)})")
    try:
        hf = AutoTokenizer.from_pretrained(str(path), trust_remote_code=options.trust_remote_code)
    except StrictDataclassError as e:  # transformers read config.json (for the tokenizer's class) and refused it
        raise ModelLoadError(f"{path / 'config.json'}: {_one_line(e.__cause__ or e)}") from e
    except Exception as e:
        raise ModelLoadError(f"cannot load the tokenizer in {path}: {e}") from e
    return HFTokenizer(hf, generation_eos_ids(path))


def generation_eos_ids(path: Path) -> list[int]:
    """EOS ids named in generation_config.json (chat models often stop on more than one)."""
    f = path / "generation_config.json"
    if not f.exists():
        return []
    try:
        config = json.loads(f.read_text(encoding="utf-8"))
    except (ValueError, RecursionError, OSError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else _one_line(e)
        raise ModelLoadError(f"{f}: not readable JSON ({why})") from None
    eos = config.get("eos_token_id") if isinstance(config, dict) else None
    if isinstance(eos, int) and not isinstance(eos, bool):
        return [eos]
    if isinstance(eos, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in eos):
        return list(eos)
    if eos is not None:
        raise ModelLoadError(f"{f}: eos_token_id must be a token id or a list of them, got {str(eos)[:40]}")
    return []


def _bytes_to_unicode() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the printable character that stands for each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


_BYTE_OF = _bytes_to_unicode()


def token_bytes(token: str | None) -> bytes | None:
    """The raw bytes of a byte-level BPE token, or None for other tokenizers' tokens."""
    if not token:
        return None
    if token.startswith("<0x") and token.endswith(">") and len(token) == 6:  # sentencepiece byte fallback
        return bytes([int(token[3:5], 16)])
    if all(ch in _BYTE_OF for ch in token):
        return bytes(_BYTE_OF[ch] for ch in token)
    return None
