"""UI streaming cost: a synthetic 10,000-token run streamed into the real window (offscreen).

A synthetic worker (the model thread's interface, no model) emits realistic Step events at a fixed rate;
we measure the longest event-loop stall, redraws per second, and the UI's cost per token near token 1,000 and
near token 10,000 (it should be flat).

    QT_QPA_PLATFORM=offscreen python benchmarks/ui_stream.py [--tokens 10000] [--rate 1000]
"""

from __future__ import annotations

import argparse
import gc
import os
import queue
import statistics
import tempfile
import threading
import time

import numpy as np

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings, QTimer

from app.core.events import Finished, Loaded, Prefilled, Request, Step
from app.core.metrics import Metrics
from app.core.record.trace import RunTrace, StepTrace
from app.core.sampler.sampling import sample
from app.core.settings import SamplerSettings
from app.ui.main import make_app
from backends.base import ModelInfo
from backends.ops import NUMPY

WORDS = ["def", " self", ".", "(", ")", ":", "\n", "    ", " return", " x", " =", " 1", " the", " model", ","]
SETTINGS = SamplerSettings(temperature=0.8, top_p=0.95)
INFO = ModelInfo("synthetic", "none", "Synthetic", 1, 1, 1, 1, 1, 1, 4096, 100_000, "float32", "cpu", None, 0, 1)


def synthetic_step(i: int, rng: np.random.Generator) -> StepTrace:
    """A real record: the core's own sampler over random logits."""
    logits = rng.normal(size=4096).astype(np.float32) * 3
    s = sample(NUMPY, logits, SETTINGS, float(rng.random()))
    return StepTrace(i, s, WORDS[i % len(WORDS)], tuple(WORDS[j % len(WORDS)] for j in range(20)), 0.001)


class SyntheticWorker:
    """The model thread's interface, emitting a pre-built run at `rate` tokens per second."""

    def __init__(self, tokens: int, rate: float) -> None:
        self.events: queue.Queue = queue.Queue()
        self.model = None
        self.tokens, self.rate = tokens, rate
        rng = np.random.default_rng(0)
        self.steps = [synthetic_step(i, rng) for i in range(tokens)]
        self.stopped = threading.Event()

    def submit(self, request: Request, load_only: bool = False) -> int:
        if load_only:
            self.events.put(Loaded(request.id, INFO, 0.0))
        else:
            threading.Thread(target=self._feed, args=(request,), daemon=True).start()
        return request.id

    def _feed(self, request: Request) -> None:
        self.events.put(Prefilled(request.id, (1, 2, 3), "x", 0, 0.01))
        t0 = time.perf_counter()
        for i, st in enumerate(self.steps):
            delay = t0 + i / self.rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            self.events.put(Step(request.id, i, st.token_id, st.text, st, 1000 * i))
        run = RunTrace([1, 2, 3], request.settings, 0, list(self.steps))
        self.events.put(Finished(request.id, "length", Metrics(generated_tokens=self.tokens), run))

    def cancel(self) -> None:
        pass

    def close(self, timeout: float = 1.0) -> bool:
        self.stopped.set()
        return True


