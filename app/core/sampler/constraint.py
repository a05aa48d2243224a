"""A constraint (`stage_inputs.Constraint`) compiled for a model's tokenizer (`compile_for`: refused in one line where
it does not compile, or not within COMPILE_LIMIT_S), and the `Matcher` that follows a row's tokens and masks what may
not come next; `check` validates one without a model. Compiles and masks; runs no stage, draws nothing. The engine is
llguidance: no Python dependencies, bitmasks numpy unpacks (and torch and MLX kernels), `deep_copy` for a fork and
`rollback` for a replay, no compiler at its first call (xgrammar pulls torch, transformers and triton).
"""

from __future__ import annotations

import json
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from app.core.sampler.grammar_step import Allowed, ones
from app.core.stage_inputs import Constraint
from backends.base import Tokenizer
from backends.ops import Array, ArrayOps

COMPILE_LIMIT_S = 10.0  # a constraint that takes longer to compile is refused
_TEMPLATES = 16  # compiled grammars kept per tokenizer


class ConstraintError(ValueError):
    """A constraint that cannot be used: one line, naming the position where there is one."""


class GrammarEnded(Exception):  # noqa: N818 - an outcome, not a failure: a complete grammar ends its row
    """A row's grammar can go no further: complete (`reason` "eos": it ended as with end-of-text) or broken
    ("error": it allows no token, or the row took one it does not allow), `message` saying where."""

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason)
        self.reason, self.message = reason, message


# a constraint as llguidance's grammar ----------------------------------------------------------------------------
def grammar_source(c: Constraint) -> str:
    """`c` as an llguidance grammar (not yet checked against anything: `check` does that)."""
    import llguidance as llg

    if c.kind == "json_schema":
        return llg.LLMatcher.grammar_from_json_schema(_schema(c.text), defaults=_JSON_OPTIONS)
    if c.kind == "json_object":
        return llg.LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=_JSON_OPTIONS)
    if c.kind == "choices":
        return llg.grammar_from("choice", json.dumps(list(c.choices)))
    if c.kind == "gbnf":
        try:
            return llg.grammar_from("gbnf", c.text)
        except ValueError as e:
            raise ConstraintError(f"the GBNF grammar: {_one_line(str(e).split(': ', 1)[-1])}") from None
    return llg.grammar_from(c.kind, c.text)  # lark, regex


# JSON as llama.cpp's schema grammars write it: whitespace between items, but never more than a line's indentation
# (a model that can pad forever, as Ollama's did, otherwise may)
_JSON_OPTIONS: dict[str, Any] = {"whitespace_pattern": r"(?: |\n[ \t]{0,20})?"}


def _schema(text: str) -> Any:
    try:
        schema = json.loads(text)
    except ValueError as e:
        where = f" at line {e.lineno}, column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
        raise ConstraintError(f"the JSON schema is not JSON{where}: {getattr(e, 'msg', e)}") from None
    if not isinstance(schema, (dict, bool)):
        raise ConstraintError(f"a JSON schema is an object (or true / false), got {type(schema).__name__}")
    return schema


def check(c: Constraint) -> None:
    """Raise ConstraintError (one line, naming the position) where `c` does not compile; for the editor, as the
    person types (no model needed: a token-level check comes with `compile_for`)."""
    import llguidance as llg

    failed, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar_source(c))
    if failed:
        raise ConstraintError(explain(c, messages[0]))


def explain(c: Constraint, error: str) -> str:
    """llguidance's error for `c` in one line, with the position in the person's own text."""
    lines = error.splitlines()
    if c.kind == "regex" and len(lines) > 3 and "^" in lines[2]:  # the regex, then a caret line under it
        message = next((ln.removeprefix("error: ") for ln in lines if ln.startswith("error: ")), lines[0])
        column = lines[2].index("^") - (len(lines[1]) - len(lines[1].lstrip())) + 1
        return f"the regular expression, at character {column}: {message}"
    if c.kind in ("lark", "gbnf") and (m := re.match(r"(?:at )?(\d+)\((\d+)\): (.*)", lines[0])):
        message = re.sub(r" \(at .*\)$", "", m[3])
        return f"the {'Lark' if c.kind == 'lark' else 'converted GBNF'} grammar, line {m[1]}, column {m[2]}: {message}"
    what = {"json_schema": "the JSON schema", "choices": "the choices", "json_object": "the JSON object grammar"}
    return f"{what.get(c.kind, 'the grammar')}: {_one_line(lines[0] if lines else error)}"


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


