"""Small display panels: the metrics strip and the model info card. They show what they are given."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QFormLayout, QHBoxLayout, QLabel, QSizePolicy, QWidget

from app.core.metrics import Metrics, prefill_rate
from backends.base import ModelInfo

if TYPE_CHECKING:
    from app.ui.viewmodel.playground import Playground


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class MetricsStrip(QWidget):
    """TTFT, tokens/s, tokens, inter-token latency, KV cache: live while streaming, final at the end."""

    FIELDS = (("ttft", "TTFT", "Time to first token: the prompt's prefill plus the first step"),
              ("rate", "Decode", "Generated tokens per second"),
              ("prefill", "Prefill", "Prompt tokens processed per second"),
              ("tokens", "Tokens", "Prompt tokens + generated tokens"),
              ("itl", "Inter-token", "Mean (p95) time between two tokens"),
              ("kv", "KV cache", "Memory held by the attention keys and values"))

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(4, 0, 4, 0)
        self.values: dict[str, QLabel] = {}
        for key, _, tip in self.FIELDS:
            label = QLabel(toolTip=tip)
            label.setObjectName(f"metric_{key}")
            self.values[key] = label
            row.addWidget(label)
            row.addSpacing(12)
        self.note = QLabel(objectName="metric_note")  # what the run waits for: a compile (--compile), then its time
        row.addWidget(self.note)
        row.addStretch(1)
        # the figures are cut at the window's edge rather than widening a small window
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self._prompt_tokens = self._reused = self._inherited = 0
        self.clear()

    def _set(self, key: str, text: str) -> None:
        name = next(n for k, n, _ in self.FIELDS if k == key)
        self.values[key].setText(f"{name}: <b>{text}</b>")

    def bind(self, playground: Playground) -> None:
        """Prefill figures once prefilled, live figures with each step shown while streaming, the final ones."""
        playground.run_started.connect(self.begin)  # no figure of the last run stays shown
        playground.cleared.connect(self.clear)
        playground.prefilled.connect(lambda ev: self.started(len(ev.prompt_ids) + self._inherited, ev.seconds,
                                                             ev.reused))
        playground.step_shown.connect(
            lambda *_: playground.display.streaming and self.live(*playground.live.read(playground.steps)))
        playground.finished.connect(lambda ev: self.final(ev.metrics))
        playground.compiling.connect(lambda ev: self.note.setText(ev.message))

    def begin(self, request: object) -> None:
        """A run starts: no figure of the last one stays shown; a branch's steps taken over count as prompt."""
        self._inherited = len(getattr(request, "inherited", ()))  # a branch's steps taken over: prefilled context
        self.clear()
        self.note.clear()

    def clear(self) -> None:
        for key, name, _ in self.FIELDS:
            self.values[key].setText(f"{name}: —")

    def started(self, prompt_tokens: int, prefill_s: float | None, reused: int = 0) -> None:
        """`prompt_tokens`: the context prefilled (a branch's: the prompt and the steps it took over, as `Metrics`
        counts them); `reused`: those an earlier run's KV cache held, not prefilled again."""
        self._prompt_tokens = prompt_tokens
        self._reused = reused
        self._set("prefill", _per_s(prefill_rate(prompt_tokens, reused, prefill_s), ".0f"))

    def live(self, tokens: int, tokens_per_s: float | None, ttft_s: float | None, kv_bytes: int | None) -> None:
        """`tokens`: the run's steps so far, a branch's taken-over ones included (they are counted in the prompt)."""
        if ttft_s is not None:
            self._set("ttft", f"{ttft_s * 1000:.0f} ms")
        self._set("rate", _per_s(tokens_per_s, ".1f"))
        prompt = f"{self._prompt_tokens}{_cached(self._reused)}" if self._prompt_tokens else "—"  # a server's: unsaid
        self._set("tokens", f"{prompt} + {max(0, tokens - self._inherited)}")
        self._set("kv", _bytes(kv_bytes))

    def final(self, m: Metrics) -> None:
        """The run's figures; a dash for each one not measured (None in `Metrics`)."""
        self._set("ttft", "—" if m.ttft_s is None else f"{m.ttft_s * 1000:.0f} ms")
        self._set("rate", _per_s(m.decode_tokens_per_s, ".1f"))
        self._set("prefill", _per_s(m.prefill_tokens_per_s, ".0f"))
        prompt = "—" if not m.prompt_tokens else f"{m.prompt_tokens}{_cached(m.reused_tokens)}"  # 0: unreported
        self._set("tokens", f"{prompt} + {m.generated_tokens}")
        itl = m.itl_mean_s is not None and m.itl_p95_s is not None
        self._set("itl", f"{m.itl_mean_s * 1000:.1f} ms ({m.itl_p95_s * 1000:.1f})" if itl else "—")
        self._set("kv", _bytes(m.kv_cache_bytes))


