"""An edited output, continued: the text a person edited becomes the prompt of a new run, a child of the run it
was edited from (`RunTrace.branch == "edit"`, its parent step the number of tokens kept).

The new prompt is the run's prompt, then the run's tokens before the first one the edit changed (their ids as
drawn, so the model thread's cached prefix holds them and only the rest is prefilled), then the changed text
tokenized. Pure functions of the record and a tokenizer; no Qt, no model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.core.events import Request
from app.core.models.sources import ModelSpec
from app.core.settings import SamplerSettings

if TYPE_CHECKING:
    from app.core.record.trace import RunTrace
    from backends.base import Tokenizer

EDIT = "edit"  # RunTrace.branch of a run continued from an edited output


@dataclass(frozen=True)
class EditedPrompt:
    """The prompt of an edit's continuation: `ids` (the run's prompt, its first `kept` tokens, the changed text's
    ids), and the characters of the output those kept tokens show (`kept_chars`)."""

    ids: tuple[int, ...]
    kept: int
    kept_chars: int


def common_chars(a: str, b: str) -> int:
    """How many characters `a` and `b` share from their start."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def cut_points(texts: Sequence[str], edited: str, *, trimmed_end: bool = False) -> list[tuple[int, int]]:
    """The places the run's tokens (their shown `texts`) may be cut before an edit to `edited`, last first:
    (tokens kept, characters they show), for every token that ends before the first changed character and shows
    text of its own (one showing none holds part of a character, or end-of-text). `trimmed_end`: the run ended
    on a stop string, whose token's text was trimmed: what ends at the output's end is never kept."""
    old = "".join(texts)
    same = common_chars(old, edited)
    out, end = [(0, 0)], 0
    for i, t in enumerate(texts):
        end += len(t)
        if end > same:
            break
        if t and not (trimmed_end and end == len(old)):
            out.append((i + 1, end))
    return out[::-1]


def edited_prompt(prompt_ids: Sequence[int], token_ids: Sequence[int], texts: Sequence[str], edited: str,
                  tok: Tokenizer, *, trimmed_end: bool = False) -> EditedPrompt:
    """The prompt that continues `edited`, an edit of the output made of `token_ids` (shown as `texts`) after
    `prompt_ids`. Tokens are kept up to the first changed one, and only where the tokenizer decodes them to the
    text shown (a token that ends inside a character is given back to the changed text)."""
    prompt = list(prompt_ids)
    base = tok.decode(prompt)
    old = "".join(texts)
    for kept, chars in cut_points(texts, edited, trimmed_end=trimmed_end):
        ids = prompt + list(token_ids[:kept])
        if kept == 0 or tok.decode(ids) == base + old[:chars]:
            rest = tok.encode(edited[chars:], add_special_tokens=False) if edited[chars:] else []
            return EditedPrompt(tuple(ids + rest), kept, chars)
    raise AssertionError("unreachable: cut_points always ends with (0, 0)")


def edit_request(trace: RunTrace, edited: str, tok: Tokenizer, settings: SamplerSettings, *,
                 spec: ModelSpec | None = None, top_n: int = 20) -> Request:
    """The request that continues `edited`, an edit of `trace`'s output, under `settings` (the caller picks the
    seed): a child of the run at the number of tokens it keeps, `branch="edit"`."""
    p = edited_prompt(trace.prompt_ids, trace.token_ids, [s.text for s in trace.steps], edited, tok,
                      trimmed_end=trace.finish_reason == "stop")
    return Request(model=spec or ModelSpec(), prompt_ids=p.ids, settings=settings, top_n=top_n,
                   parent=(trace.run_id, p.kept), branch=EDIT)


def edited_text(prompt_text: str, parent_prompt_text: str, decode_tail: Callable[[], str] | None = None) -> str:
    """The edited text an edit run continues: its prompt after its parent's (as the model thread decoded them);
    where the decoded prompt does not begin with the parent's (a chat template's special tokens are not decoded),
    `decode_tail()` (the ids after the parent's prompt, decoded), or "" without a tokenizer."""
    if prompt_text.startswith(parent_prompt_text):
        return prompt_text[len(parent_prompt_text):]
    return decode_tail() if decode_tail is not None else ""
