"""Side by side in the core: the first divergence between columns, and one step of every column overlaid."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.compare.side_by_side import Divergence, first_divergence, model_groups, overlay, step_keys
from app.core.record.record import Sample, StepTrace
from app.core.sampler.sampling import resample
from app.core.settings import SamplerSettings


def test_the_first_step_where_tokens_differ():
    assert first_divergence([[1, 2, 3, 4], [1, 2, 5, 4], [1, 2, 3, 4]]) == Divergence(2, (3, 5, 3))
    assert first_divergence([[7, 8], [7, 8]]) is None


def test_a_column_that_ended_diverges_where_the_others_go_on():
    assert first_divergence([[1, 2], [1, 2, 3]]) == Divergence(2, (None, 3))


def test_a_column_still_running_is_compared_only_where_it_has_steps():
    assert first_divergence([[1, 2], [1, 2, 3]], done=[False, True]) is None  # column 0 may still draw 3
    assert first_divergence([[1, 9], [1, 2, 3]], done=[False, True]) == Divergence(1, (9, 2))  # known already
    so_far = first_divergence([[1, 2, 3, 4], [1, 2, 5, 4], [1]], done=[True, True, False])
    assert so_far == Divergence(2, (3, 5, None), settled=False)  # column 2 may yet differ at step 1
    assert first_divergence([[], [4]], done=[False, False]) is None


@given(st.lists(st.lists(st.integers(0, 3), max_size=6), min_size=2, max_size=4))
def test_the_divergence_is_the_first_step_not_shared_by_all(columns):
    d = first_divergence(columns)
    length = max(len(c) for c in columns)
    first = next((k for k in range(length) if len({tuple(c[k:k + 1]) for c in columns}) > 1), None)
    assert (d.step if d is not None else None) == first


def sampled(logits: list[float], settings: SamplerSettings, u: float = 0.4, texts: str = "abcdefgh") -> StepTrace:
    """One step drawn by the real pipeline over hand-made logits (ids 10, 11, ...)."""
    ids = np.arange(10, 10 + len(logits), dtype=np.int32)
    sample = resample(ids, np.asarray(logits, dtype=np.float32), settings, u, top_n=len(logits))
    return StepTrace(3, sample, texts[sample.token - 10], tuple(texts[: len(logits)]), 0.0)


def test_the_overlay_reads_each_column_s_record():
    logits = [3.0, 2.5, 1.0, 0.5, -1.0]
    cold = sampled(logits, SamplerSettings(temperature=0.3))
    hot = sampled(logits, SamplerSettings(temperature=1.5, top_k=3))
    o = overlay([cold, hot], 3, top=10)
    assert o.step == 3 and o.candidates == (10, 11, 12, 13, 14)  # by the highest probability in any column
    for c, st_ in enumerate((cold, hot)):
        for i, tok in enumerate(o.candidates):
            at = int(np.flatnonzero(st_.sample.top_ids == tok)[0])
            assert o.probs[c, i] == pytest.approx(float(st_.sample.final_probs[at]))
        assert o.candidates[o.drawn[c]] == st_.token_id
    assert o.probs[1, 4] == 0.0  # cut by top-k: recorded as 0 in the distribution it sampled from
    assert o.texts == tuple("abcde")
    raw = overlay([cold, hot], 3, "raw")
    np.testing.assert_allclose(raw.probs[0], raw.probs[1])  # the same model saw the same logits


def test_the_overlay_keeps_the_top_candidates_and_every_drawn_token():
    a = StepTrace(0, Sample.partial(13, math.log(0.05), [10, 11, 12, 13], np.log([0.5, 0.3, 0.15, 0.05])), "d",
                  tuple("abcd"), 0.0)
    b = StepTrace(0, Sample.partial(10, math.log(0.6), [10, 14], np.log([0.6, 0.4])), "a", ("a", "e"), 0.0)
    o = overlay([a, b, None], 0, top=2)
    assert o.candidates == (10, 14, 13)  # 0.6, 0.4 lead; 13 only because column 0 drew it
    assert o.drawn == (2, 0, None)
    assert np.isnan(o.probs[0, 1]) and np.isnan(o.probs[2]).all()  # not in a's record; column 2 has no step
    assert o.probs[0, 2] == pytest.approx(0.05) and o.texts == ("a", "e", "d")


def test_a_server_that_reported_the_other_distribution_shows_nothing():
    raw_only = StepTrace(0, Sample.partial(10, -0.1, [10], [-0.1], reported="raw"), "a", ("a",), 0.0)
    o = overlay([raw_only], 0, "final")
    assert o.candidates == () and o.drawn == (None,)
    assert overlay([raw_only], 0, "raw").probs[0, 0] == pytest.approx(math.exp(-0.1))


def test_columns_are_grouped_by_model_in_order_of_their_first_column():
    assert model_groups(["m", "d", "m", "s"]) == [(0, 2), (1,), (3,)]
    assert model_groups(["m", "m"]) == [(0, 1)]


def test_the_divergence_compares_ids_on_one_model_and_texts_across_models():
    def step(token: int, text: str) -> StepTrace:
        return StepTrace(0, Sample.partial(token, -0.1, [token], [-0.1]), text, (text,), 0.0)

    a = [step(10, "x"), step(11, "y")]
    b = [step(20, "x"), step(21, "z")]  # another model: other ids for the same text
    assert step_keys([a, b], one_model=True) == [[10, 11], [20, 21]]
    assert first_divergence(step_keys([a, b], one_model=False)) == Divergence(1, ("y", "z"))