class ModelCard(QWidget):
    """What the loaded model is: architecture, size, shape, precision, device, memory."""

    ROWS = ("Model", "Backend", "Architecture", "Parameters", "Layers", "Heads (KV)", "Context", "Precision",
            "Device", "Weights", "KV / 1k tokens", "KV now")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        form = QFormLayout(self)
        form.setContentsMargins(4, 4, 4, 4)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)  # narrow: each value under its name
        self.labels = {r: QLabel("—") for r in self.ROWS}
        for r, label in self.labels.items():
            label.setWordWrap(True)
            # a long value (an architecture's name) wraps or is cut; it never widens a small window
            label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            form.addRow(r, label)

    def show_info(self, i: ModelInfo) -> None:
        weights = human_bytes(i.weight_bytes)
        if i.unquantized_bytes:
            saved = 1 - i.weight_bytes / i.unquantized_bytes
            weights += f" (was {human_bytes(i.unquantized_bytes)}, saved {saved:.0%})"
        kv = human_bytes(i.kv_bytes_per_token * 1000)
        values = (i.name, i.backend, i.architecture, _known(i.parameters, f"{i.parameters / 1e6:,.1f} M"),
                  _known(i.layers, str(i.layers)), _known(i.heads, f"{i.heads} ({i.kv_heads}), head dim {i.head_dim}"),
                  _known(i.context_length, f"{i.context_length:,} tokens"), i.quantization or i.dtype, _device(i),
                  _known(i.weight_bytes, weights), _known(i.kv_bytes_per_token, kv), "—")
        for r, v in zip(self.ROWS, values, strict=True):
            self.labels[r].setText(v)

    def show_kv(self, kv_bytes: int | None) -> None:
        self.labels["KV now"].setText(_bytes(kv_bytes))

    def bind(self, playground: Playground) -> None:
        """The loaded model's card; the KV cache's size as the run grows."""
        playground.loaded.connect(self.show_info)
        playground.step_shown.connect(
            lambda *_: playground.display.streaming and self.show_kv(playground.live.read(playground.steps)[-1]))
        playground.finished.connect(lambda ev: self.show_kv(ev.metrics.kv_cache_bytes))


def _device(i: ModelInfo) -> str:
    """The device, and the CPU threads a torch model's ops run on (the bar's threads box, or the backend's rule)."""
    return f"{i.device} · threads {i.threads}" if i.threads else i.device


def _per_s(tokens_per_s: float | None, form: str) -> str:
    """A speed, or a dash where none was measured: every prompt token reused from the KV cache, a server's prefill
    (hidden in its time to first token), a run of one token, an answer that arrived whole."""
    return "—" if tokens_per_s is None else f"{tokens_per_s:{form}} tok/s"


def _bytes(n: int | None) -> str:
    return "—" if n is None else human_bytes(n)


def _known(count: int, text: str) -> str:
    """`text`, or a dash where a model's figure is not known: a server reports no parameters, layers or sizes
    (its `ModelInfo` holds 0 for them), and no model has 0 of any."""
    return text if count else "—"


def _cached(reused: int) -> str:
    """How many of the prompt's tokens an earlier run's KV cache held (not prefilled again)."""
    return f" ({reused} cached)" if reused else ""
