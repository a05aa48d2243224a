"""The think span on hand-made token ids: labels one token at a time, spans, the figures per span, and a trace file
that keeps them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.core.record.record import Sample, StepTrace
from app.core.record.span_stats import confidence, span_stats, step_series, varentropy
from app.core.record.spans import Markers, Span, SpanTracker, label_all, spans
from app.core.record.trace import RunTrace
from app.core.settings import SamplerSettings

TAGS = Markers("think-tags", open=(1,), close=(2,), answer=(3, 3), tool_open=(4,), tool_close=(5,))
CHANNELS = Markers("gpt-oss", open=(7, 8, 9), close=(6,))  # <|channel|> analysis <|message|> ... <|end|>


def test_a_think_span_is_labelled_from_its_open_marker_to_its_close_marker_inclusive():
    ids = [10, 1, 11, 12, 2, 3, 3, 13, 4, 14, 5, 15]
    assert label_all(TAGS, [], ids) == ["answer", "think", "think", "think", "think", "answer", "answer", "answer",
                                        "tool", "tool", "tool", "answer"]


def test_a_prompt_that_opens_the_span_starts_the_run_inside_it():
    t = SpanTracker.start(TAGS, [20, 21, 1, 22])
    assert t.thinking and t.count == 1
    assert [t.push(i) for i in (23, 2, 24)] == ["think", "think", "answer"]
    assert t.think_tokens == 2  # the prompt's think token, the run's 23; its close left out


def test_a_marker_of_several_tokens_is_in_its_span_from_the_token_that_completes_it():
    assert label_all(CHANNELS, [], [7, 8, 9, 30, 31, 6, 32]) == [
        "answer", "answer", "think", "think", "think", "think", "answer"]
    assert label_all(CHANNELS, [], [7, 8, 30]) == ["answer"] * 3  # an unfinished marker opens nothing


def test_spans_group_equal_labels_and_skip_unlabelled_steps():
    assert spans(["answer", "think", "think", "answer"]) == [Span("answer", 0, 1), Span("think", 1, 3),
                                                             Span("answer", 3, 4)]
    assert spans(["", ""]) == []
    assert len(Span("think", 2, 7)) == 5


def test_markers_survive_a_round_trip_through_plain_data():
    assert Markers.from_dict(TAGS.to_dict()) == TAGS
    assert TAGS.closing == (2, 3, 3)


def _full(logits: list[float]) -> Sample:
    """A full record over a tiny vocabulary whose top logits are `logits` (descending): its entropy is exact."""
    x = np.asarray(logits, dtype=np.float64)
    lse = float(np.log(np.exp(x).sum()))
    p = np.exp(x - lse)
    h = float(-(p * (x - lse)).sum())
    n = len(logits)
    return Sample.record(token=0, rank=0, u=0.5, stage_names=(), top_ids=np.arange(n), top_logits=x,
                         probs=p[None, :], kept=np.zeros((0, n), dtype=bool), thresholds=np.zeros(0),
                         kept_counts=np.zeros(0), top_p_cumulative=None, prob=float(p[0]),
                         raw_logprob=float(x[0] - lse), entropy=h, final_entropy=h, raw_lse=lse)


def test_confidence_is_deepconf_s_negative_mean_top_k_log_probability_with_k_recorded():
    s = _full([2.0, 1.0, 0.0, -1.0])
    lp = np.array([2.0, 1.0, 0.0, -1.0]) - math.log(sum(math.exp(v) for v in (2.0, 1.0, 0.0, -1.0)))
    assert confidence(s, k=2) == pytest.approx((-lp[:2].mean(), 2))
    assert confidence(s, k=20) == pytest.approx((-lp.mean(), 4))  # fewer recorded than k: k says so
    assert confidence(_full([0.0] * 4), k=4)[0] == pytest.approx(math.log(4))  # uniform: the least confident


def test_varentropy_is_the_variance_of_the_surprise_and_zero_for_a_uniform_distribution():
    x = np.array([3.0, 1.0, 0.5, -2.0])
    p = np.exp(x - np.log(np.exp(x).sum()))
    surprise = -np.log(p)
    assert varentropy(_full(x.tolist())) == pytest.approx(float((p * surprise**2).sum() - (p * surprise).sum() ** 2),
                                                         rel=1e-5)
    assert varentropy(_full([1.0] * 5)) == pytest.approx(0.0, abs=1e-6)
    reported = Sample.partial(0, -0.1, [0, 1], [math.log(0.5), math.log(0.5)])
    assert varentropy(reported) == pytest.approx(0.0, abs=1e-6) and confidence(reported)[1] == 2
    banned = Sample.partial(0, -0.1, [0, 1, 2], [math.log(0.5), math.log(0.5), -math.inf])  # (a token banned: p 0)
    assert varentropy(banned) == pytest.approx(0.0, abs=1e-6)  # it adds nothing, and no NaN


def _steps(labels: list[str]) -> list[StepTrace]:
    out = []
    for i, label in enumerate(labels):
        s = _full([4.0, 0.0, 0.0] if label == "answer" else [1.0, 0.9, 0.8])
        out.append(StepTrace(i, s, "x", ("a", "b", "c"), 0.0, label, "budget" if i == 2 else ""))
    return out


def test_each_span_has_its_mean_entropy_varentropy_and_confidence():
    steps = _steps(["think", "think", "think", "answer", "answer"])
    think, answer = span_stats(steps)
    assert (think.kind, think.start, think.end, answer.start, answer.end) == ("think", 0, 3, 3, 5)
    assert think.entropy > answer.entropy and think.confidence < answer.confidence  # unsure thinking, sure answer
    assert think.k == 3
    conf, var = step_series(steps)
    assert conf.shape == var.shape == (5,) and np.all(np.isfinite(conf))


def test_a_trace_file_keeps_each_step_s_span_and_why_it_was_forced(tmp_path):
    run = RunTrace(prompt_ids=[1], settings=SamplerSettings(think_budget=2), seed=0,
                   steps=_steps(["think", "think", "think", "answer"]))
    run.save(tmp_path / "t.jsonl")
    back = RunTrace.load(tmp_path / "t.jsonl")
    assert [(s.span, s.forced) for s in back.steps] == [("think", ""), ("think", ""), ("think", "budget"),
                                                        ("answer", "")]
    assert back.settings.think_budget == 2
    assert back.steps[0].to_json()["span"] == "think" and back.steps[3].to_json()["forced"] is None


def test_exports_carry_the_spans_and_the_budget_s_cut():
    from app.core.record.export import steps_csv, thinking, to_html

    run = RunTrace(prompt_ids=[1], settings=SamplerSettings(think_budget=2), seed=0,
                   steps=_steps(["think", "think", "think", "answer"]))
    lines = steps_csv(run).splitlines()
    assert lines[0].endswith(",span,forced") and lines[3].endswith(",think,budget") and lines[4].endswith(",answer,")
    page = to_html(run)
    assert page.count('class="think"') == 3 and page.count('class="answer"') == 1
    assert thinking(run).startswith("think 3 tokens, H ") and thinking(run).endswith("think budget 2 (hard), cut at "
                                                                                     "step 2")
