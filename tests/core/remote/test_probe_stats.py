"""The probe's statistics on hand-made numbers: each verdict's false-alarm rate is at most alpha by construction
(checked here by seeded simulation where a bound is a theorem, not a formula)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.core.remote.probe_stats import (
    RatioTest,
    chance_again,
    conditional,
    draws_needed,
    estimate_temperature,
    kept_verdict,
    listed_share,
    temperature_draws,
)


def test_a_kept_set_test_needs_the_draws_that_make_all_inside_unlikely_when_ignored():
    assert draws_needed(0.5, 1e-6) == 20 and 0.5**20 <= 1e-6 < 0.5**19
    assert draws_needed(1.0, 1e-6) is None and draws_needed(0.0, 1e-6) == 1


@pytest.mark.parametrize(("inside", "outside", "verdict"), [(20, 0, "honoured"), (19, 0, "inconclusive"),
                                                             (5, 5, "ignored"), (199, 1, "differs")])
def test_kept_verdicts(inside: int, outside: int, verdict: str):
    assert kept_verdict(inside, outside, 0.5, 1e-6) == verdict


def test_the_ratio_test_decides_for_the_wrong_temperature_at_most_alpha_of_the_time():
    rng = np.random.default_rng(0)
    lps = [-1.0, -1.5, -2.0, -3.0]
    hot, cool = conditional(lps, 1.0), conditional(lps, 0.5)
    wrong = 0
    for _ in range(2000):  # the truth is temperature 1; a test of 0.5 against it must rarely say 0.5
        test = RatioTest(cool, hot, 0.05)
        for i in rng.choice(4, size=200, p=hot):
            test.add(int(i))
            if test.decided:
                break
        wrong += test.decided == "a"
    assert wrong / 2000 <= 0.05


def test_the_ratio_test_finds_the_applied_temperature():
    lps = [-1.0, -1.5, -2.0, -3.0]
    test = RatioTest(conditional(lps, 0.5), conditional(lps, 1.0), 1e-6)
    for i in np.random.default_rng(1).choice(4, size=400, p=conditional(lps, 0.5)):
        test.add(int(i))
        if test.decided:
            break
    assert test.decided == "a" and sum(test.counts) < temperature_draws(lps, 0.5, 1e-6) * 4


def test_the_likeliest_temperature_of_many_draws_is_the_one_they_came_from():
    lps = [-1.0, -1.5, -2.0, -3.0]
    counts = [round(1000 * q) for q in conditional(lps, 0.5)]
    assert estimate_temperature(counts, lps) == pytest.approx(0.5, rel=0.06)
    assert estimate_temperature([0, 0, 0, 0], lps) is None


def test_a_cooler_temperature_draws_a_listed_token_at_least_as_often():
    lps = [math.log(0.3), math.log(0.2)]  # half the mass unlisted
    assert listed_share(lps, 0.5) == pytest.approx(0.5)
    assert listed_share(lps, 2.0) < 0.5


def test_the_chance_of_repeating_a_run_unseeded_is_its_probability():
    assert chance_again([math.log(0.5)] * 4) == pytest.approx(1 / 16)
