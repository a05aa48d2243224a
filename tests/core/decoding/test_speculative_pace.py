"""An adaptive speculative run's pace (`speculative/pace.py`) on hand-made measurements (no model, no clock): it
drafts the length expected to save most, pauses where no length pays and says why, probes now and then and resumes
when a probe pays, and measures a plain step again while it drafts."""

from __future__ import annotations

from app.core.decoding.speculative.pace import K_START, PROBE_FIRST, REMEASURE, Pace
from app.core.record.spec_record import K_MAX

PLAIN = 0.004  # seconds of a plain step


def started(pace: Pace) -> Pace:
    """Past the two plain steps a run opens with (the first, on cold caches, not measured)."""
    pace.measured(0, 0, 0.0, 3 * PLAIN)
    assert pace.k == 0 and not pace.plain  # (nothing measured yet: another plain step)
    pace.measured(0, 0, 0.0, PLAIN)
    assert pace.k == K_START
    return pace


def drafted(pace: Pace, accepted: int, draft: float, verify: float) -> int:
    """A round of the pace's k drafts, each costing `draft` and adding `verify` of a plain step; the next k."""
    k = pace.k
    pace.measured(k, accepted, k * draft * PLAIN, PLAIN + k * verify * PLAIN)
    return pace.k


def test_a_draft_that_is_never_kept_pauses_drafting_says_why_and_probes_ever_less_often():
    pace = started(Pace())
    assert drafted(pace, 0, draft=0.2, verify=0.6) == 1  # (the first verify, on new shapes, is not measured)
    assert drafted(pace, 0, draft=0.2, verify=0.6) == 0
    assert pace.note == "drafting paused: acceptance 17% does not pay"
    for _ in range(PROBE_FIRST - 1):
        pace.measured(0, 0, 0.0, PLAIN)
        assert pace.k == 0
    pace.measured(0, 0, 0.0, PLAIN)
    assert pace.k == 1  # a probe: one draft, the cheapest measurement
    assert drafted(pace, 0, draft=0.2, verify=0.6) == 0 and pace.wait == 2 * PROBE_FIRST  # it did not pay
    assert pace.note.startswith("drafting paused: acceptance ") and pace.acceptance < 0.15


def test_a_draft_that_is_kept_and_cheap_keeps_drafting_longer_rounds():
    pace = started(Pace())
    ks = [drafted(pace, pace.k, draft=0.1, verify=0.05) for _ in range(12)]
    assert ks[-1] == K_MAX and pace.note == "" and 0 not in ks
    assert pace.gain(K_MAX) > 3


def test_one_unlucky_round_early_is_not_a_verdict():
    pace = started(Pace())
    assert drafted(pace, 0, draft=0.3, verify=0.15) > 0 and pace.note == ""  # a draft that pays at 60% acceptance
    for _ in range(6):
        drafted(pace, pace.k, draft=0.3, verify=0.15)
    assert pace.note == "" and pace.acceptance > 0.6


def test_a_probe_that_pays_resumes_drafting():
    pace = started(Pace())
    drafted(pace, 0, draft=0.25, verify=0.25)
    assert drafted(pace, 0, draft=0.25, verify=0.25) == 0 and pace.note  # paused after two rounds that kept nothing
    while pace.k == 0:
        pace.measured(0, 0, 0.0, PLAIN)
    assert drafted(pace, pace.k, draft=0.25, verify=0.25) > 0 and pace.note == ""  # the probe kept its draft


def test_while_drafting_a_plain_step_is_measured_again_now_and_then():
    pace = started(Pace())
    ks = [drafted(pace, pace.k, draft=0.1, verify=0.1) for _ in range(REMEASURE + 1)]
    assert ks.count(0) == 1 and pace.note == ""  # one plain step, not a pause
    pace.measured(0, 0, 0.0, 2 * PLAIN)  # (a plain step grown dearer: drafting pays more)
    assert pace.k > 0 and len(pace.plain) == 3
