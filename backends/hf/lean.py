"""The tokenizer without transformers: a folder's tokenizer.json through the `tokenizers` library directly, its
special tokens and chat template from tokenizer_config.json, rendered in the same Jinja sandbox as transformers'.

`lean_tokenizer` returns None for what it cannot reproduce exactly (another tokenizer class, a template set, a
cleanup or a Mistral regex fix transformers would apply): the caller then loads transformers' (`tokenizer.py`).
Tests hold the two equal (ids, texts, templates). `LeanTokenizer.hf` still gives transformers' tokenizer, loaded
on first use, for the few callers that hand it to another library.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from copy import copy
from datetime import datetime
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, ClassVar

from backends.base import LoadOptions
from backends.hf.tokenizer import (
    HFTokenizer,
    StreamDecoder,
    generation_eos_ids,
    guarded_template,
    load_tokenizer,
    token_bytes,
)

# tokenizer classes whose transformers tokenizer is tokenizer.json as saved (Qwen2's rebuilds the same pipeline)
PLAIN_CLASSES = {"TokenizersBackend", "PreTrainedTokenizerFast", "Qwen2Tokenizer", "Qwen2TokenizerFast"}
CLASS_DEFAULTS = {"Qwen2Tokenizer": {"unk_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                                     "pad_token": "<|endoftext|>"}}
CLASS_DEFAULTS["Qwen2TokenizerFast"] = CLASS_DEFAULTS["Qwen2Tokenizer"]
SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
MISTRAL_TYPES = {"mistral", "mixtral", "pixtral", "mistral3", "ministral"}


class LeanTokenizer:
    """The `Tokenizer` interface over a `tokenizers.Tokenizer` and the folder's special tokens and template."""

    def __init__(self, raw: Any, path: Path, specials: dict[str, str], template: str | None,
                 extra_eos: Sequence[int] = ()) -> None:
        self.raw, self.path, self.specials, self.chat_template = raw, path, specials, template
        eos = raw.token_to_id(specials["eos_token"]) if "eos_token" in specials else None
        self.eos_ids = frozenset(({eos} if eos is not None else set()) | set(extra_eos))
        self.bos_id: int | None = raw.token_to_id(specials["bos_token"]) if "bos_token" in specials else None
        self._texts: dict[int, str] = {}

    @property
    def has_chat_template(self) -> bool:
        return bool(self.chat_template)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.raw.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.raw.decode(list(ids), skip_special_tokens=True)

    def token_text(self, token_id: int) -> str:
        """One token for display; a byte-level piece of a character shows its bytes, e.g. ‹e3 81›."""
        text = self._texts.get(token_id)
        if text is None:
            text = self.raw.decode([token_id], skip_special_tokens=False)
            if "\ufffd" in text:
                raw = token_bytes(self.raw.id_to_token(token_id))
                text = text if raw is None else "‹" + raw.hex(" ") + "›"
            self._texts[token_id] = text
        return text

    def apply_chat_template(self, messages: Sequence[dict[str, str]], options: Mapping[str, Any] | None = None) -> str:
        """The messages through the model's template, in transformers' sandbox (`render`) and within the time limit
        of `guarded_template` (`options`: variables the template reads, over the special tokens as transformers
        passes them); a template that breaks out, errs or loops is a ValueError of one line."""
        if not self.has_chat_template:
            raise ValueError("this model has no chat template: use completion mode")
        template = self.chat_template
        assert template is not None
        return guarded_template(lambda: compiled(template).render(
            messages=[dict(m) for m in messages], tools=None, documents=None, add_generation_prompt=True,
            **{**self.specials, **(options or {})}))

    def stream(self) -> StreamDecoder:
        return StreamDecoder(self)

    def vocabulary_json(self) -> str | None:
        """The tokenizers JSON without padding or truncation (what a grammar engine builds its token table from)."""
        backend = copy(self.raw)
        backend.no_padding()
        backend.no_truncation()
        return backend.to_str()

    @cached_property
    def hf(self) -> Any:
        """transformers' tokenizer of the same folder, loaded now (for a library that takes one: mlx-lm's wrapper,
        transformers' generate)."""
        return load_tokenizer(self.path, LoadOptions()).hf


def open_tokenizer(path: Path, options: LoadOptions) -> LeanTokenizer | HFTokenizer:
    """The folder's tokenizer: the lean one where it reproduces transformers' exactly, else transformers'."""
    return lean_tokenizer(path, options) or load_tokenizer(path, options)


