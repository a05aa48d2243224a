"""The think span: which of a run's tokens are the model thinking, which its answer, which a tool call, read from the
reasoning markers of its tokenizer (Qwen3 and DeepSeek-R1's <think>…</think>, gpt-oss's analysis channel) or a pair
of the user's. `find_markers` reads them (token sequences) from a tokenizer; `SpanTracker` labels tokens one at a time
as a run draws them (a marker of several tokens is in its span from the token that completes it; a closing marker is
in the span it closes); `spans` groups a run's labels into ranges. `template_options` is what a chat template is told
for thinking on or off (Qwen3's enable_thinking), `has_think_switch` whether a template reads it. Plain data over token
ids: no model, no Qt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from backends.base import Tokenizer

SpanKind = Literal["think", "answer", "tool"]
THINK, ANSWER, TOOL = "think", "answer", "tool"
KINDS = (THINK, ANSWER, TOOL)
# Each family: its markers' texts, open, close, what its template puts between the close and the answer (when its
# template does not say), and a tool call's pair. A family is a tokenizer's when each of `needs` is one token there.
FAMILIES: dict[str, dict[str, Any]] = {
    "think-tags": {"open": "<think>", "close": "</think>", "answer": "\n\n", "tool": ("<tool_call>", "</tool_call>"),
                   "needs": ("<think>", "</think>")},
    "gpt-oss": {"open": "<|channel|>analysis<|message|>", "close": "<|end|>",
                "answer": "<|start|>assistant<|channel|>final<|message|>",
                "tool": ("<|channel|>commentary", "<|call|>"),
                "needs": ("<|channel|>", "<|message|>", "<|end|>")},
}
_THINK_MARK, _ANSWER_MARK = "LOGITLAB_THINKING", "LOGITLAB_ANSWER"  # rendered through a template to find its gap
NO_THINKING = {"enable_thinking": False}  # Qwen3's switch (SmolLM3, GLM-4.5 and Hunyuan's templates read it too)


@dataclass(frozen=True)
class Markers:
    """A tokenizer's reasoning markers as token ids: the think span's `open` and `close`, the `answer` tokens its
    template puts between the close and the answer, and a tool call's pair (empty where it has none)."""

    family: str
    open: tuple[int, ...]
    close: tuple[int, ...]
    answer: tuple[int, ...] = ()
    tool_open: tuple[int, ...] = ()
    tool_close: tuple[int, ...] = ()

    @property
    def closing(self) -> tuple[int, ...]:
        """What ends thinking and starts the answer: the close marker, then the template's answer tokens."""
        return self.close + self.answer

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "open": list(self.open), "close": list(self.close),
                "answer": list(self.answer), "tool_open": list(self.tool_open), "tool_close": list(self.tool_close)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Markers:
        ids = {k: tuple(int(t) for t in d.get(k, ())) for k in ("open", "close", "answer", "tool_open", "tool_close")}
        return cls(str(d.get("family", "custom")), **ids)


def single(tok: Tokenizer, text: str) -> int | None:
    """The id of `text` where it is one token of `tok` (an added or special token), else None."""
    ids = tok.encode(text, add_special_tokens=False)
    return ids[0] if len(ids) == 1 and tok.token_text(ids[0]) == text else None


def find_markers(tok: Tokenizer, custom: Sequence[str] = ()) -> Markers | None:
    """The reasoning markers of `tok`: the `custom` pair (open, close) where given, else the first family whose
    markers are single tokens there; None for a model that does not think (or a custom pair that encodes to
    nothing). Cached per tokenizer: the window and every run ask again."""
    return _find(tok, tuple(custom))


@lru_cache(maxsize=8)
def _find(tok: Tokenizer, custom: tuple[str, ...]) -> Markers | None:
    enc = lambda text: tuple(tok.encode(text, add_special_tokens=False)) if text else ()
    if custom:
        opened, closed = enc(custom[0]), enc(custom[1])
        if not opened or not closed:
            return None
        return Markers("custom", opened, closed, enc(_template_gap(tok, custom[1]) or ""))
    for family, f in FAMILIES.items():
        if all(single(tok, t) is not None for t in f["needs"]):
            gap = _template_gap(tok, f["close"])
            tool = f["tool"] if single(tok, f["tool"][1]) is not None else ("", "")  # (its closing token: the model's)
            return Markers(family, enc(f["open"]), enc(f["close"]), enc(f["answer"] if gap is None else gap),
                           enc(tool[0]), enc(tool[1]))
    return None


