"""Run metrics: time to first token, prefill and decode speed, inter-token latency, KV cache size.

`Clock` is fed timestamps by the generation loop; `Metrics` is the frozen summary it produces. `rate` and
`decode_rate` are the one definition of a speed: live views and benchmarks call them rather than divide.
What was not measured is None, never 0: a server's KV cache, the prompt's tokens when it does not report them,
the time between tokens of an answer that arrived whole, the speed of a run of one token.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field


def rate(tokens: int | None, seconds: float | None) -> float | None:
    """Tokens per second; None when there is nothing to measure (no tokens, no time, or either not known)."""
    if tokens is None or seconds is None or tokens <= 0 or seconds <= 0:
        return None
    return tokens / seconds


def decode_rate(generated_tokens: int, decode_s: float | None) -> float | None:
    """Decode speed: the intervals between generated tokens over the first-to-last token time (the first
    token's time belongs to TTFT)."""
    return rate(generated_tokens - 1, decode_s)


def prefill_rate(prompt_tokens: int | None, reused_tokens: int, prefill_s: float | None) -> float | None:
    """Prefill speed: the prompt tokens prefilled (not those an earlier run's KV cache held) over the prefill's
    time; None when every token was reused, a server's prefill was not measured, or one token alone was
    prefilled (its time is a forward's fixed cost, not a speed: "13 tok/s" for one token)."""
    prefilled = None if prompt_tokens is None else prompt_tokens - reused_tokens
    return rate(prefilled if prefilled is not None and prefilled >= 2 else None, prefill_s)


@dataclass(frozen=True)
class Metrics:
    """A run's figures; None: not measured (see the module's docstring)."""

    prompt_tokens: int | None = None
    generated_tokens: int = 0
    ttft_s: float | None = None  # request start -> first token drawn (prefill included)
    prefill_s: float | None = None
    decode_s: float | None = None  # first token -> last token
    total_s: float | None = None
    itl_mean_s: float | None = None
    itl_p95_s: float | None = None
    kv_cache_bytes: int | None = None
    reused_tokens: int = 0  # prompt tokens whose KV cache an earlier run left (not prefilled again)

    @property
    def prefill_tokens_per_s(self) -> float | None:
        return prefill_rate(self.prompt_tokens, self.reused_tokens, self.prefill_s)

    @property
    def decode_tokens_per_s(self) -> float | None:
        return decode_rate(self.generated_tokens, self.decode_s)

    def to_dict(self) -> dict[str, float | None]:
        d = asdict(self)
        d["prefill_tokens_per_s"] = self.prefill_tokens_per_s
        d["decode_tokens_per_s"] = self.decode_tokens_per_s
        return d

    def line(self) -> str:
        """The figures as the command line prints them; "n/a" for what was not measured."""
        reused = f" ({self.reused_tokens} reused)" if self.reused_tokens else ""
        itl = "n/a" if self.itl_mean_s is None else (
            f"{self.itl_mean_s * 1000:.1f} ms (p95 {_shown(self.itl_p95_s, '{:.1f}', 1000)})")
        return (f"prompt {_shown(self.prompt_tokens, '{:d}')} tok{reused}, "
                f"{_shown(self.prefill_tokens_per_s, '{:.1f}')} tok/s prefill | "
                f"{self.generated_tokens} generated, {_shown(self.decode_tokens_per_s, '{:.1f}')} tok/s | "
                f"TTFT {_shown(self.ttft_s, '{:.0f} ms', 1000)} | ITL {itl} | "
                f"total {_shown(self.total_s, '{:.2f} s')} | KV {_shown(self.kv_cache_bytes, '{:.0f} KiB', 1 / 1024)}")


def _shown(value: float | None, form: str, scale: float = 1) -> str:
    return "n/a" if value is None else form.format(value * scale)


@dataclass
class Clock:
    now: callable = time.perf_counter  # type: ignore[valid-type]
    start: float = 0.0
    prefilled_at: float | None = None
    token_times: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.start = self.now()

    def prefilled(self) -> float:
        self.prefilled_at = self.now()
        return self.prefilled_at - self.start

    def token(self) -> float:
        """Record a drawn token; returns seconds since the previous one (or since prefill)."""
        t = self.now()
        prev = self.token_times[-1] if self.token_times else self.prefilled_at or self.start
        self.token_times.append(t)
        return t - prev

    def metrics(self, prompt_tokens: int | None, kv_bytes: int | None) -> Metrics:
        """The figures so far; None for what this run could not measure (no token yet, one token: no interval)."""
        import numpy as np  # (not at import: the window's first paint needs this module, not numpy)

        t = self.token_times
        itl = np.diff(t)
        return Metrics(
            prompt_tokens=prompt_tokens, generated_tokens=len(t), ttft_s=(t[0] - self.start) if t else None,
            prefill_s=None if self.prefilled_at is None else self.prefilled_at - self.start,
            decode_s=(t[-1] - t[0]) if t else None, total_s=self.now() - self.start,
            itl_mean_s=float(itl.mean()) if itl.size else None,
            itl_p95_s=float(np.percentile(itl, 95)) if itl.size else None, kv_cache_bytes=kv_bytes,
        )
