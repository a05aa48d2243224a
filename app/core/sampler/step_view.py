"""What the step views read of a record besides its arrays: each stage's survivors and the share of its input they
hold (`stages_kept`), the drawn token when it lies outside the candidates drawn (`drawn_outside`), and a preview's
re-sample with the numbers of it that are approximate (`make_preview`). Reads records; runs no stage of its own
(a preview is `sampling.resample`, the pipeline's own code). No Qt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from app.core.record.record import Sample
from app.core.record.trace import RunTrace
from app.core.sampler.sampling import RECORD_K, resample
from app.core.settings import SamplerSettings

RAW_ROW = "model (raw)"  # the name of row 0 among a preview's approximate rows


@dataclass(frozen=True, slots=True)
class StageKept:
    """One stage as it ran: how many tokens of the vocabulary it kept (None: it cuts nothing, as temperature) and
    the share of its input's probability they hold (None where some of them lie outside the recorded top-N)."""

    name: str
    kept: int | None
    mass: float | None


@dataclass(frozen=True, slots=True)
class DrawnOutside:
    """The drawn token, not among the candidates drawn: its rank under the model and its two probabilities (None
    where the record holds none)."""

    rank: int | None
    raw: float | None
    final: float | None


@dataclass(frozen=True, slots=True)
class Preview:
    """A step re-sampled under other settings, over the `RECORD_K` raw logits the step recorded and nothing else:
    every row, line and mark comes from this one record. `approximate` names its rows that the unrecorded tail would
    change (row 0 is `RAW_ROW`, a stage's output row its name); `recorded_mass` is the share of the model's
    probability the recorded logits hold."""

    sample: Sample
    approximate: tuple[str, ...]
    recorded_mass: float


def stages_kept(s: Sample) -> list[StageKept]:
    """Each stage of a full record with its survivors (`kept_counts`) and their mass in its input; [] if partial.
    Steering, which acts in the forward before every stage and cuts nothing, leads where it ran (`Sample.steer`)."""
    out, counts = [StageKept("steering", None, None)] if s.steer is not None else [], s.kept_counts.tolist()
    for i, name in enumerate(s.stage_names):
        kept = s.kept[i]  # (N,)
        left_all = kept.all() if i == 0 else counts[i] >= counts[i - 1]  # what it received, it passed on
        cuts = bool(math.isfinite(float(s.thresholds[i])) or not left_all)
        whole = int(kept.sum()) == counts[i]  # every survivor is a recorded candidate
        mass = min(1.0, float(np.sum(s.probs[i][kept], dtype=np.float64))) if cuts and whole else None
        out.append(StageKept(name, counts[i] if cuts else None, mass))
    return out


def drawn_outside(s: Sample, n: int) -> DrawnOutside | None:
    """The drawn token's numbers when it is not among the first `n` candidates; None when it is."""
    if s.token in s.top_ids[:n].tolist():
        return None
    raw = None if s.raw_logprob is None else math.exp(min(s.raw_logprob, 0.0))
    return DrawnOutside(s.rank, raw, s.prob)


def resample_step(run: RunTrace, i: int, settings: SamplerSettings, recorded_only: bool = False) -> Sample:
    """Step i of `run` as it would have been drawn under `settings` (same random number, same history). Its raw row,
    entropy and lse are the whole vocabulary's from the record, or with `recorded_only` those of the recorded
    logits alone (every row from one record, as the preview draws it)."""
    st = run.steps[i]
    s = st.sample
    if s.is_partial or s.u is None:
        how = "taken by a beam search, not drawn" if s.is_taken else "reported by a server, not recorded in full"
        raise ValueError(f"step {i} was {how}: it cannot be re-sampled")
    return resample(s.top_ids, s.top_logits, settings, s.u, context_ids=run.prompt_ids,
                    generated_ids=run.token_ids[:i], top_n=st.top_n, recorded=None if recorded_only else s,
                    grammar=s.grammar)


def make_preview(run: RunTrace, i: int, settings: SamplerSettings) -> Preview:
    """Step i of `run` re-sampled under `settings` from its recorded logits alone (same random number, same
    history), with what of it is approximate. Raises ValueError for a step a server reported."""
    got = resample_step(run, i, settings, recorded_only=True)
    s = run.steps[i].sample
    mass = float(np.exp(s.top_logits.astype(np.float64) - s.raw_lse).sum())
    exact_after = {"greedy"} | ({"top_k"} if 0 < settings.top_k <= RECORD_K else set())
    return Preview(got, approximate_rows(got.stage_names, mass, exact_after), min(mass, 1.0))


def approximate_rows(stage_names: tuple[str, ...], recorded_mass: float, exact_after: set[str]) -> tuple[str, ...]:
    """The rows of a re-sample over the recorded logits that the unrecorded tail would change: every row before the
    first stage in `exact_after` (one whose survivors all lie among the recorded logits) ran; none if the recorded
    logits hold all the mass (to float32's precision)."""
    if recorded_mass >= 1.0 - 1e-6:
        return ()
    rows = [RAW_ROW]
    for name in stage_names:
        if name in exact_after:
            break
        rows.append(name)
    return tuple(rows)

