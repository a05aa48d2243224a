"""The stages beyond top-k / top-p / min-p against their definitions (numpy reference, float64 by hand), in any
order, recorded as their own stages. No models, no Qt."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.record.record import Sample
from app.core.record.trace import RunTrace
from app.core.sampler.pipeline import History, make_stages
from app.core.sampler.sampling import RECORD_K, NoValidTokenError, resample, sample
from app.core.sampler.stages import (
    apply_dynatemp,
    apply_epsilon_cutoff,
    apply_eta_cutoff,
    apply_logit_bias,
    apply_mirostat,
    apply_top_n_sigma,
    apply_typical_p,
    apply_xtc,
    dry_penalties,
    dry_vector,
    xtc_uniform,
)
from app.core.settings import (
    ENGINE_CHAINS,
    ORDER_CHAINS,
    STAGES,
    SamplerSettings,
    SettingsError,
    StageOrder,
    parse_order,
    read_settings,
)
from backends.ops import NUMPY

X = np.log(np.array([0.05, 0.4, 0.1, 0.3, 0.15], dtype=np.float32))  # probabilities 0.4, 0.3, 0.15, 0.1, 0.05


def p64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x[np.isfinite(x)].max())
    return e / e.sum()


def kept(cut) -> list[int]:
    return np.flatnonzero(np.isfinite(cut.x)).tolist()


def draw(x, s: SamplerSettings, u: float = 0.5, **kw) -> Sample:
    out = sample(NUMPY, np.asarray(x, dtype=np.float32), s, u, **kw)
    assert isinstance(out, Sample)
    return out


# --- each stage against its definition -------------------------------------------------------------------------

def test_typical_p_keeps_the_tokens_nearest_the_entropy_until_the_mass():
    p = p64(X)
    h = -(p * np.log(p)).sum()
    by_distance = np.argsort(np.abs(-np.log(p) - h), kind="stable")
    want = sorted(by_distance[: np.searchsorted(np.cumsum(p[by_distance]), 0.5) + 1].tolist())
    assert kept(apply_typical_p(NUMPY, X, 0.5)) == want
    assert kept(apply_typical_p(NUMPY, X, 1.0)) == [0, 1, 2, 3, 4]
    assert len(kept(apply_typical_p(NUMPY, X, 0.0))) == 1  # at least one token


def test_top_n_sigma_keeps_logits_within_n_deviations_of_the_top():
    x = np.array([5.0, 4.0, 1.0, 0.0, -np.inf], dtype=np.float32)
    finite = x[np.isfinite(x)].astype(np.float64)
    line = finite.max() - 1.0 * finite.std()
    cut = apply_top_n_sigma(NUMPY, x, 1.0)
    assert kept(cut) == np.flatnonzero(x >= line).tolist() == [0, 1]
    assert float(cut.line) == pytest.approx(line, rel=1e-6)


def test_epsilon_cutoff_drops_tokens_below_epsilon_but_never_the_top():
    assert kept(apply_epsilon_cutoff(NUMPY, X, 0.12)) == [1, 3, 4]
    assert kept(apply_epsilon_cutoff(NUMPY, X, 0.9)) == [1]


def test_eta_cutoff_is_epsilon_scaled_by_the_entropy():
    p = p64(X)
    eta = min(0.04, math.sqrt(0.04) * math.exp((p * np.log(p)).sum()))
    cut = apply_eta_cutoff(NUMPY, X, 0.04)
    assert float(cut.prob) == pytest.approx(eta, rel=1e-5)
    assert kept(cut) == np.flatnonzero(p >= eta).tolist()


def test_xtc_removes_all_but_the_least_likely_above_the_threshold_when_its_coin_says_so():
    fired = apply_xtc(NUMPY, X, np.float32(0.2), 0.12, 0.5)
    assert kept(fired) == [0, 2, 4]  # 0.4 and 0.3 go; 0.15 (the least likely above 0.12) stays
    assert float(fired.prob) == pytest.approx(0.15, rel=1e-5)
    missed = apply_xtc(NUMPY, X, np.float32(0.6), 0.12, 0.5)
    assert kept(missed) == [0, 1, 2, 3, 4] and math.isnan(missed.prob)
    lone = apply_xtc(NUMPY, X, np.float32(0.0), 0.35, 1.0)  # one token above: nothing to exclude
    assert kept(lone) == [0, 1, 2, 3, 4] and math.isnan(lone.prob)


def test_dynamic_temperature_follows_the_normalized_entropy():
    p = p64(X)
    norm = -(p * np.log(p)).sum() / math.log(5)
    t = 0.5 + (1.5 - 0.5) * norm**2.0
    cut = apply_dynatemp(NUMPY, X, 1.0, 0.5, 2.0)
    assert float(cut.prob) == pytest.approx(t, rel=1e-5)
    np.testing.assert_allclose(p64(cut.x), p64(X / t), rtol=1e-5)
    one = np.array([3.0, -np.inf, -np.inf], dtype=np.float32)  # a certain step: the low end
    assert float(apply_dynatemp(NUMPY, one, 1.0, 0.25, 1.0).prob) == pytest.approx(0.75)


def test_logit_bias_adds_to_the_chosen_tokens_and_is_its_own_stage():
    bias = np.zeros(5, dtype=np.float32)
    bias[0] = 3.0
    np.testing.assert_allclose(apply_logit_bias(NUMPY, X, bias).x, X + bias)
    out = draw(X, SamplerSettings(temperature=1.0, logit_bias=((0, 3.0), (99, 1.0))))  # an id past the vocabulary
    assert out.stage_names == ("logit_bias", "temperature")
    assert out.top_ids[0] == 1  # the raw order (by the model's probability) is unchanged: 0.4 first
    assert out.probs[-1][list(out.top_ids).index(0)] == pytest.approx(p64(X + bias)[0], rel=1e-5)


def test_mirostat_cuts_tokens_more_surprising_than_mu_and_mu_follows_each_draw():
    cut = apply_mirostat(NUMPY, X, np.float32(2.0))  # surprise ≤ 2 bits: p ≥ 0.25
    assert kept(cut) == [1, 3] and float(cut.prob) == pytest.approx(0.25)
    s = SamplerSettings(temperature=1.0, mirostat_tau=3.0, mirostat_eta=0.2)
    h = History.start(NUMPY, 5, [])
    mu = 2 * 3.0
    for u in np.random.default_rng(1).random(12):
        out = draw(X, s, float(u), history=h)
        i = out.stage_names.index("mirostat")
        assert out.stage_names[-1] == "mirostat" and float(out.thresholds[i]) == pytest.approx(2**-mu, rel=1e-5)
        mu -= 0.2 * (-math.log2(out.prob) - 3.0)  # the drawn token's surprise in the final distribution
        assert float(h.mu) == pytest.approx(mu, rel=1e-5)


# --- any order ----------------------------------------------------------------------------------------------

def test_the_chain_orders_the_stages_and_the_record_names_them_in_that_order():
    s = SamplerSettings(temperature=0.7, top_k=3, top_p=0.9, typical_p=0.95, xtc_probability=0.3,
                        chain=("top_k", "temperature", "xtc", "typical_p"))
    assert [n for n, _ in make_stages(s, 5)] == ["top_k", "temperature", "xtc", "typical_p", "top_p"]
    assert draw(X, s).stage_names == ("top_k", "temperature", "xtc", "typical_p", "top_p")


def test_the_old_orders_are_chains_and_a_chain_equal_to_one_is_stored_as_it():
    s = SamplerSettings(chain=ORDER_CHAINS["temperature-last"])
    assert s.chain == () and s.order == StageOrder.TEMPERATURE_LAST
    assert SamplerSettings(order="temperature-first").stage_order == STAGES


@pytest.mark.parametrize("engine", list(ENGINE_CHAINS))
def test_an_engine_name_is_its_own_order(engine: str):
    order, chain = parse_order(engine)
    s = SamplerSettings(order=order, chain=chain)
    full = s.stage_order
    assert [n for n in full if n in ENGINE_CHAINS[engine]] == list(ENGINE_CHAINS[engine])
    assert sorted(full) == sorted(STAGES)


def test_order_text_names_stages_and_unknown_names_are_refused_with_the_list():
    order, chain = parse_order("top-k, temperature,top_p")
    assert chain[:4] == ("logit_bias", "top_k", "temperature", "top_p") and order == StageOrder.TEMPERATURE_LAST
    with pytest.raises(SettingsError, match=r"unknown stage 'top_q'.*typical_p"):
        parse_order("top_q,temperature")
    with pytest.raises(SettingsError, match="twice"):
        parse_order("top_k,top_k")


def test_a_saved_chain_and_logit_bias_read_back_equal():
    s = SamplerSettings(temperature=0.5, typical_p=0.8, xtc_probability=0.2, logit_bias=((7, -2.5), (3, 1.0)),
                        chain=parse_order("mlx-lm")[1])
    back = read_settings(s.to_dict())
    assert back == s and back.logit_bias == ((3, 1.0), (7, -2.5))


@pytest.mark.parametrize("kw, msg", [
    ({"typical_p": 1.5}, "typical_p must be a number from 0 to 1"),
    ({"xtc_threshold": 0.6}, "xtc_threshold must be a number from 0 to 0.5"),
    ({"logit_bias": ((1, 200.0),)}, "logit_bias for token 1 must be a number from -100 to 100"),
    ({"logit_bias": ((-1, 2.0),)}, "token id ≥ 0"),
    ({"chain": ("temperature", "warp")}, "unknown stage 'warp'"),
])
def test_bad_new_settings_are_refused_naming_the_setting(kw, msg):
    with pytest.raises(SettingsError, match=msg):
        SamplerSettings(**kw)


# --- XTC's coin: the run's own draw -------------------------------------------------------------------------

def test_xtc_s_coin_is_reproducible_from_u_and_independent_of_the_draw():
    rng = np.random.default_rng(3)
    us = rng.random(20000)
    coins = np.array([xtc_uniform(u) for u in us])
    assert ((coins >= 0) & (coins < 1)).all()
    assert abs(np.corrcoef(us, coins)[0, 1]) < 0.03 and abs(coins.mean() - 0.5) < 0.01
    s = SamplerSettings(temperature=1.0, xtc_probability=0.5, xtc_threshold=0.12)
    fired = [math.isfinite(draw(X, s, u).thresholds[1]) for u in us[:200]]
    assert fired == [xtc_uniform(u) <= 0.5 for u in us[:200]]  # the record says when it fired, as u decides


# --- fuzzing ------------------------------------------------------------------------------------------------

extreme = st.one_of(st.sampled_from([-np.inf, np.inf, np.nan, 1e30, -1e30, 0.0, 88.0, -88.0]),
                    st.floats(-50, 50, width=32))
more_settings = st.builds(
    SamplerSettings,
    temperature=st.sampled_from([0.0, 0.01, 0.7, 2.0]), top_k=st.integers(0, 6),
    typical_p=st.sampled_from([0.0, 0.3, 0.9, 1.0]), top_n_sigma=st.sampled_from([0.0, 0.05, 1.0, 3.0]),
    xtc_probability=st.sampled_from([0.0, 0.5, 1.0]), xtc_threshold=st.sampled_from([0.0, 0.1, 0.5]),
    dynatemp_range=st.sampled_from([0.0, 0.5, 2.0]), dynatemp_exponent=st.sampled_from([0.1, 1.0, 10.0]),
    epsilon_cutoff=st.sampled_from([0.0, 0.001, 0.05]), eta_cutoff=st.sampled_from([0.0, 0.001, 0.05]),
    logit_bias=st.sampled_from([(), ((0, 100.0),), ((1, -100.0), (2, 5.0))]),
    chain=st.permutations(STAGES), repetition_penalty=st.sampled_from([1.0, 2.0]),
)


@settings(max_examples=300, deadline=None)
@given(logits=st.lists(extreme, min_size=1, max_size=12), s=more_settings, u=st.floats(0, 1, exclude_max=True),
       seen=st.lists(st.integers(0, 11), max_size=5))
def test_fuzz_new_stages_never_nan_never_empty_always_a_kept_token(logits, s, u, seen):
    x = np.asarray(logits, dtype=np.float32)
    if not (x > -1e9).any():
        with pytest.raises(NoValidTokenError):
            draw(x, s, u)
        return
    out = draw(x, s, u, history=History.start(NUMPY, len(x), [t for t in seen if t < len(x)]))
    assert 0 <= out.token < len(x)
    assert np.isfinite(out.final_probs).all() and out.prob > 0 and out.kept_counts.min() >= 1
    pos = int(np.flatnonzero(out.top_ids == out.token)[0])
    assert out.kept[:, pos].all()
    where = [s.stage_order.index("temperature" if n in ("greedy", "dynatemp") else n)
             for n in out.stage_names if n != "penalties"]
    assert where == sorted(where)  # the record names the stages in the chain's order


# --- re-sampling from the record: exact unless a stage needs the whole vocabulary ------------------------------

@settings(max_examples=120, deadline=None)
@given(s=more_settings.filter(lambda s: not s.greedy).map(lambda s: s.with_(top_k=40, logit_bias=())),
       seed=st.integers(0, 2**16), u=st.floats(0, 1, exclude_max=True))
def test_a_step_re_sampled_from_its_record_is_exact_unless_a_stage_needs_the_whole_vocabulary(s, seed, u):
    x = (np.random.default_rng(seed).normal(size=RECORD_K + 300) * 2).astype(np.float32)
    full = draw(x, s, u)
    again = resample(full.top_ids, full.top_logits, s, u, recorded=full)
    if not s.needs_whole_vocabulary():
        assert again.token == full.token
        np.testing.assert_allclose(again.final_probs, full.final_probs, rtol=1e-4, atol=1e-7)


def test_which_orders_need_the_whole_vocabulary():
    assert not SamplerSettings(top_k=20, typical_p=0.9, xtc_probability=0.5).needs_whole_vocabulary()  # after top-k
    assert SamplerSettings(top_k=20, typical_p=0.9, chain=("typical_p", "top_k")).needs_whole_vocabulary()
    assert SamplerSettings(top_k=20, top_p=0.9, chain=parse_order("mlx-lm")[1]).needs_whole_vocabulary()
    assert SamplerSettings(temperature=0.7, dynatemp_range=0.3).needs_whole_vocabulary()
    assert SamplerSettings(temperature=0, logit_bias=((5, 1.0),)).needs_whole_vocabulary()  # may lift a token
    assert not SamplerSettings(temperature=0, logit_bias=((5, -1.0),), xtc_probability=0.5).needs_whole_vocabulary()


def test_a_trace_file_keeps_the_order_and_the_new_settings(tmp_path):
    s = SamplerSettings(temperature=0.5, typical_p=0.8, mirostat_tau=3.0, logit_bias=((3, 1.0),),
                        chain=parse_order("top_k,xtc,temperature")[1])
    RunTrace(prompt_ids=[1, 2], settings=s, seed=1, prompt_text="x").save(tmp_path / "t.jsonl")
    assert RunTrace.load(tmp_path / "t.jsonl").settings == s


# --- DRY ------------------------------------------------------------------------------------------------------

def test_dry_penalizes_the_tokens_that_would_extend_a_repeat_as_llama_cpp_s_example():
    a, b, c, y = 1, 2, 3, 4
    ctx = [a, b, c, c, b, c, y, a, b, c]  # repeats: "a b c" then c (3), "b c" then y (2), "c" then b (1)
    assert dry_penalties(ctx, 0.8, 1.75, 2) == pytest.approx({c: 0.8 * 1.75, y: 0.8})
    assert dry_penalties(ctx, 0.8, 1.75, 2, breakers=frozenset({y})) == pytest.approx({c: 0.8 * 1.75})  # y never
    assert dry_penalties(ctx, 0.8, 1.75, 2, breakers=frozenset({a})) == pytest.approx({c: 0.8, y: 0.8})  # "b c"
    assert dry_penalties(ctx, 0.8, 1.75, 2, breakers=frozenset({b})) == {}  # one token since the breaker: < 2
    assert dry_penalties(ctx, 0.0, 1.75, 2) == {}


def dry_by_hand(ctx: list[int], mult: float, base: float, allowed: int, breakers: frozenset[int]) -> dict[int, float]:
    n = len(ctx)
    since = next((i for i in range(n) if ctx[n - 1 - i] in breakers), n)
    best: dict[int, int] = {}
    for p in range(n - 1):
        length = 0
        while length < since and p - length >= 0 and ctx[p - length] == ctx[n - 1 - length]:
            length += 1
        if length >= allowed and since >= allowed and ctx[p + 1] not in breakers:
            best[ctx[p + 1]] = max(best.get(ctx[p + 1], 0), length)
    return {t: mult * base ** (length - allowed) for t, length in best.items()}


@settings(max_examples=300, deadline=None)
@given(ctx=st.lists(st.integers(0, 4), min_size=0, max_size=40), allowed=st.integers(1, 4),
       breakers=st.sets(st.integers(0, 4), max_size=2))
def test_dry_is_its_definition_on_any_sequence(ctx, allowed, breakers):
    want = dry_by_hand(ctx, 1.5, 2.0, allowed, frozenset(breakers))
    assert dry_penalties(ctx, 1.5, 2.0, allowed, frozenset(breakers)) == pytest.approx(want)


def test_dry_is_a_recorded_stage_that_follows_the_run_s_tokens_and_a_fork():
    x = np.zeros(6, dtype=np.float32)
    s = SamplerSettings(temperature=1.0, dry_multiplier=2.0, dry_base=2.0, dry_allowed_length=1)
    h = History.start(NUMPY, 6, [1, 2, 3, 1, 2])  # "1 2" repeats: 3 would extend it (length 2)
    out = draw(x, s, 0.0, history=h)
    assert out.stage_names[0] == "dry" and out.kept_counts[0] == 6
    p = {int(t): float(q) for t, q in zip(out.top_ids, out.probs[1], strict=True)}
    assert math.log(p[0] / p[3]) == pytest.approx(2.0 * 2.0 ** (2 - 1))  # 3 penalized by 4, 0 not at all
    h.swap(NUMPY, out.token, 5)  # a fork took 5 instead: the next step's repeats see 5
    assert h.host_ids(NUMPY) == [1, 2, 3, 1, 2, 5]


def test_a_dry_penalty_past_float32_is_held_at_its_largest_value_without_overflow():
    """A long repeat at a high base: multiplier × base^L passes float32's range; the vector holds float32's max
    (the token is as good as cut) and no overflow warning is raised (warnings are errors under pytest)."""
    penalties = dry_penalties([1, 2, 3] * 200, 5.0, 1.75, 2)
    assert penalties[1] > float(np.finfo(np.float32).max)
    vec = dry_vector(penalties, 10)
    assert vec[1] == np.finfo(np.float32).max and np.isfinite(vec).all() and vec.sum() == vec[1]
