"""The figures of the run shown while it streams: tokens so far, decode tokens per second, time to first token, KV
bytes. Summed from the steps as the views take them (`add`) and started again when its prompt is prefilled
(`prefilled`); a finished run's figures are its `Metrics`, not these. No Qt, no run of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core.metrics import decode_rate

if TYPE_CHECKING:
    from app.core.events import Step
    from app.core.record.trace import StepTrace


class LiveStats:
    def __init__(self) -> None:
        self._prefill_s = 0.0
        self._decode_s = 0.0  # summed step times after the first token
        self._kv_bytes: int | None = 0

    def prefilled(self, seconds: float) -> None:
        """The shown run's prompt was prefilled in `seconds`: its decode time starts from nothing."""
        self._prefill_s, self._decode_s = seconds, 0.0

    def add(self, steps: list[Step]) -> None:
        """Steps the views took: their time after the first token, and the KV cache's size after the last."""
        self._kv_bytes = steps[-1].kv_bytes
        self._decode_s += sum(s.trace.seconds for s in steps if s.trace is not None and s.step > 0)

    def read(self, steps: list[StepTrace]) -> tuple[int, float | None, float | None, int | None]:
        """(tokens, decode tokens/s, TTFT seconds, KV bytes) of the run whose `steps` these are (None: not measured)."""
        n = len(steps)
        ttft = self._prefill_s + steps[0].seconds if steps else None
        return n, decode_rate(n, self._decode_s), ttft, self._kv_bytes
