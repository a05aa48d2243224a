"""Sampler settings: one range per setting (the same in validation, the command line and the window) and stop
strings typed with backslash escapes, read back exactly as written."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.settings import FIELDS, SamplerSettings, SettingsError, read_escapes, write_escapes


@pytest.mark.parametrize(("typed", "meant"), [
    (r"\n", "\n"), (r"\t", "\t"), (r"\r", "\r"), (r"\\", "\\"), (r"\\n", "\\n"), (r"\\\n", "\\\n"),
    (r"a\nb", "a\nb"), (r"\x", r"\x"), ("\\", "\\"), ("plain", "plain"), (r"\n\n", "\n\n"),
])
def test_a_stop_string_reads_its_backslash_escapes(typed: str, meant: str):
    assert read_escapes(typed) == meant


@given(st.text(alphabet=st.sampled_from(["a", "\\", "n", "t", "r", "\n", "\t", "\r", "é"]), max_size=12))
def test_a_stop_string_written_is_read_back_exactly_on_one_line(text: str):
    typed = write_escapes(text)
    assert read_escapes(typed) == text and len(typed.splitlines()) <= 1


@pytest.mark.parametrize("f", FIELDS, ids=lambda f: f.name)
def test_each_setting_takes_its_range_and_nothing_past_it(f):
    top = 2**40 if math.isinf(f.hi) else f.hi  # (top-k: any k; k ≥ the vocabulary is off)
    for value in (f.lo, top):
        assert getattr(SamplerSettings(**{f.name: int(value) if f.integer else value}), f.name) == value
    past = [f.hi + 1, f.lo - 1] if f.integer else [f.hi + 0.01, f.lo - 0.01, float("nan"), float("inf")]
    for value in [v for v in past if not math.isinf(v) or not f.integer]:
        with pytest.raises(SettingsError, match=f"{f.name} must be .* {re.escape(f.span)}"):
            SamplerSettings(**{f.name: int(value) if f.integer else value})
