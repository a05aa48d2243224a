"""A thinking model's chat answer as llama.cpp's and vLLM's reasoning parsers send it: the think span's text in
`reasoning_content`, the answer's in `content`. Each step goes where its record's span says (`record.spans`); the
reasoning markers are in neither (a marker of several tokens is held back until it is whole or is not one), nor is
the blank between the span and the answer (the answer's leading whitespace after a span, as llama.cpp strips it).
`Split` follows one choice as its steps come. No HTTP, no model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.core.record.spans import THINK, Markers


@dataclass
class Split:
    """One choice's text, parted as it streams: `take` each step, `flush` at its end; each returns the (reasoning,
    content) text to send now. Without markers (a model that does not think) every step is content, as it is."""

    markers: Markers | None
    reasoning: list[str] = field(default_factory=list)  # all sent so far
    content: list[str] = field(default_factory=list)
    _pending: list[tuple[int, str, str]] = field(default_factory=list)  # (token, text, span) a marker may begin with
    _strip: bool = False  # a span closed and no answer text came yet: its leading whitespace is the template's
    _closed: bool = False  # the span closed just now: what the template writes before the answer may follow

    def take(self, token: int, text: str, span: str) -> tuple[str, str]:
        if self.markers is None:
            return self._route(text, "")
        self._pending.append((int(token), text, span))
        return self._drain(final=False)

    def flush(self) -> tuple[str, str]:
        """What is still held at the choice's end (a marker's beginning it never finished)."""
        return self._drain(final=True) if self.markers is not None else ("", "")

    def _drain(self, final: bool) -> tuple[str, str]:
        m = self.markers
        assert m is not None
        out = [("", "")]
        while self._pending:
            seqs = [s for s in (m.open, m.close, m.answer if self._closed else ()) if s]
            ids = tuple(t for t, _, _ in self._pending)
            whole = next((s for s in seqs if ids[: len(s)] == s), None)
            if whole is not None:  # a marker: sent in neither field
                del self._pending[: len(whole)]
                self._closed = whole == m.close
                self._strip = self._strip or whole == m.close
                continue
            if not final and any(len(s) > len(ids) and s[: len(ids)] == ids for s in seqs):
                break  # it may still become a marker
            _, text, span = self._pending.pop(0)
            self._closed = False
            out.append(self._route(text, span))
        return "".join(r for r, _ in out), "".join(c for _, c in out)

    def _route(self, text: str, span: str) -> tuple[str, str]:
        if span == THINK:
            self.reasoning.append(text)
            return text, ""
        if self._strip:
            text = text.lstrip()
            self._strip = not text
        self.content.append(text)
        return "", text
