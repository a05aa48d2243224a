"""The sweep window's cells in batches against one cell per job, in the real window (offscreen), on the built-in
model: a 3×3 grid, N samples a cell, T tokens; the best of `--repeat` runs of each, measured in the same run, and
their ratio. (benchmarks/sweep.py measures the core's loop without the window.)

    python benchmarks/sweep_window.py [--backend torch|mlx] [--n 4] [--tokens 32] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="torch")
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    for k in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):  # never the user's files
        os.environ[k] = tempfile.mkdtemp()
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from app.core.models.sources import ModelSpec
    from app.ui.main_window import MainWindow

    app = QApplication([])
    store = QSettings(os.path.join(tempfile.mkdtemp(), "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(settings=store, spec=ModelSpec("builtin", args.backend))
    w.show()
    w.sampler.seed.setValue(3)
    w.sampler.lock.setChecked(True)
    wait(app, lambda: w.playground.info is None)
    w.prompt.set_prompt("import ")
    w.sampler.editors["max_tokens"].setValue(args.tokens)
    view = w.tools["sweep"].open()
    view.count.setValue(args.n)

    def sweep(rows: int) -> float:
        view.batch_rows = rows
        t0 = time.perf_counter()
        assert view.run()
        wait(app, lambda: view._running or w.playground.busy)
        return time.perf_counter() - t0

    sweep(64)  # warm-up
    times: dict[int, list[float]] = {args.n: [], 64: []}
    for _ in range(args.repeat):
        for rows in times:
            times[rows].append(sweep(rows))
    one, batched = min(times[args.n]), min(times[64])
    print(f"{args.backend}: 9 cells × {args.n} samples × ≤{args.tokens} tokens: one cell per job {one:.2f} s, "
          f"batched ({view.batches} job{'s' * (view.batches != 1)}) {batched:.2f} s: {one / batched:.2f}×",
          flush=True)
    os._exit(0)  # (closing would ask about the session's unsaved runs)


def wait(app: object, busy: object) -> None:
    while busy():
        app.processEvents()
        time.sleep(0.004)  # (a bare loop would hold the GIL from the model thread)


if __name__ == "__main__":
    sys.exit(main())
