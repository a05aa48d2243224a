"""The rejection rule and its records, on hand-made distributions (no model): the first token it emits is
distributed as the target's distribution whatever the draft's, greedy keeps exactly the target's argmax, and a
seeded rule gives the same verdicts. Plus the picker's tokenizer check, on files."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from app.core.decoding.speculative.rounds import check_settings, draw, final_probs, u_for, verify
from app.core.events import Request
from app.core.models.catalog import ModelEntry
from app.core.models.drafts import (
    BUILTIN_DRAFT_PATH,
    draft_candidates,
    offered_drafts,
    tokenizer_digest,
)
from app.core.models.sources import BUILTIN_DRAFT_LABEL, BUILTIN_PATH
from app.core.record.spec_record import DraftToken, SpecRound, SpecStats
from app.core.runs.speculative_run import check_request
from app.core.settings import SamplerSettings, SettingsError

V = 6


def distribution(rng: np.random.Generator, sharp: float = 1.0) -> np.ndarray:
    p = rng.dirichlet(np.full(V, sharp)).astype(np.float32)
    return p / p.sum()


def first_token(p_rows: np.ndarray, q_rows: np.ndarray, seed: int) -> int:
    """One round's first emitted token: drafts drawn from q (the draft's rows), judged by the rule."""
    rng = np.random.default_rng(seed)
    drafts = [draw(q, rng.random()) for q in q_rows]
    v = verify(p_rows, q_rows, drafts, rng)
    return drafts[0] if v.judged and v.judged[0] else v.token


@pytest.mark.parametrize("case", range(2))
def test_the_first_token_is_distributed_as_the_targets_whatever_the_draft(case):
    rng = np.random.default_rng(case)
    p_rows = np.stack([distribution(rng) for _ in range(3)])  # k = 2: two drafts, three target rows
    q_rows = np.stack([distribution(rng, 0.3) for _ in range(2)])  # a sharper, different draft
    n = 8000
    counts = Counter(first_token(p_rows, q_rows, seed) for seed in range(n))
    freq = np.array([counts[t] / n for t in range(V)])
    assert 0.5 * np.abs(freq - p_rows[0]).sum() < 0.03  # seeded: the same 8,000 draws every run
    assert 0.5 * np.abs(p_rows[0] - q_rows[0]).sum() > 0.1  # (and the draft alone would be far off)


def test_greedy_keeps_a_draft_exactly_when_it_is_the_targets_argmax():
    one_hot = np.eye(V, dtype=np.float32)
    p_rows, q_rows = one_hot[[2, 4, 1]], one_hot[[2, 5]]  # the draft is right once, then wrong
    v = verify(p_rows, q_rows, [2, 5], np.random.default_rng(0))
    assert v.judged == (True, False) and v.kept == 1 and v.token == 4 and v.residual and v.p_token == 1.0
    v = verify(one_hot[[2, 4, 1]], one_hot[[2, 4]], [2, 4], np.random.default_rng(0))
    assert v.judged == (True, True) and v.kept == 2 and v.token == 1 and not v.residual


def test_a_rejection_draws_from_the_residual_never_the_rejected_token():
    p = np.array([[0.5, 0.5, 0, 0, 0, 0], [1 / 6] * 6], dtype=np.float32)
    q = np.array([[0.1, 0.9, 0, 0, 0, 0]], dtype=np.float32)  # token 1 is over-proposed: rejected at times
    outcomes = [verify(p, q, [1], np.random.default_rng(s)) for s in range(4000)]
    rejected = [v for v in outcomes if not v.judged[0]]
    assert rejected and all(v.token == 0 and v.residual and v.p_token == 1.0 for v in rejected)
    assert 0.42 < len(rejected) / 4000 < 0.47  # 1 - 0.5 / 0.9 = 0.444


def test_the_same_seed_gives_the_same_verdicts():
    rng = np.random.default_rng(9)
    p_rows, q_rows = np.stack([distribution(rng) for _ in range(4)]), np.stack([distribution(rng) for _ in range(3)])
    a = verify(p_rows, q_rows, [0, 1, 2], np.random.default_rng(5))
    assert a == verify(p_rows, q_rows, [0, 1, 2], np.random.default_rng(5))


def test_u_for_redraws_each_token_with_probability_above_zero():
    p = final_probs(np.array([2.0, 1.0, -1.0, 0.5, -9.0, 3.0], dtype=np.float32), SamplerSettings(top_k=4))
    assert (p > 0).sum() == 4
    for t in np.flatnonzero(p):
        assert draw(p, u_for(p, int(t))) == t


def test_stats_add_up_rounds():
    r = SpecRound(0, 0, (DraftToken(5, "a", 0.9, 0.8, True), DraftToken(6, "b", 0.5, 0.1, False),
                         DraftToken(7, "c", 0.4, 0.3, False)), 9, "d", 0.7, True, 2)
    assert r.accepted == 1 and r.rejected.token == 6
    s = SpecStats().add(r, 3).add(r, 3)
    assert (s.rounds, s.drafted, s.accepted, s.tokens, s.target_forwards, s.draft_forwards) == (2, 6, 2, 4, 2, 6)
    assert s.acceptance_rate == 2 / 6 and s.tokens_per_target_forward == 2.0
    assert SpecStats().acceptance_rate is None


def test_xtc_is_refused_its_distribution_is_a_coin_flip():
    with pytest.raises(SettingsError, match="XTC"):
        check_settings(SamplerSettings(xtc_probability=0.5))
    check_settings(SamplerSettings(temperature=0.7, top_p=0.9, repetition_penalty=1.1))


@pytest.mark.parametrize(("changes", "named"), [({"mirostat_tau": 5.0}, "set mirostat τ to 0"),
                                                ({"dry_multiplier": 0.8}, "set DRY multiplier to 0"),
                                                ({"mirostat_tau": 5.0, "dry_multiplier": 0.8},
                                                 "mirostat or DRY's state .* set mirostat τ and DRY multiplier to 0")])
def test_mirostat_and_dry_are_refused_their_state_runs_from_token_to_token(changes: dict, named: str):
    with pytest.raises(SettingsError, match=named) as e:
        check_settings(SamplerSettings(**changes))
    assert "\n" not in str(e.value)


def test_the_picker_offers_folders_whose_tokenizer_files_are_the_targets(tmp_path: Path):
    def folder(name: str, tokenizer: str) -> Path:
        f = tmp_path / name
        f.mkdir()
        (f / "tokenizer.json").write_text(tokenizer)
        (f / "config.json").write_text("{}")
        return f

    target, same, other = folder("target", '{"v": 1}'), folder("same", '{"v": 1}'), folder("other", '{"v": 2}')
    shutil.copytree(target, tmp_path / "copy")
    entries = [ModelEntry(str(p), str(p), 0, "llama", ("torch",), None) for p in
               (target, same, other, tmp_path / "copy", tmp_path / "missing")]
    assert [e.path for e in draft_candidates(target, entries)] == [str(same), str(tmp_path / "copy")]
    assert tokenizer_digest(tmp_path / "missing") is None


@pytest.mark.parametrize("request_", [Request(draft_k=9), Request(draft_k=-1), Request(draft_k=4, n=2),
                                      Request(draft_k=4, force=3),
                                      Request(draft_k=2, settings=SamplerSettings(xtc_probability=0.1))])
def test_what_a_speculative_run_cannot_do_is_refused_before_it_starts(request_):
    with pytest.raises(SettingsError):
        check_request(request_)
    check_request(Request(draft_k=0))  # adaptive


def test_the_built_in_model_is_offered_its_shipped_draft_which_tokenizes_as_it_does():
    [entry] = offered_drafts("builtin", [])
    assert entry.path == str(BUILTIN_DRAFT_PATH) and entry.label == BUILTIN_DRAFT_LABEL
    assert tokenizer_digest(BUILTIN_DRAFT_PATH) == tokenizer_digest(BUILTIN_PATH)
    assert offered_drafts(str(BUILTIN_DRAFT_PATH), []) == []  # (a draft needs entries to find its own kin)
