"""The sampler pipeline against its definitions, on the numpy reference. No models, no Qt."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.record.record import Sample
from app.core.sampler.pipeline import History, apply_penalties, make_stages
from app.core.sampler.sampling import NoValidTokenError, resample, sample
from app.core.sampler.stages import apply_min_p, apply_top_k, apply_top_p
from app.core.settings import SamplerSettings, SettingsError, StageOrder
from backends.ops import NUMPY


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x[np.isfinite(x)].max())
    return e / e.sum()


def final_probs(logits, s: SamplerSettings, history=None) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float32)
    if history is not None:
        x = apply_penalties(NUMPY, x, s, history.context, history.generated)
    for _, fn in make_stages(s, len(x)):
        x = fn(NUMPY, x, NUMPY.f32([0.5, 0.5]), None).x
    return softmax(x)


def draw(logits, s: SamplerSettings, u: float = 0.5, **kw) -> Sample:
    out = sample(NUMPY, np.asarray(logits, dtype=np.float32), s, u, **kw)
    assert isinstance(out, Sample)
    return out


LOGITS = np.log(np.array([0.05, 0.4, 0.1, 0.3, 0.15], dtype=np.float32))


def test_probabilities_sum_to_one_and_greedy_is_argmax():
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.normal(size=50).astype(np.float32) * 3
        p = final_probs(x, SamplerSettings(temperature=0.7))
        assert p.sum() == pytest.approx(1.0, abs=1e-5)
        g = draw(x, SamplerSettings(temperature=0), u=float(rng.random()))
        assert g.token == int(np.argmax(x)) and g.prob == pytest.approx(1.0)


def test_top_k_keeps_exactly_k_with_ties_to_lower_ids():
    x = np.array([1.0, 3.0, 2.0, 3.0, 2.0, 2.0], dtype=np.float32)
    kept = np.isfinite(apply_top_k(NUMPY, x, 3).x)
    assert kept.tolist() == [False, True, True, True, False, False]  # 3, 3, then the first 2 (id 2)
    assert np.isfinite(apply_top_k(NUMPY, x, 1).x).tolist() == [False, True, False, False, False, False]


def test_top_k_at_or_above_vocabulary_is_off():
    assert [n for n, _ in make_stages(SamplerSettings(top_k=5), 5)] == ["temperature"]
    assert [n for n, _ in make_stages(SamplerSettings(top_k=4), 5)] == ["temperature", "top_k"]


@pytest.mark.parametrize(("p", "expected"), [(0.39, [1]), (0.399, [1]), (0.401, [1, 3]), (0.699, [1, 3]),
                                             (0.701, [1, 3, 4]), (0.0, [1]), (0.999, [0, 1, 2, 3, 4])])
def test_top_p_keeps_the_minimal_prefix_reaching_p(p, expected):
    kept = np.flatnonzero(np.isfinite(apply_top_p(NUMPY, LOGITS, p).x)).tolist()
    assert kept == expected


def test_min_p_is_relative_to_the_top_probability():
    probs = softmax(LOGITS)
    for m in (0.1, 0.3, 0.5, 0.74, 0.76, 1.0):
        kept = np.isfinite(apply_min_p(NUMPY, LOGITS, m).x)
        assert kept.tolist() == (probs >= m * probs.max() - 1e-7).tolist()


def test_repetition_penalty_is_ctrl():
    x = np.array([2.0, -2.0, 2.0, -2.0], dtype=np.float32)
    h = History.start(NUMPY, 4, [0, 1])
    out = apply_penalties(NUMPY, x, SamplerSettings(repetition_penalty=2.0), h.context, h.generated)
    assert out.tolist() == [1.0, -4.0, 2.0, -2.0]


def test_frequency_and_presence_penalties_are_openai():
    x = np.zeros(4, dtype=np.float32)
    h = History.start(NUMPY, 4, [3, 3, 3])  # the prompt does not count for these two
    for t in (0, 0, 1):
        h.add(NUMPY, np.array([t]))
    s = SamplerSettings(frequency_penalty=0.5, presence_penalty=0.25)
    assert apply_penalties(NUMPY, x, s, h.context, h.generated).tolist() == [-1.25, -0.75, 0.0, 0.0]


def test_stage_orders_differ_as_documented():
    # temperature 2 flattens: top-p 0.6 needs more tokens when applied after temperature (temperature first)
    s = SamplerSettings(temperature=2.0, top_p=0.6)
    first = final_probs(LOGITS, s.with_(order=StageOrder.TEMPERATURE_FIRST))
    last = final_probs(LOGITS, s.with_(order=StageOrder.TEMPERATURE_LAST))
    assert (first > 0).sum() == 3 and (last > 0).sum() == 2
    names = [n for n, _ in make_stages(s.with_(top_k=2, min_p=0.1, order="temperature-last"), 5)]
    assert names == ["top_k", "top_p", "min_p", "temperature"]


def test_same_seed_same_tokens_and_inverse_cdf():
    p = softmax(LOGITS)
    cdf = np.cumsum(p)
    for u in np.linspace(0, 0.999, 37):
        tok = draw(LOGITS, SamplerSettings(temperature=1.0), u=float(u)).token
        assert tok == int(np.searchsorted(cdf, u, side="right"))


def test_record_shows_what_each_stage_kept():
    s = draw(LOGITS, SamplerSettings(temperature=1.0, top_k=3, top_p=0.5), top_n=5)
    assert s.stage_names == ("temperature", "top_k", "top_p")
    assert s.top_ids.tolist()[:5] == [1, 3, 4, 2, 0]
    assert s.kept.tolist() == [[True] * 5, [True, True, True, False, False], [True, True, False, False, False]]
    assert s.kept_counts.tolist() == [5, 3, 2]
    assert s.final_probs.sum() == pytest.approx(1.0)
    assert s.final_probs[0] == pytest.approx(0.4 / 0.7, rel=1e-5)


def test_rank_logprob_and_entropy_are_of_the_raw_distribution():
    p = softmax(LOGITS)
    s = draw(LOGITS, SamplerSettings(temperature=1.0), u=0.99)
    assert s.token == 4 and s.rank == 2
    assert s.raw_logprob == pytest.approx(math.log(0.15), rel=1e-5)
    assert s.entropy == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-5)


def test_no_finite_logit_is_a_clear_error():
    with pytest.raises(NoValidTokenError, match="NaN"):
        draw(np.full(5, np.nan), SamplerSettings())


@pytest.mark.parametrize(("kw", "msg"), [({"temperature": -0.1}, "temperature must be a number from 0 to 2"),
                                         ({"top_p": 1.5}, "top_p"), ({"top_k": -1}, "top_k"),
                                         ({"seed": -3}, "seed"), ({"stop": ("",)}, "stop")])
def test_out_of_range_settings_are_refused_with_their_range(kw, msg):
    with pytest.raises(SettingsError, match=msg):
        SamplerSettings(**kw)


def test_resample_matches_the_full_logits_when_the_kept_set_is_recorded():
    rng = np.random.default_rng(3)
    x = (rng.normal(size=2000) * 2).astype(np.float32)
    full = draw(x, SamplerSettings(temperature=1.0), u=0.3, top_n=20)
    for s in [SamplerSettings(temperature=0.5, top_k=50), SamplerSettings(temperature=1.3, top_k=200, top_p=0.8),
              SamplerSettings(temperature=0), SamplerSettings(temperature=0.9, min_p=0.2, order="temperature-last"),
              SamplerSettings(temperature=1.0, top_k=100, repetition_penalty=1.5, presence_penalty=1.0)]:
        for u in (0.01, 0.37, 0.93):
            h = History.start(NUMPY, len(x), [int(full.top_ids[0]), int(full.top_ids[5])])
            h.add(NUMPY, np.array([int(full.top_ids[1])]))
            want = draw(x, s, u=u, history=h if s.uses_penalties else None)
            got = resample(full.top_ids, full.top_logits, s, u,
                           context_ids=[int(full.top_ids[0]), int(full.top_ids[5])],
                           generated_ids=[int(full.top_ids[1])])
            assert got.token == want.token and got.rank == want.rank
            assert got.prob == pytest.approx(want.prob, rel=1e-4)
            assert got.top_ids[:20].tolist() == want.top_ids[:20].tolist()
            np.testing.assert_allclose(got.final_probs, want.final_probs, rtol=1e-4, atol=1e-7)


extreme = st.one_of(st.sampled_from([-np.inf, np.inf, np.nan, 1e30, -1e30, 0.0, 88.0, -88.0]),
                    st.floats(-50, 50, width=32))
any_settings = st.builds(
    SamplerSettings,
    temperature=st.sampled_from([0.0, 0.01, 0.5, 1.0, 2.0]), top_k=st.integers(0, 12),
    top_p=st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]), min_p=st.sampled_from([0.0, 0.05, 0.5, 1.0]),
    repetition_penalty=st.sampled_from([0.5, 1.0, 2.0]), frequency_penalty=st.sampled_from([-2.0, 0.0, 2.0]),
    presence_penalty=st.sampled_from([-2.0, 0.0, 2.0]), order=st.sampled_from(list(StageOrder)),
)


@settings(max_examples=300, deadline=None)
@given(logits=st.lists(extreme, min_size=1, max_size=12), s=any_settings, u=st.floats(0, 1, exclude_max=True),
       seen=st.lists(st.integers(0, 11), max_size=5))
def test_fuzz_never_nan_never_empty_always_a_kept_token(logits, s, u, seen):
    x = np.asarray(logits, dtype=np.float32)
    if not (x > -1e9).any():
        with pytest.raises(NoValidTokenError):
            draw(x, s, u)
        return
    h = History.start(NUMPY, len(x), [t for t in seen if t < len(x)])
    out = draw(x, s, u, history=h)
    assert 0 <= out.token < len(x)
    assert np.isfinite(out.final_probs).all() and np.isfinite([out.prob, out.entropy, out.final_entropy]).all()
    assert out.prob > 0 and out.kept_counts.min() >= 1
    assert np.isclose(out.final_probs.sum(), 1.0, atol=1e-4) or len(x) > 20
    kept_by_all = out.kept.all(axis=0) if len(out.stage_names) else np.ones(len(out.top_ids), bool)
    pos = int(np.flatnonzero(out.top_ids == out.token)[0])
    assert kept_by_all[pos]


# --- the record: every stage's input, output, kept flags and threshold ---------------------------------------

ALL_FILTERS = SamplerSettings(temperature=0.5, top_k=12, top_p=0.8, min_p=0.3)


def stage_logits(x: np.ndarray, s: SamplerSettings, history: History | None = None) -> list[np.ndarray]:
    """Each stage's input in order, then the final logits, by applying the stages one by one."""
    xs = [np.asarray(x, dtype=np.float32)]
    if history is not None:
        xs.append(apply_penalties(NUMPY, xs[0], s, history.context, history.generated))
    for _, fn in make_stages(s, len(x)):
        xs.append(fn(NUMPY, xs[-1], NUMPY.f32([0.5, 0.5]), None).x)
    return xs


