"""The metrics strip, the timeline and the prompt's count say what was measured and nothing else: a branch's cached
tokens never outnumber its prompt, one token has no prefill speed, an unreported prompt is a dash, the entropy axis
starts afresh on New, the uncertain marks sit in a row of their own; an empty prompt says what its one token is."""

from __future__ import annotations

import math

from app.core.events import Request, Step
from app.core.metrics import Metrics, prefill_rate
from app.core.record.record import SCALARS
from app.core.record.trace import Sample, StepTrace
from app.ui.charts.timeline import MARK_ROW, TimelineChart
from app.ui.formatting import token_count
from app.ui.panels.info import MetricsStrip


def text(strip: MetricsStrip, key: str) -> str:
    return strip.values[key].text().split("<b>")[-1].removesuffix("</b>")


def test_a_branch_counts_its_taken_over_steps_as_prompt_so_cached_never_exceeds_it(qtbot):
    """The issue: "11 (38 cached) + 118" while a regeneration from step 27 streamed."""
    strip = MetricsStrip()
    qtbot.addWidget(strip)
    inherited = tuple(StepTrace(i, Sample.partial(1, 0.0, [1], [0.0]), "x", ("x",), 0.0) for i in range(27))
    strip.begin(Request(prompt_ids=tuple(range(11)), inherited=inherited))
    strip.started(11 + 27, 0.01, reused=37)  # what the panel's binding passes: the prompt and the steps taken over
    strip.live(27 + 91, 20.0, 0.05, 1024)
    assert text(strip, "tokens") == "38 (37 cached) + 91"
    strip.begin(Request(prompt_ids=(1, 2, 3)))  # a root run: nothing taken over
    strip.started(3, 0.01)
    strip.live(5, 20.0, 0.05, 1024)
    assert text(strip, "tokens") == "3 + 5"


def test_one_prefilled_token_has_no_speed_and_an_unreported_prompt_is_a_dash(qtbot):
    assert prefill_rate(1, 0, 0.077) is None and prefill_rate(39, 38, 0.02) is None  # "13 tok/s" for one token
    assert prefill_rate(12, 2, 0.5) == 20.0
    strip = MetricsStrip()
    qtbot.addWidget(strip)
    strip.started(1, 0.077)
    assert text(strip, "prefill") == "—"
    strip.final(Metrics(prompt_tokens=0, generated_tokens=7))  # a server that reported no prompt tokens
    assert text(strip, "tokens") == "— + 7"
    strip.begin(Request())
    strip.started(0, None)
    strip.live(3, None, None, None)
    assert text(strip, "tokens") == "— + 3"


def test_an_empty_prompt_says_its_one_token_is_the_tokenizers():
    assert token_count(1, prompt_empty=True) == "empty prompt (1 token added by the tokenizer)"
    assert [token_count(n) for n in (1, 2, 0)] == ["1 token", "2 tokens", "0 tokens"]


def test_the_timeline_marks_uncertain_steps_in_their_own_row_and_new_resets_the_entropy_axis(qtbot):
    tl = TimelineChart()
    qtbot.addWidget(tl)
    tl.resize(700, 160)
    tl.show()
    entropies = [0.5] * 19 + [9.0]
    steps = [StepTrace(i, record_with_entropy(h), "x", ("a",), 0.0) for i, h in enumerate(entropies)]
    tl.append_steps([Step(1, st.step, st.token_id, st.text, st, 0) for st in steps])
    tl.show_step(19, steps[19])
    assert tl.marks.data["x"].tolist() == [19] and tl.marks.data["y"].tolist() == [MARK_ROW[0]]
    assert float(tl.marks.data["data"][0]) == 9.0  # its tooltip's entropy: the record's
    _, p = tl.prob.getData()
    assert p.max() <= 1.0 < MARK_ROW[0]  # above every p(drawn): nothing covers a mark
    assert tl.vb2.viewRange()[1][1] > 9.0
    tl.clear_run()  # New
    assert tl.vb2.viewRange()[1][1] < 2.0  # the entropy axis starts afresh, not at the old run's scale


def record_with_entropy(h: float) -> Sample:
    """A one-candidate partial record that reports the model's distribution, with entropy `h` set."""
    s = Sample.partial(5, math.log(0.6), [5], [math.log(0.6)], "raw")
    values = s.values.copy()
    values[SCALARS.index("entropy")] = h
    return Sample(s.token, s.rank, s.u, s.stage_names, s.top_ids, s.kept, values, s.reported)