def _template_gap(tok: Tokenizer, close: str) -> str | None:
    """What the chat template writes between the think span's `close` and the answer, rendered with an assistant turn
    that thought (its `reasoning_content`, Qwen3's and DeepSeek's field; `thinking`, gpt-oss's); None where the
    template has no such turn (or none at all)."""
    if not getattr(tok, "has_chat_template", False):
        return None
    turn = {"role": "assistant", "content": _ANSWER_MARK, "reasoning_content": _THINK_MARK, "thinking": _THINK_MARK}
    try:
        text = tok.apply_chat_template([{"role": "user", "content": "?"}, turn])  # type: ignore[list-item]
    except ValueError:
        return None
    think, answer = text.find(_THINK_MARK), text.find(_ANSWER_MARK)
    end = text.find(close, think) if think >= 0 else -1
    if think < 0 or answer < 0 or end < 0 or end > answer:
        return None
    return text[end + len(close): answer]


def template_options(think: bool) -> dict[str, Any]:
    """The chat template's variables for thinking on (none: the template's own default) or off."""
    return {} if think else dict(NO_THINKING)


def has_think_switch(tok: Tokenizer) -> bool:
    """Whether `tok`'s chat template renders a turn otherwise with thinking off (it reads enable_thinking). Cached
    per tokenizer; a template that fails either way has none."""
    return _switch(tok)


@lru_cache(maxsize=8)
def _switch(tok: Tokenizer) -> bool:
    if not getattr(tok, "has_chat_template", False):
        return False
    turn = [{"role": "user", "content": "?"}]
    try:
        return tok.apply_chat_template(turn) != tok.apply_chat_template(turn, template_options(False))
    except Exception:  # noqa: BLE001 - one that cannot render here (a server's tokenizer, a failing template): none
        return False


@dataclass
class SpanTracker:
    """The span each token is in, one token at a time: `push` a token, get its label. `count` is the think tokens
    drawn since the open marker (the budget's count); `label` the last token's label."""

    markers: Markers
    state: str = ANSWER
    count: int = 0
    label: str = ANSWER
    tail: list[int] = field(default_factory=list)  # the last few tokens: a marker of several may end here

    @classmethod
    def start(cls, markers: Markers, context: Sequence[int]) -> SpanTracker:
        """A tracker after `context` (the prompt, a branch's inherited tokens): inside the think span where the
        context opened one it did not close (a template that opens it for the model)."""
        t = cls(markers)
        for token in context:
            t.push(token)
        return t

    @property
    def thinking(self) -> bool:
        return self.state == THINK

    def push(self, token: int) -> str:
        """The label of `token`, drawn next; the state after it."""
        m = self.markers
        self.tail = [*self.tail[-(self._longest - 1):], int(token)] if self._longest > 1 else [int(token)]
        before = self.state
        if before == THINK:
            self.count += 1
            if self._ends(m.close):
                self.state = ANSWER
            self.label = THINK
        elif before == TOOL:
            if self._ends(m.tool_close):
                self.state = ANSWER
            self.label = TOOL
        elif self._ends(m.open):
            self.state, self.count, self.label = THINK, 0, THINK
        elif self._ends(m.tool_open):
            self.state = self.label = TOOL
        else:
            self.label = ANSWER
        return self.label

    @property
    def think_tokens(self) -> int:
        """Think tokens since the open marker, its close left out (once closed: the span's whole length)."""
        return self.count - (len(self.markers.close) if self.state != THINK and self.count else 0)

    def _ends(self, seq: tuple[int, ...]) -> bool:
        return bool(seq) and len(self.tail) >= len(seq) and tuple(self.tail[-len(seq):]) == seq

    @property
    def _longest(self) -> int:
        m = self.markers
        return max(len(m.open), len(m.close), len(m.tool_open), len(m.tool_close), 1)


def label_all(markers: Markers, context: Sequence[int], ids: Sequence[int]) -> list[str]:
    """Each of `ids`' labels, drawn after `context`."""
    t = SpanTracker.start(markers, context)
    return [t.push(i) for i in ids]


@dataclass(frozen=True)
class Span:
    """Steps [start, end) of one kind."""

    kind: str
    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start


def spans(labels: Sequence[str]) -> list[Span]:
    """The runs of equal labels (an empty label, a step of a model without markers, is in no span)."""
    out: list[Span] = []
    for i, kind in enumerate(labels):
        if out and out[-1].kind == kind and out[-1].end == i:
            out[-1] = Span(kind, out[-1].start, i + 1)
        elif kind:
            out.append(Span(kind, i, i + 1))
    return out