class Spans:
    """Named intervals of UI-thread work (chart paints, text layout, garbage collection...), to say what ran
    during the longest event-loop stalls."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, float, float]] = []
        self._gc_start = 0.0

    def wrap(self, cls: type, method: str, name: str) -> None:
        inner = getattr(cls, method)

        def timed(*args: object, **kwargs: object) -> object:
            t = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.spans.append((name.format(type(args[0]).__name__), t, time.perf_counter()))

        setattr(cls, method, timed)

    def watch_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.spans.append((f"gc gen {info['generation']}", self._gc_start, time.perf_counter()))

    def report(self, ticks: list[float], top: int = 8) -> None:
        """Each kind of work: calls, total, longest; then the longest stalls and the work inside each."""
        kinds: dict[str, list[float]] = {}
        self.spans = [sp for sp in self.spans if sp[1] >= ticks[0]]  # the run's, not the window's making
        for name, t0, t1 in self.spans:
            kinds.setdefault(name, []).append(t1 - t0)
        print(f"{'work on the UI thread':34} {'calls':>6} {'total ms':>9} {'longest ms':>10}")
        for name, d in sorted(kinds.items(), key=lambda kv: -sum(kv[1])):
            print(f"{name:34} {len(d):6d} {sum(d) * 1000:9.0f} {max(d) * 1000:10.1f}")
        gaps = sorted(zip(np.diff(ticks), ticks[:-1], strict=True), reverse=True)[:top]
        for gap, start in gaps:
            inside = [(n, t1 - t0) for n, t0, t1 in self.spans if t0 < start + gap and t1 > start]
            parts = ", ".join(f"{n} {d * 1000:.1f}" for n, d in sorted(inside, key=lambda x: -x[1])[:4])
            parts = parts or "nothing measured (Qt internals)"
            print(f"stall {gap * 1000:5.1f} ms at {start - ticks[0]:5.2f} s: {parts}")


def instrument() -> Spans:
    """Time the window's UI-thread work by kind (before the window is made, so every connection is timed)."""
    import pyqtgraph as pg

    from app.ui.charts.step_chart import StepChart
    from app.ui.charts.timeline import TimelineChart
    from app.ui.panels.info import MetricsStrip
    from app.ui.run_view.token_view import TokenText
    from app.ui.viewmodel.display import Display
    from app.ui.viewmodel.router import EventRouter

    spans = Spans()
    for cls, method, name in ((EventRouter, "drain", "drain (all handlers)"),
                              (Display, "show_step", "step shown (chart data, 10 Hz)"),
                              (TokenText, "append_steps", "text: append"), (TokenText, "paintEvent", "text: paint"),
                              (StepChart, "show_sample", "step chart: set data"),
                              (TimelineChart, "redraw", "timeline: set data"),
                              (MetricsStrip, "live", "metrics: set"),
                              (pg.GraphicsView, "paintEvent", "{}: paint")):
        if hasattr(cls, method):
            spans.wrap(cls, method, name)
    gc.callbacks.append(spans.watch_gc)
    return spans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=1000.0, help="tokens per second fed to the window")
    ap.add_argument("--why", action="store_true", help="also time each kind of UI work and show what ran in the "
                    "longest stalls (the timing itself adds a little)")
    args = ap.parse_args()
    app = make_app()
    spans = instrument() if args.why else None
    from app.ui.main_window import MainWindow

    store = QSettings(os.path.join(tempfile.mkdtemp(), "s.ini"), QSettings.Format.IniFormat)
    worker = SyntheticWorker(args.tokens, args.rate)
    w = MainWindow(settings=store, worker=worker)
    w.sessions.ask = lambda: "discard"  # nothing to save at the end of a benchmark
    w.resize(1400, 860)
    w.show()
    costs: list[tuple[int, int, float]] = []  # (tokens shown before, batch size, seconds in the handler)
    handler = w.playground.display.emit_steps  # every view's handler of the new steps runs inside it

    def timed(steps: list) -> None:
        t = time.perf_counter()
        handler(steps)
        costs.append((len(w.playground.steps) - len(steps), len(steps), time.perf_counter() - t))

    w.playground.display.emit_steps = timed
    settle = time.perf_counter() + 0.3  # the window's first layout and paint are startup, not streaming
    while time.perf_counter() < settle:
        app.processEvents()
    ticks: list[float] = []
    tick = QTimer(interval=1)
    tick.timeout.connect(lambda: ticks.append(time.perf_counter()))
    tick.start()
    done = threading.Event()
    w.playground.finished.connect(lambda _: done.set())
    t0 = time.perf_counter()
    QTimer.singleShot(20, w.generate)
    while not done.is_set():
        app.processEvents()
    wall = time.perf_counter() - t0
    gaps = np.diff(ticks)

    def per_token(lo: int, hi: int) -> float:
        sel = [c / n for start, n, c in costs if lo <= start < hi]
        return statistics.median(sel) * 1e6 if sel else float("nan")

    print(f"{args.tokens:,} synthetic tokens at {args.rate:.0f} tok/s into the real window (offscreen), {wall:.1f} s")
    print(f"redraws: {len(costs)} ({len(costs) / wall:.1f} per second), "
          f"mean {args.tokens / len(costs):.1f} tokens each")
    print(f"longest event-loop stall: {gaps.max() * 1000:.1f} ms (p99 {np.percentile(gaps, 99) * 1000:.1f} ms)")
    n = args.tokens
    print(f"UI cost per token near token 1,000: {per_token(900, 1100):.0f} µs; "
          f"near token {n:,}: {per_token(n - 200, n):.0f} µs")
    if spans is not None:
        spans.report(ticks)
    w.close()


if __name__ == "__main__":
    main()
