"""An edited output as a new prompt, on a real byte-level BPE tokenizer (trained here) and the real stream
decoder: the kept tokens are the run's own up to the first change, and the whole prompt decodes to the edit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.record.trace import RunTrace, StepTrace
from app.core.sampler.sampling import sample
from app.core.session.edits import EDIT, common_chars, cut_points, edit_request, edited_prompt, edited_text
from app.core.settings import SamplerSettings
from backends.hf.tokenizer import HFTokenizer
from backends.ops import NUMPY
from tests.tiny import make_tokenizer

OUTPUT = "def add(a, b):\n    return a + b  # café 🙂 naïve\n"


@pytest.fixture(scope="module")
def tok() -> HFTokenizer:
    return HFTokenizer(make_tokenizer())


def stream(tok: HFTokenizer, ids: list[int]) -> list[str]:
    """Each token's text as a run shows it (the generator's stream decoder: "" while a character is unfinished)."""
    dec = tok.stream()
    return [dec.add(i) for i in ids]


def output(tok: HFTokenizer, text: str = OUTPUT) -> tuple[list[int], list[str]]:
    """A run's output: its ids and each token's text."""
    ids = tok.encode(text, add_special_tokens=False)
    return ids, stream(tok, ids)


def test_the_prompt_keeps_the_tokens_before_the_first_change_and_decodes_to_the_edit(tok):
    prompt = tok.encode("# a file\n", add_special_tokens=False)
    ids, texts = output(tok)
    cut = OUTPUT.index("return")
    edited = OUTPUT[:cut] + "yield" + OUTPUT[cut + 6:]
    p = edited_prompt(prompt, ids, texts, edited, tok)
    kept_chars = sum(len(t) for t in texts[: p.kept])
    assert p.kept_chars == kept_chars <= cut < kept_chars + len(texts[p.kept])  # the token that changed is redone
    assert p.ids[: len(prompt) + p.kept] == tuple(prompt + ids[: p.kept])
    assert tok.decode(p.ids) == "# a file\n" + edited


def test_an_unchanged_output_keeps_every_token_and_a_cleared_one_none(tok):
    prompt = [5, 6]
    ids, texts = output(tok)
    whole = edited_prompt(prompt, ids, texts, OUTPUT, tok)
    assert whole.kept == len(ids) and whole.ids == tuple(prompt + ids)
    empty = edited_prompt(prompt, ids, texts, "", tok)
    assert empty.kept == 0 and empty.ids == tuple(prompt)


def test_a_token_that_shows_no_text_is_kept_only_with_the_one_that_completes_its_character(tok):
    ids = list(tok.hf.convert_tokens_to_ids(list("caf")) + tok.hf.convert_tokens_to_ids(["Ã", "©"]))
    texts = stream(tok, ids)
    assert texts == ["c", "a", "f", "", "é"]  # é in two byte tokens
    points = cut_points(texts, "café!")
    assert points[0] == (5, 4) and (4, 3) not in points  # never between the two bytes
    p = edited_prompt([], ids, texts, "cafe", tok)
    assert p.kept == 3 and tok.decode(p.ids) == "cafe"


def test_a_stop_strings_trimmed_token_is_never_kept(tok):
    ids, texts = output(tok, "ab cd")
    assert cut_points(texts, "ab cd!", trimmed_end=True)[0][1] < len("ab cd")
    assert cut_points(texts, "ab cd!")[0] == (len(ids), len("ab cd"))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_edit_decodes_back_to_what_was_typed(tok, data):
    ids, texts = output(tok)
    a = data.draw(st.integers(0, len(OUTPUT)))
    b = data.draw(st.integers(a, len(OUTPUT)))
    typed = data.draw(st.text(alphabet="ab é🙂\n(", max_size=6))
    edited = OUTPUT[:a] + typed + OUTPUT[b:]
    prompt = tok.encode("x = 1\n", add_special_tokens=False)
    p = edited_prompt(prompt, ids, texts, edited, tok)
    assert tok.decode(p.ids) == "x = 1\n" + edited
    assert p.ids[: len(prompt) + p.kept] == tuple(prompt + ids[: p.kept])
    assert p.kept_chars <= common_chars(OUTPUT, edited)


def greedy(token: int) -> object:
    """A real step record (the numpy pipeline's, greedy) that draws `token`."""
    x = np.zeros(512, dtype=np.float32)
    x[token] = 10.0
    return sample(NUMPY, x, SamplerSettings(temperature=0.0), 0.5)


def test_the_request_is_a_child_marked_edit_at_the_tokens_kept(tok):
    ids, texts = output(tok)
    steps = [StepTrace(i, greedy(t), texts[i], (), 0.0) for i, t in enumerate(ids)]
    trace = RunTrace(prompt_ids=[7, 8], settings=SamplerSettings(), seed=1, steps=steps, run_id=12)
    edited = OUTPUT[:10] + "Z"
    r = edit_request(trace, edited, tok, SamplerSettings(seed=4), top_n=7)
    p = edited_prompt([7, 8], ids, texts, edited, tok)
    assert r.branch == EDIT and r.parent == (12, p.kept) and r.prompt_ids == p.ids
    assert r.settings.seed == 4 and r.top_n == 7 and not r.inherited and r.force is None


def test_the_edited_text_is_the_prompt_after_the_parents():
    assert edited_text("Hello there, friend", "Hello there") == ", friend"
    assert edited_text("<s>user: hi", "<|user|>hi", lambda: " friend") == " friend"
    assert edited_text("<s>user: hi", "<|user|>hi") == ""
