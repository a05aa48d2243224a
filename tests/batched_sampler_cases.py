"""What the batched sampler's tests share: fuzzed settings over every stage in any order, and the check that a
batched step (`start_samples`) gives each row exactly what its own step (`start_sample`) gives."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from app.core.record.record import Sample
from app.core.sampler.batch_sampling import start_samples
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import start_sample
from app.core.settings import STAGES, SamplerSettings

VOCAB = 300
PROMPTS = ([1, 2, 3, 1, 2], [4, 4, 5], [7, 8, 9, 7, 8, 9, 7], [10])  # one per row: the rows' histories differ

any_stages = st.builds(
    SamplerSettings,
    temperature=st.sampled_from([0.0, 0.7, 1.3]), top_k=st.sampled_from([0, 1, 5, 40]),
    top_p=st.sampled_from([1.0, 0.9, 0.4, 0.0]), min_p=st.sampled_from([0.0, 0.05]),
    repetition_penalty=st.sampled_from([1.0, 1.3]), frequency_penalty=st.sampled_from([0.0, 0.4]),
    presence_penalty=st.sampled_from([0.0, 0.5]), chain=st.permutations(STAGES),
    typical_p=st.sampled_from([1.0, 0.9]), top_n_sigma=st.sampled_from([0.0, 1.5]),
    xtc_probability=st.sampled_from([0.0, 0.6]), dynatemp_range=st.sampled_from([0.0, 0.5]),
    epsilon_cutoff=st.sampled_from([0.0, 3e-3]), eta_cutoff=st.sampled_from([0.0, 3e-3]),
    dry_multiplier=st.sampled_from([0.0, 0.8]), mirostat_tau=st.sampled_from([0.0, 4.0]),
    logit_bias=st.sampled_from([(), ((3, 5.0), (7, -100.0))]),
)


def step_logits(rng: np.random.Generator, rows: int, vocab: int = VOCAB) -> np.ndarray:
    """(rows, vocab) float32 logits with ties at the top and a few -inf."""
    x = (rng.standard_normal((rows, vocab)) * 3).astype(np.float32)
    for row in x:
        row[rng.integers(0, vocab, 3)] = row.max()
        row[rng.integers(0, vocab, 2)] = -np.inf
    return x


def histories(ops, s: SamplerSettings, rows: int, vocab: int = VOCAB) -> list[History | None]:
    if not s.needs_history:
        return [None] * rows
    return [History.start(ops, vocab, PROMPTS[i % len(PROMPTS)], breakers=frozenset({9})) for i in range(rows)]


def assert_batch_equals_rows(ops, s: SamplerSettings, seed: int, rows: int = 3, steps: int = 3,
                             record: bool = True, top_n: int = 20, vocab: int = VOCAB) -> None:
    """`steps` steps of `rows` rows, each row's outcome and history after it equal to its own step's, bit for bit;
    the first step's logits are one row shared by all (as after one prefill)."""
    rng = np.random.default_rng(seed)
    mine, theirs = histories(ops, s, rows, vocab), histories(ops, s, rows, vocab)
    for step in range(steps):
        x = step_logits(rng, 1 if step == 0 else rows, vocab)
        us = rng.random(rows).tolist()
        dx = ops.f32(x)
        want = [start_sample(ops, dx[min(i, len(x) - 1)], s, u, history=h, top_n=top_n, record=record).result()
                for i, (u, h) in enumerate(zip(us, theirs, strict=True))]
        pending = start_samples(ops, dx, s, us, histories=mine, top_n=top_n, record=record)
        assert ops.numpy(pending.tokens).reshape(-1).tolist() == [token(w) for w in want]
        got = pending.results()
        for g, w in zip(got, want, strict=True):
            assert type(g) is type(w) and g == w, (g, w)
        for a, b in zip(mine, theirs, strict=True):
            assert_same_history(ops, a, b)


def token(out: Sample | int) -> int:
    return out.token if isinstance(out, Sample) else out


def assert_same_history(ops, a: History | None, b: History | None) -> None:
    if a is None or b is None:
        assert a is b
        return
    for name in ("context", "generated", "mu"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert np.array_equal(ops.numpy(x), ops.numpy(y)), name
    assert a.host_ids(ops) == b.host_ids(ops)
