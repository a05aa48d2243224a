"""`TOKEN=VALUE` as the command line reads it, and a typed token found in a real tokenizer's vocabulary."""

from __future__ import annotations

import pytest

from app.core.models.sources import BUILTIN_PATH
from app.core.sampler.logit_bias import BiasEntry, parse_entry, resolve, token_id
from app.core.settings import SettingsError
from backends.base import LoadOptions
from backends.hf.tokenizer import load_tokenizer


@pytest.mark.parametrize(("typed", "entry"), [
    ("42=-5", BiasEntry(42, -5.0)),
    ('" the"=-5', BiasEntry(" the", -5.0)),  # quoted: the leading space is the token's
    ("' a=b'=2.5", BiasEntry(" a=b", 2.5)),  # split at the last '=': the text may hold one
    (r"\n=3", BiasEntry("\n", 3.0)),  # unquoted: \n is a newline
    (r'"\t"=-1', BiasEntry("\t", -1.0)),
    (" os=1", BiasEntry(" os", 1.0)),  # unquoted spaces are kept too
])
def test_a_token_is_read_as_an_id_or_a_text(typed: str, entry: BiasEntry):
    assert parse_entry(typed) == entry


@pytest.mark.parametrize("typed", ["5", "=5", "x=abc", "x=200", "x=-101", '""=1', r'"\x"=1'])
def test_a_bad_entry_is_refused(typed: str):
    with pytest.raises(SettingsError):
        parse_entry(typed)


def test_a_text_is_its_one_token_and_more_or_none_is_refused_with_its_pieces():
    tok = load_tokenizer(BUILTIN_PATH, LoadOptions())
    vocab = len(tok.hf)
    one = next(i for i in range(200, vocab) if tok.encode(tok.token_text(i), add_special_tokens=False) == [i])
    assert token_id(tok.token_text(one), tok, vocab) == one
    assert resolve([BiasEntry(tok.token_text(one), -2.0), BiasEntry(7, 1.0), BiasEntry(7, 3.0)], tok, vocab) == (
        (7, 3.0), (one, -2.0))  # sorted by id; an id given twice keeps its last value
    ids = tok.encode(" hello", add_special_tokens=False)
    assert len(ids) > 1
    pieces = ", ".join(repr(tok.token_text(i)) for i in ids)
    with pytest.raises(SettingsError) as e:
        resolve([BiasEntry(" hello", -5.0)], tok, vocab)
    assert str(e.value) == f"logit bias: ' hello' is {len(ids)} tokens here ({pieces}); give one token or its id"
    with pytest.raises(SettingsError, match=f"token id {vocab} is past this vocabulary"):
        resolve([BiasEntry(vocab, 1.0)], tok, vocab)
    with pytest.raises(SettingsError, match="give a token id"):
        token_id("x", None, 0)
    assert token_id(10**6, None, 0) == 10**6  # vocabulary not known (a server's): the id goes as it is