def top_p_order(x: np.ndarray) -> np.ndarray:
    """Token ids in top-p's order: value descending, ties to the lower id."""
    return np.lexsort((np.arange(len(x)), -x.astype(np.float64)))


@pytest.mark.parametrize("order", list(StageOrder))
@pytest.mark.parametrize("seed", range(5))
def test_each_stage_records_what_it_received_left_kept_and_cut_at(order, seed):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=400) * 2.5).astype(np.float32)
    s = ALL_FILTERS.with_(order=order)
    out = draw(x, s, u=float(rng.random()))
    xs = stage_logits(x, s)
    ids = out.top_ids[:20]
    assert out.probs.shape == (len(out.stage_names) + 1, 20) and out.kept.shape == (len(out.stage_names), 20)
    for row, xi in enumerate(xs):  # row 0: raw; row s + 1: after stage s
        np.testing.assert_allclose(out.probs[row], softmax(xi)[ids], rtol=2e-6, atol=1e-9)
    np.testing.assert_array_equal(out.final_probs, out.probs[-1])
    for i, name in enumerate(out.stage_names):
        p_in = softmax(xs[i])
        assert out.kept[i].tolist() == np.isfinite(xs[i + 1][ids]).tolist()
        assert out.kept_counts[i] == np.isfinite(xs[i + 1]).sum()
        line = out.thresholds[i]
        if name == "temperature":
            assert math.isnan(line)
        elif name == "top_k":
            assert line == np.sort(p_in)[-s.top_k]  # the k-th kept token's probability in its input
        elif name == "min_p":
            assert line == pytest.approx(s.min_p * p_in.max(), rel=1e-5)
        else:
            assert name == "top_p" and line == np.float32(s.top_p)
        if name in ("top_k", "min_p"):  # the line is on the probabilities the stage received
            assert (out.probs[i][out.kept[i]] >= line * (1 - 1e-5)).all()
            assert (out.probs[i][~out.kept[i]] <= line * (1 + 1e-5)).all()