def lean_tokenizer(path: Path, options: LoadOptions) -> LeanTokenizer | None:
    """The folder's tokenizer without transformers, or None where only transformers reproduces it exactly."""
    if options.trust_remote_code or not (path / "tokenizer.json").is_file():
        return None
    config = _json(path / "tokenizer_config.json")
    if config is None or config.get("tokenizer_class", "PreTrainedTokenizerFast") not in PLAIN_CLASSES:
        return None
    if config.get("add_prefix_space") is not None or config.get("split_special_tokens") or (
            path / "additional_chat_templates").exists():
        return None
    template = _template(path, config)
    if template is False:
        return None
    from tokenizers import AddedToken, Tokenizer

    try:
        raw = Tokenizer.from_file(str(path / "tokenizer.json"))
    except Exception:  # noqa: BLE001 - whatever the library refuses, transformers says it in its words
        return None
    if _needs_transformers(path, raw, config):
        return None
    specials = {**CLASS_DEFAULTS.get(config.get("tokenizer_class", ""), {}),
                **{k: v for k in SPECIAL_NAMES if (v := _content(config.get(k))) is not None},
                **{k: None for k in SPECIAL_NAMES if k in config and config[k] is None}}
    specials = {k: v for k, v in specials.items() if v is not None}
    known = set(raw.get_vocab(with_added_tokens=True))
    declared = [_content(t) for t in (config.get("added_tokens_decoder") or {}).values()]
    if any(t is None or t not in known for t in declared):  # (transformers would add them, each in its own way)
        return None
    extra = [_content(t) for t in config.get("extra_special_tokens") or config.get("additional_special_tokens") or []]
    if any(t is None for t in extra):
        return None
    missing = [t for t in dict.fromkeys([*specials.values(), *extra]) if t not in known]
    if missing:  # (transformers adds a named special token the file lacks, as a special added token)
        raw.add_special_tokens([AddedToken(t, special=True) for t in missing])
    _post_processor(raw, config, specials)
    raw.no_truncation()
    return LeanTokenizer(raw, path, specials, template, generation_eos_ids(path))


def _needs_transformers(path: Path, raw: Any, config: dict) -> bool:
    """What transformers changes in a tokenizer.json on loading, which this path does not: padding or truncation it
    re-applies, the cleanup of decoded text outside BPE, the Mistral regex fix of a large vocabulary."""
    if raw.padding is not None or raw.truncation is not None:
        return True
    if config.get("clean_up_tokenization_spaces") and type(raw.model).__name__ != "BPE":
        return True
    if raw.get_vocab_size() > 100_000:
        model_config = _json(path / "config.json") or {}
        return str(model_config.get("model_type", "")) in MISTRAL_TYPES
    return False


def _post_processor(raw: Any, config: dict, specials: dict[str, str]) -> None:
    """transformers' post-processor where the config asks for BOS/EOS explicitly or the file has none."""
    if "add_bos_token" not in config and "add_eos_token" not in config and raw.post_processor is not None:
        return
    from tokenizers import processors

    bos = specials.get("bos_token") if config.get("add_bos_token") else None
    eos = specials.get("eos_token") if config.get("add_eos_token") else None
    single = f"{bos + ':0 ' if bos else ''}$A:0{' ' + eos + ':0' if eos else ''}"
    pair = f"{single}{' ' + bos + ':1' if bos else ''} $B:1{' ' + eos + ':1' if eos else ''}"
    tokens = [(t, raw.token_to_id(t)) for t in (bos, eos) if t]
    raw.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=tokens)


def _template(path: Path, config: dict) -> str | bool | None:
    """The chat template transformers would use (chat_template.jinja over the config's); False: a set of templates
    without a default, left to transformers."""
    file = path / "chat_template.jinja"
    if file.is_file():
        return file.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default", False)
    return template if isinstance(template, str) or template in (None, False) else False


def _content(token: Any) -> str | None:
    """A special token's text: a string, or an AddedToken's saved dict."""
    if isinstance(token, dict):
        token = token.get("content")
    return token if isinstance(token, str) else None


def _json(path: Path) -> dict | None:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError, RecursionError):
        return None  # (transformers reads it and says what is wrong)
    return data if isinstance(data, dict) else None


@lru_cache(maxsize=16)
def compiled(template: str) -> Any:
    """The template compiled in transformers' sandbox: an immutable sandboxed environment with its filters and
    globals (tojson without HTML escaping, raise_exception, strftime_now, a `dict` and a `namespace` that refuse
    underscore names), its loop controls and its `{% generation %}` tag (rendered as its body)."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        tags: ClassVar[set[str]] = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:  # (Jinja's Namespace's own signature trick)
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                TemplateNamespace.check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace.check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a namespace attribute named {name!r}")

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda f: datetime.now().strftime(f),
                       dict=TemplateDict(), namespace=TemplateNamespace)
    return env.from_string(template)
