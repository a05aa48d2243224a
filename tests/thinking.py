"""Tiny thinking models made on the spot: the random Llama of `tiny.py` with a tokenizer that has reasoning markers and
a chat template like a real one's: Qwen3's (<think>…</think> added tokens, enable_thinking) or gpt-oss's (channels)."""

from __future__ import annotations

from pathlib import Path

from tests.tiny import make_model, make_tokenizer

QWEN3_TEMPLATE = (
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' and m.reasoning_content is defined %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + m.reasoning_content + '\\n</think>\\n\\n' + m.content"
    " + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
GPT_OSS_TEMPLATE = (
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}"
    "{%- if m.thinking is defined %}{{- '<|start|>assistant<|channel|>analysis<|message|>' + m.thinking + '<|end|>' }}"
    "{%- endif %}{{- '<|start|>assistant<|channel|>final<|message|>' + m.content + '<|return|>' }}"
    "{%- else %}{{- '<|start|>' + m.role + '<|message|>' + m.content + '<|end|>' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}"
)
FAMILIES = {
    "qwen3": (QWEN3_TEMPLATE, ["<|im_start|>", "<|im_end|>"], ["<think>", "</think>", "<tool_call>", "</tool_call>"]),
    "gpt-oss": (GPT_OSS_TEMPLATE, ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>"], []),
}


def thinking_tokenizer(family: str):
    """The tiny byte-level tokenizer with `family`'s markers: special tokens, and added ones that stay in the text
    (Qwen3's <think> and </think> are not special)."""
    from tokenizers import AddedToken

    template, special, plain = FAMILIES[family]
    tok = make_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": special})
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in plain])
    tok.chat_template = template
    return tok


def make_thinking_model(path: Path, family: str = "qwen3", seed: int = 0) -> Path:
    """A random tiny Llama with `family`'s tokenizer, saved to `path`."""
    return make_model(path, seed=seed, tok=thinking_tokenizer(family))