@pytest.mark.parametrize("order", list(StageOrder))
def test_top_p_records_the_running_mass_it_cut_on_in_its_own_order(order):
    rng = np.random.default_rng(7)
    x = (rng.normal(size=300) * 2).astype(np.float32)
    x[[5, 9, 40]] = x.max() - 0.5  # a tie among the leaders: top-p orders it by id
    h = History.start(NUMPY, 300, [int(np.argmax(x)), 3, 3])  # penalties reorder the candidates
    s = ALL_FILTERS.with_(order=order, top_p=0.7, min_p=0.0, repetition_penalty=1.6, presence_penalty=0.5)
    out = draw(x, s, u=0.4, history=h)
    assert out.stage_names[0] == "penalties"
    k = out.stage_names.index("top_p")
    x_in = stage_logits(x, s, History.start(NUMPY, 300, [int(np.argmax(x)), 3, 3]))[k]
    order_ids = top_p_order(x_in)
    mass = np.cumsum(softmax(x_in)[order_ids])
    position = np.argsort(order_ids)
    ids = out.top_ids[:20]
    np.testing.assert_allclose(out.top_p_cumulative, mass[position[ids]], rtol=1e-5)
    before = out.top_p_cumulative - out.probs[k]  # the mass ahead of each candidate
    assert out.kept[k].tolist() == (before < s.top_p).tolist()