# compiled for a tokenizer ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Compiled:
    """A constraint compiled for one tokenizer and vocabulary: a matcher at its start, which every row copies."""

    constraint: Constraint
    template: Any  # llguidance.LLMatcher, never advanced
    vocab: int  # the model's logits (the mask's length)
    eos: frozenset[int]


class _Tokens:
    """One tokenizer's llguidance token table (built once: about a second for a large vocabulary) and its compiled
    grammars, most recent last."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self.compiled: OrderedDict[tuple[Constraint, int], Compiled] = OrderedDict()


_TABLES: weakref.WeakKeyDictionary[Any, dict[int, _Tokens]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def compile_for(c: Constraint, tokenizer: Tokenizer, vocab: int) -> Compiled:
    """`c` compiled for a model's tokenizer and its vocabulary of `vocab` logits (cached per tokenizer). Raises
    ConstraintError where it does not compile, or not within COMPILE_LIMIT_S, or the tokenizer has no table."""
    c = replace(c, place="first")  # (the place changes nothing compiled)
    tokens = _tokens(tokenizer, vocab)
    key = (c, vocab)
    with _LOCK:
        if key in tokens.compiled:
            tokens.compiled.move_to_end(key)
            return tokens.compiled[key]
    compiled = Compiled(c, _matcher(c, tokens.table), vocab, frozenset(tokenizer.eos_ids))
    with _LOCK:
        tokens.compiled[key] = compiled
        while len(tokens.compiled) > _TEMPLATES:
            tokens.compiled.popitem(last=False)
    return compiled


def _tokens(tokenizer: Tokenizer, vocab: int) -> _Tokens:
    import llguidance as llg

    with _LOCK:
        known = _TABLES.setdefault(tokenizer, {})
        if vocab in known:
            return known[vocab]
    source = tokenizer.vocabulary_json() if hasattr(tokenizer, "vocabulary_json") else None
    if source is None:
        raise ConstraintError("this model's tokenizer is not a fast (tokenizers) one: a constraint cannot run here")
    eos = sorted(t for t in tokenizer.eos_ids if 0 <= t < vocab) or None
    try:  # as many tokens as the model has logits (an embedding is often padded past the tokenizer's)
        table = llg.LLTokenizer(source, n_vocab=vocab, eos_token=eos)
    except ValueError:  # fewer logits than the tokenizer has tokens: the mask is cut to the model's
        table = llg.LLTokenizer(source, eos_token=eos)
    with _LOCK:
        return known.setdefault(vocab, _Tokens(table))


def _matcher(c: Constraint, table: Any) -> Any:
    """A new LLMatcher for `c` (its construction drops the GIL: it runs in a thread, waited on for at most
    COMPILE_LIMIT_S; one still compiling then is left to finish and dropped)."""
    import llguidance as llg

    source = grammar_source(c)
    made: list[Any] = []
    worker = threading.Thread(target=lambda: made.append(llg.LLMatcher(table, source, log_level=0)), daemon=True,
                              name="logitlab-grammar")
    worker.start()
    worker.join(COMPILE_LIMIT_S)
    if not made:
        raise ConstraintError(f"the {c.kind.replace('_', ' ')} did not compile within {COMPILE_LIMIT_S:g} s: "
                              "make it smaller or simpler")
    if made[0].is_error():
        raise ConstraintError(explain(c, made[0].get_error()))
    return made[0]


# one row's matcher ------------------------------------------------------------------------------------------------
class Matcher:
    """One row's place in a compiled grammar. It follows the row's context (`History.ids`: the prompt, then what was
    generated from `start` on): it consumes what is new and rolls back what a fork or a replay changed, so that it
    stays in step with the row whatever happened to it. `mask` is what the grammar allows next: end-of-text alone once
    it is complete, every token once it is broken (`end` says which), so that a row already done never stops a batch
    (its draw is dropped)."""

    def __init__(self, compiled: Compiled, start: int, place: str = "first", *, state: Any = None,
                 ids: Sequence[int] = (), token_text: Callable[[int], str] = str) -> None:
        self.compiled, self.start, self.place, self.token_text = compiled, start, place, token_text
        self._m = state if state is not None else compiled.template.deep_copy()
        self._ids = list(ids)  # the generated tokens it has consumed
        self._fed = len(self._ids)  # of them, those llguidance has (`_follow`)
        self._mask: np.ndarray | None = None  # (V,) uint8, for `_ids`
        self.legal = 0  # tokens `_mask` allows
        self.ended: GrammarEnded | None = None

    def fork(self) -> Matcher:
        """A copy that goes on alone (another row, a beam)."""
        twin = Matcher(self.compiled, self.start, self.place, state=self._m.deep_copy(), ids=self._ids,
                       token_text=self.token_text)
        twin._mask, twin.legal, twin.ended, twin._fed = self._mask, self.legal, self.ended, self._fed
        return twin

    @property
    def consumed(self) -> tuple[int, ...]:
        return tuple(self._ids)

    def mask(self, ids: Sequence[int]) -> np.ndarray:
        """(V,) uint8, 1 for each token the grammar allows after the row's context `ids`."""
        self.end(ids)
        return self._shown()[0]

    def end(self, ids: Sequence[int]) -> GrammarEnded | None:
        """Why the grammar can go no further after the row's context `ids` (complete, or broken), or None. A
        complete grammar goes on where a fork or a speculative round rolls back what completed it; one that took a
        token it does not allow stays broken."""
        if self._m.is_error():  # (llguidance took a token it does not allow: broken for good)
            return self.ended
        try:
            self._follow(ids)
            if self._mask is None:
                self._mask, self.legal = self._compute()
            self._check_end()
            self.ended = None
        except GrammarEnded as e:
            self.ended = e
        return self.ended

    def allowed(self, ops: ArrayOps, logits: Array) -> Allowed:
        """What it allows at this step (after `mask`), for the step's record; `logits` the row's raw logits (V,)."""
        return Allowed(self.place, *self._shown(), ops, logits)

    def _shown(self) -> tuple[np.ndarray, int]:
        """The mask a step applies and its count: the grammar's own, or every token where it is broken."""
        if self._mask is not None and (self.ended is None or self.ended.reason == "eos") and self.legal > 0:
            return self._mask, self.legal
        return ones(self.compiled.vocab), self.compiled.vocab

    def _follow(self, ids: Sequence[int]) -> None:
        """Consume what is new in `ids`, after rolling back what differs. Only the tokens before the first end-of-text
        reach llguidance (`_fed` of them): end-of-text is checked here (allowed where the grammar accepts, and alone
        after it), because llguidance 1.9 does not count an end-of-text it takes in a stopped state, so rolling one
        back would undo the token before it."""
        new = ids[self.start:]
        n = len(self._ids)
        if len(new) < n or list(new[:n]) != self._ids:  # a fork or a replay changed what it consumed: roll back
            keep = next((i for i, (a, b) in enumerate(zip(new, self._ids, strict=False)) if a != b), min(len(new), n))
            if self._fed > keep:
                self._m.rollback(self._fed - keep)
                self._fed = keep
            del self._ids[keep:]
            self._mask = None
        for t in map(int, new[len(self._ids):]):
            if self._complete() or t in self.compiled.eos:
                ok = t in self.compiled.eos and (self._complete() or self._m.is_accepting())
            else:
                ok = self._m.consume_token(t)
                self._fed += ok
            if not ok:
                raise GrammarEnded("error", f"the grammar does not allow {self.token_text(t)!r} at step "
                                            f"{len(self._ids)}")
            self._ids.append(t)
            self._mask = None

    def _complete(self) -> bool:
        """The row took end-of-text where the grammar accepts: it is complete, only end-of-text may follow."""
        return len(self._ids) > self._fed

    def _compute(self) -> tuple[np.ndarray, int]:
        if self._complete():  # end-of-text alone
            mask = np.zeros(self.compiled.vocab, dtype=np.uint8)
            mask[[t for t in self.compiled.eos if t < self.compiled.vocab]] = 1
            return mask, int(np.count_nonzero(mask))
        bits = np.frombuffer(self._m.compute_bitmask(), dtype=np.uint8)
        mask = np.unpackbits(bits, bitorder="little")[: self.compiled.vocab]
        return mask, int(np.count_nonzero(mask))

    def _check_end(self) -> None:
        if self._complete() or (self.legal == 0 and (self._m.is_stopped() or self._m.is_accepting())):
            raise GrammarEnded("eos")  # complete: it ended as with end-of-text
        if self.legal == 0:
            raise GrammarEnded("error", f"the grammar allows no token at step {len(self._ids)}"
                                        + (f": {_one_line(self._m.get_error())}" if self._m.is_error() else ""))


def matcher_for(c: Constraint, tokenizer: Tokenizer, vocab: int, start: int) -> Matcher:
    """A new row's matcher for `c` over a model's tokenizer and `vocab` logits, following the row's context from
    position `start` on (what comes before it, the prompt, is not the grammar's)."""
    return Matcher(compile_for(c, tokenizer, vocab), start, c.place, token_text=tokenizer.token_text)
