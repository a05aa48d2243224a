"""What a run leaves behind: one `StepTrace` per generated token and a `RunTrace` around them.

Compact (numpy arrays per step), serializable as JSON Lines, and complete enough to re-draw any step under
other settings without the model (`RunTrace.resample`). Knows nothing of models or Qt.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from app.core.sampling import Sample, resample
from app.core.settings import SamplerSettings


@dataclass(frozen=True)
class StepTrace:
    step: int
    sample: Sample
    text: str  # the visible text this token added (after stop-string trimming)
    top_texts: tuple[str, ...]  # display text of each top-N candidate
    seconds: float  # wall time of this step (forward + sampling)

    @property
    def token_id(self) -> int:
        return self.sample.token

    @property
    def prob(self) -> float:
        return self.sample.prob

    @property
    def raw_prob(self) -> float:
        return math.exp(self.sample.raw_logprob)

    @property
    def top_n(self) -> int:
        return len(self.top_texts)

    def raw_top_probs(self, n: int | None = None) -> list[float]:
        s = self.sample
        vals = s.top_logits[: self.top_n if n is None else n]
        return [math.exp(float(v) - s.raw_lse) for v in vals]

    def cut_by(self, i: int) -> str | None:
        return self.sample.cut_by(i)

    def to_json(self) -> dict[str, Any]:
        s = self.sample
        top = [
            {"token_id": int(s.top_ids[i]), "text": self.top_texts[i], "raw_prob": rp,
             "prob": float(s.final_probs[i]), "cut_by": self.cut_by(i)}
            for i, rp in enumerate(self.raw_top_probs())
        ]
        return {
            "step": self.step, "token_id": s.token, "text": self.text, "prob": s.prob,
            "logprob": math.log(s.prob) if s.prob > 0 else float("-inf"), "raw_prob": self.raw_prob,
            "raw_logprob": s.raw_logprob, "rank": s.rank, "entropy": s.entropy,
            "final_entropy": s.final_entropy, "stages": list(s.stage_names),
            "kept_counts": [int(c) for c in s.kept_counts], "u": s.u, "seconds": self.seconds, "top": top,
        }


@dataclass
class RunTrace:
    prompt_ids: list[int]
    settings: SamplerSettings
    seed: int
    steps: list[StepTrace] = field(default_factory=list)

    @property
    def token_ids(self) -> list[int]:
        return [s.token_id for s in self.steps]

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.steps)

    def resample(self, i: int, settings: SamplerSettings) -> Sample:
        """Step i as it would have been drawn under `settings` (same random number, same history)."""
        st = self.steps[i]
        return resample(
            st.sample.top_ids, st.sample.top_logits, settings, st.sample.u,
            context_ids=self.prompt_ids, generated_ids=self.token_ids[:i], top_n=st.top_n,
        )


def write_jsonl(lines: Iterator[dict[str, Any]] | list[dict[str, Any]], out: TextIO) -> None:
    for obj in lines:
        out.write(json.dumps(obj, ensure_ascii=False) + "\n")
    out.flush()