def test_top_p_cumulative_after_top_k_is_renormalized():
    x = np.log(np.array([0.4, 0.3, 0.2, 0.1], dtype=np.float32))
    out = draw(x, SamplerSettings(temperature=1.0, top_k=2, top_p=0.9, order="temperature-last"), top_n=4)
    assert out.stage_names == ("top_k", "top_p", "temperature")
    np.testing.assert_allclose(out.top_p_cumulative, [4 / 7, 1.0, 1.0, 1.0], rtol=1e-6)


def test_the_issue_min_p_after_temperature_cuts_on_the_tempered_distribution():
    # T = 0.5, min-p 0.3: a token the core cut is below the recorded line, which is in min-p's input space
    rng = np.random.default_rng(11)
    x = (rng.normal(size=200) * 1.2).astype(np.float32)
    out = draw(x, SamplerSettings(temperature=0.5, min_p=0.3), top_n=20)
    t, m = out.stage_names.index("temperature"), out.stage_names.index("min_p")
    assert (t, m) == (0, 1)
    cut = ~out.kept[m]
    assert cut.any() and (out.probs[m][cut] < out.thresholds[m]).all()
    assert (out.probs[m] != out.probs[0]).any()  # raw probabilities are another space: the old chart's mistake


def test_penalties_are_a_recorded_stage_without_a_threshold():
    x = np.array([2.0, 1.0, 0.5, 0.0], dtype=np.float32)
    h = History.start(NUMPY, 4, [0])
    out = draw(x, SamplerSettings(temperature=1.0, repetition_penalty=2.0), history=h, top_n=4)
    assert out.stage_names == ("penalties", "temperature") and math.isnan(out.thresholds[0])
    np.testing.assert_allclose(out.probs[1], softmax(np.array([1.0, 1.0, 0.5, 0.0]))[[0, 1, 2, 3]], rtol=1e-6)
    assert out.kept.all()


def test_the_record_is_compact():
    out = draw(np.random.default_rng(0).normal(size=5000).astype(np.float32), ALL_FILTERS)
    assert out.top_ids.dtype == np.int32 and out.values.dtype == np.float32 and out.kept.dtype == bool
    arrays = [getattr(out, f) for f in out.__slots__ if isinstance(getattr(out, f), np.ndarray)]
    assert len(arrays) == 3 and not hasattr(out, "__dict__")


def test_a_partial_record_has_what_the_server_reported_and_nothing_else():
    p = Sample.partial(7, math.log(0.6), [7, 2, 9], [math.log(0.6), math.log(0.3), math.log(0.1)])
    assert p.is_partial and p.reported == "final" and p.stage_names == () and p.u is None
    assert p.prob == pytest.approx(0.6) and p.raw_logprob is None and p.rank is None
    assert p.entropy is None and p.raw_lse is None and p.top_logits is None and p.top_p_cumulative is None
    assert p.raw_probs is None and p.final_probs.tolist() == pytest.approx([0.6, 0.3, 0.1])
    assert p.kept.shape == (0, 3) and p.thresholds.size == 0 and p.cut_by(0) is None
    raw = Sample.partial(2, math.log(0.3), [7, 2, 9], [math.log(0.6), math.log(0.3), math.log(0.1)], "raw")
    assert raw.rank == 1 and raw.prob is None and raw.final_probs is None
    assert raw.raw_logprob == pytest.approx(math.log(0.3)) and raw.raw_probs.tolist() == pytest.approx([0.6, 0.3, 0.1])


