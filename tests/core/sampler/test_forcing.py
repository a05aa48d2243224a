"""A record with a token the sampler did not draw: a search's token takes the model's raw distribution, no stage and
no random number, its probability the model's; a token outside the record, or a server's partial record, is refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.core.record.record import Sample
from app.core.sampler.forcing import forced, taken
from app.core.sampler.sampling import sample
from app.core.settings import SamplerSettings
from backends.ops import NUMPY


def drawn() -> Sample:
    logits = np.random.default_rng(0).normal(size=300).astype(np.float32) * 2
    s = sample(NUMPY, logits, SamplerSettings(temperature=0.7, top_k=5), 0.3)
    assert isinstance(s, Sample)
    return s


def test_a_token_taken_by_a_search_has_the_models_probability_and_no_stage():
    s = drawn()
    token = int(s.top_ids[3])
    t = taken(s, token)
    assert (t.token, t.rank, t.u, t.stage_names, t.is_taken) == (token, 3, None, (), True)
    assert t.raw_logprob == pytest.approx(float(s.top_logits[3]) - s.raw_lse)
    assert t.prob == pytest.approx(math.exp(t.raw_logprob))
    np.testing.assert_array_equal(t.probs, s.probs[:1])
    assert not s.is_taken


def test_a_token_outside_the_record_or_a_servers_record_is_refused():
    s = drawn()
    with pytest.raises(ValueError, match="not among"):
        taken(s, 10_000)
    partial = Sample.partial(7, math.log(0.6), [7, 2], [math.log(0.6), math.log(0.4)])
    with pytest.raises(ValueError, match="not among"):
        taken(partial, 7)
    assert forced(partial, 2).prob == pytest.approx(0.4) and forced(partial, 2).rank is None
