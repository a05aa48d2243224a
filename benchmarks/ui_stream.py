"""UI streaming cost: a synthetic 10,000-token run streamed into the real window (offscreen).

A synthetic worker (the model thread's interface, no model) emits realistic Step events at a fixed rate;
we measure the longest event-loop stall, redraws per second, and the UI's cost per token near token 1,000 and
near token 10,000 (it should be flat).

    QT_QPA_PLATFORM=offscreen python benchmarks/ui_stream.py [--tokens 10000] [--rate 1000]
"""

from __future__ import annotations

import argparse
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
from app.core.sampling import sample
from app.core.settings import SamplerSettings
from app.core.trace import RunTrace, StepTrace
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=1000.0, help="tokens per second fed to the window")
    args = ap.parse_args()
    app = make_app()
    from app.ui.main_window import MainWindow

    store = QSettings(os.path.join(tempfile.mkdtemp(), "s.ini"), QSettings.Format.IniFormat)
    worker = SyntheticWorker(args.tokens, args.rate)
    w = MainWindow(settings=store, worker=worker)
    w.resize(1400, 860)
    w.show()
    costs: list[tuple[int, int, float]] = []  # (tokens shown before, batch size, seconds in the handler)
    handler = w.playground._emit_steps  # every view's handler of the new steps runs inside it

    def timed(steps: list) -> None:
        t = time.perf_counter()
        handler(steps)
        costs.append((len(w.playground.steps) - len(steps), len(steps), time.perf_counter() - t))

    w.playground._emit_steps = timed
    ticks: list[float] = []
    tick = QTimer(interval=1)
    tick.timeout.connect(lambda: ticks.append(time.perf_counter()))
    tick.start()
    done = threading.Event()
    w.playground.finished.connect(lambda _: done.set())
    t0 = time.perf_counter()
    QTimer.singleShot(50, w.generate)
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
    w.close()


if __name__ == "__main__":
    main()