def test_resample_makes_the_same_record_through_the_same_pipeline():
    rng = np.random.default_rng(4)
    x = (rng.normal(size=3000) * 2).astype(np.float32)
    recorded = draw(x, SamplerSettings(temperature=1.0), u=0.6)
    s = ALL_FILTERS.with_(order="temperature-last", top_k=40)
    want = draw(x, s, u=0.6)
    got = resample(recorded.top_ids, recorded.top_logits, s, 0.6)
    assert got.stage_names == want.stage_names and got.token == want.token
    np.testing.assert_array_equal(got.kept, want.kept)
    np.testing.assert_allclose(got.probs[1:], want.probs[1:], rtol=1e-4, atol=1e-7)  # after top-k: exact
    np.testing.assert_allclose(got.thresholds[1:], want.thresholds[1:], rtol=1e-4)
    np.testing.assert_allclose(got.top_p_cumulative, want.top_p_cumulative, rtol=1e-4)


def executors() -> list:
    """The other executors of the one pipeline, where installed (MLX twice: records on the host, on the device)."""
    from backends import installed

    out = []
    if installed("torch"):
        import torch

        from backends.torch.backend import TorchOps

        out.append(pytest.param(TorchOps(torch.device("cpu")), id="torch"))
    if installed("mlx"):
        from backends.mlx.backend import MlxOps

        device = MlxOps()
        device.host_record = False
        out += [pytest.param(MlxOps(), id="mlx"), pytest.param(device, id="mlx-device-record")]
    return out


