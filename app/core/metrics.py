"""Run metrics: time to first token, prefill and decode speed, inter-token latency, KV cache size.

`Clock` is fed timestamps by the generation loop; `Metrics` is the frozen summary it produces. `rate` and
`decode_rate` are the one definition of a speed: live views and benchmarks call them rather than divide.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np


def rate(tokens: int, seconds: float) -> float:
    """Tokens per second; 0 when there is nothing to measure."""
    return tokens / seconds if tokens > 0 and seconds > 0 else 0.0


def decode_rate(generated_tokens: int, decode_s: float) -> float:
    """Decode speed: the intervals between generated tokens over the first-to-last token time (the first
    token's time belongs to TTFT)."""
    return rate(generated_tokens - 1, decode_s)


@dataclass(frozen=True)
class Metrics:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    ttft_s: float = 0.0  # request start -> first token drawn (prefill included)
    prefill_s: float = 0.0
    decode_s: float = 0.0  # first token -> last token
    total_s: float = 0.0
    itl_mean_s: float = 0.0
    itl_p95_s: float = 0.0
    kv_cache_bytes: int = 0
    reused_tokens: int = 0  # prompt tokens whose KV cache an earlier run left (not prefilled again)

    @property
    def prefill_tokens_per_s(self) -> float:
        return rate(self.prompt_tokens - self.reused_tokens, self.prefill_s)

    @property
    def decode_tokens_per_s(self) -> float:
        return decode_rate(self.generated_tokens, self.decode_s)

    def to_dict(self) -> dict[str, float]:
        d = asdict(self)
        d["prefill_tokens_per_s"] = self.prefill_tokens_per_s
        d["decode_tokens_per_s"] = self.decode_tokens_per_s
        return d

    def line(self) -> str:
        reused = f" ({self.reused_tokens} reused)" if self.reused_tokens else ""
        return (f"prompt {self.prompt_tokens} tok{reused}, {self.prefill_tokens_per_s:.1f} tok/s prefill | "
                f"{self.generated_tokens} generated, {self.decode_tokens_per_s:.1f} tok/s | "
                f"TTFT {self.ttft_s * 1000:.0f} ms | ITL {self.itl_mean_s * 1000:.1f} ms "
                f"(p95 {self.itl_p95_s * 1000:.1f}) | total {self.total_s:.2f} s | "
                f"KV {self.kv_cache_bytes / 1024:.0f} KiB")


@dataclass
class Clock:
    now: callable = time.perf_counter  # type: ignore[valid-type]
    start: float = 0.0
    prefilled_at: float = 0.0
    token_times: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.start = self.now()

    def prefilled(self) -> float:
        self.prefilled_at = self.now()
        return self.prefilled_at - self.start

    def token(self) -> float:
        """Record a drawn token; returns seconds since the previous one (or since prefill)."""
        t = self.now()
        prev = self.token_times[-1] if self.token_times else self.prefilled_at
        self.token_times.append(t)
        return t - prev

    def metrics(self, prompt_tokens: int, kv_bytes: int) -> Metrics:
        t = self.token_times
        itl = np.diff(t) if len(t) > 1 else np.zeros(0)
        return Metrics(
            prompt_tokens=prompt_tokens, generated_tokens=len(t), ttft_s=(t[0] - self.start) if t else 0.0,
            prefill_s=self.prefilled_at - self.start, decode_s=(t[-1] - t[0]) if t else 0.0,
            total_s=self.now() - self.start, itl_mean_s=float(itl.mean()) if itl.size else 0.0,
            itl_p95_s=float(np.percentile(itl, 95)) if itl.size else 0.0, kv_cache_bytes=kv_bytes,
        )