@pytest.mark.parametrize("ops", executors())
@pytest.mark.parametrize("order", list(StageOrder))
def test_every_executor_records_what_the_reference_records(ops, order):
    rng = np.random.default_rng(2)
    s = ALL_FILTERS.with_(order=order, top_k=30, min_p=0.05, presence_penalty=0.7)
    for _ in range(2):
        x = (rng.normal(size=2000) * 3).astype(np.float32)
        x[rng.integers(0, 2000, 4)] = x.max()  # ties at the top
        u = float(rng.random())
        want = draw(x, s, u=u, history=History.start(NUMPY, 2000, [1, 2, int(np.argmax(x))]))
        got = sample(ops, ops.f32(x), s, u, history=History.start(ops, 2000, [1, 2, int(np.argmax(x))]))
        assert got.stage_names == want.stage_names and got.token == want.token
        np.testing.assert_array_equal(got.top_ids, want.top_ids)
        np.testing.assert_array_equal(got.kept, want.kept)
        np.testing.assert_allclose(got.probs, want.probs, rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(got.thresholds, want.thresholds, rtol=1e-4)
        np.testing.assert_allclose(got.top_p_cumulative, want.top_p_cumulative, rtol=1e-4)


def test_resample_keeps_the_whole_vocabulary_s_raw_numbers_of_the_step_it_redraws():
    rng = np.random.default_rng(6)
    x = (rng.normal(size=3000) * 0.8).astype(np.float32)  # a flat tail: the top 256 hold only part of the mass
    recorded = draw(x, SamplerSettings(temperature=1.0), u=0.2)
    s = SamplerSettings(temperature=0.8, top_k=50)
    want = draw(x, s, u=0.2)
    got = resample(recorded.top_ids, recorded.top_logits, s, 0.2, recorded=recorded)
    assert recorded.probs[0].sum() < 0.5  # over the recorded logits alone, the raw row would be far larger
    np.testing.assert_array_equal(got.probs[0], recorded.probs[0])
    assert got.entropy == recorded.entropy and got.raw_lse == recorded.raw_lse
    assert got.raw_logprob == pytest.approx(want.raw_logprob, abs=1e-5) and got.token == want.token
    assert got.stage_names == ("temperature", "top_k")
    np.testing.assert_allclose(got.probs[2:], want.probs[2:], rtol=1e-4, atol=1e-7)  # after top-k: exact


def test_penalties_keep_the_step_in_float32():
    """Found by the fuzz test in a fresh clone: numpy made the presence mask × penalty a float64, so a token at
    p = 4e-77 (0 in float32, as every other backend computes it) could be drawn at u = 0."""
    s = SamplerSettings(temperature=0.5, frequency_penalty=-2.0, presence_penalty=-2.0)
    out = draw(np.array([0.0, 88.0], dtype=np.float32), s, 0.0, history=History.start(NUMPY, 2, []))
    assert out.token == 1 and out.prob == 1.0


# --- the record against its definitions, on random logits and settings ----------------------------------------

def log_softmax64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    m = x[np.isfinite(x)].max()
    return x - m - np.log(np.exp(x - m).sum())


def entropy64(x: np.ndarray) -> float:
    lp = log_softmax64(x)
    p = np.exp(lp)
    return float(-(p[p > 0] * lp[p > 0]).sum())


ordinary = st.one_of(st.floats(-20, 20, width=32), st.sampled_from([-np.inf, 0.0, 3.0]))  # -inf and ties
record_settings = st.builds(
    SamplerSettings,
    temperature=st.sampled_from([0.0, 0.3, 0.8, 1.0, 1.7]), top_k=st.integers(0, 40),
    top_p=st.sampled_from([0.2, 0.6, 0.95, 1.0]), min_p=st.sampled_from([0.0, 0.02, 0.3]),
    repetition_penalty=st.sampled_from([1.0, 1.4]), presence_penalty=st.sampled_from([0.0, 0.8]),
    order=st.sampled_from(list(StageOrder)),
)


@settings(max_examples=150, deadline=None)
@given(logits=st.lists(ordinary, min_size=2, max_size=300), s=record_settings, u=st.floats(0, 1, exclude_max=True),
       seen=st.lists(st.integers(0, 299), max_size=6), top_n=st.integers(1, 30))
def test_the_record_is_each_stage_s_softmax_at_the_top_raw_ids(logits, s, u, seen, top_n):
    """Every number of the record, against its definition computed directly (in float64) from each stage's logits:
    the one-pass record (all rows normalized together, probabilities gathered at the ids) changes nothing."""
    x = np.asarray(logits, dtype=np.float32)
    if not np.isfinite(x).any():
        return
    h = lambda: History.start(NUMPY, len(x), [t for t in seen if t < len(x)])
    out = draw(x, s, u, history=h(), top_n=top_n)
    xs = stage_logits(x, s, h() if s.uses_penalties else None)
    order = top_p_order(x)  # the raw order: value descending, ties to the lower id
    n = min(top_n, len(x))
    k = min(256, len(x))
    assert out.top_ids.tolist() == order[:k].tolist() and out.top_logits.tolist() == x[order[:k]].tolist()
    ids = order[:n]
    assert out.rank == int(np.flatnonzero(order == out.token)[0])
    for row, xi in enumerate(xs):
        np.testing.assert_allclose(out.probs[row], np.exp(log_softmax64(xi))[ids], rtol=1e-5, atol=1e-8)
    for i, name in enumerate(out.stage_names):
        assert out.kept[i].tolist() == np.isfinite(xs[i + 1][ids]).tolist()
        assert out.kept_counts[i] == np.isfinite(xs[i + 1]).sum()
        p_in = np.exp(log_softmax64(xs[i]))
        want = {"top_k": np.sort(p_in)[-s.top_k] if name == "top_k" else 0, "min_p": s.min_p * p_in.max(),
                "top_p": s.top_p}.get(name, math.nan)
        np.testing.assert_allclose(out.thresholds[i], want, rtol=1e-5)
        if name == "top_p":
            mass = np.cumsum(p_in[top_p_order(xs[i])])[np.argsort(top_p_order(xs[i]))]
            np.testing.assert_allclose(out.top_p_cumulative, mass[ids], rtol=1e-5, atol=1e-7)
    assert out.raw_logprob == pytest.approx(log_softmax64(x)[out.token], rel=1e-5, abs=1e-5)
    assert out.prob == pytest.approx(np.exp(log_softmax64(xs[-1])[out.token]), rel=1e-5)
    assert out.raw_lse == pytest.approx(float(np.logaddexp.reduce(x.astype(np.float64))), rel=1e-6, abs=1e-5)
    assert out.entropy == pytest.approx(entropy64(x), rel=1e-4, abs=2e-5)
    assert out.final_entropy == pytest.approx(entropy64(xs[-1]), rel=1e-4, abs=2e-5)
