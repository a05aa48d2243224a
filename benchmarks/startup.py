"""Startup: seconds from process creation to the window shown (offscreen), heavy imports deferred.

Baseline in the same run: an empty PySide6 window, the floor for any Qt program on this machine.

    python benchmarks/startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PROBE = """
import time, psutil, sys, json
created = psutil.Process().create_time()
{body}
app.processEvents()
shown = time.time() - created
heavy = sorted(m for m in ("torch", "mlx", "transformers", "mlx_lm") if m in sys.modules)
print(json.dumps({{"shown_s": shown, "heavy_imported": heavy}}), flush=True)
import os; os._exit(0)
"""
APP = """
from PySide6.QtCore import QSettings
from app.ui.main import make_app
app = make_app()
from app.ui.main_window import MainWindow
w = MainWindow(settings=QSettings(sys.argv[1], QSettings.Format.IniFormat))
w.show()
"""
EMPTY = """
from PySide6.QtWidgets import QApplication, QWidget
app = QApplication(sys.argv[:1])
w = QWidget(); w.resize(1400, 860); w.show()
"""


def measure(body: str, repeat: int) -> dict:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    runs = []
    for _ in range(repeat):
        ini = os.path.join(tempfile.mkdtemp(), "s.ini")
        out = subprocess.run([sys.executable, "-c", PROBE.format(body=body), ini], capture_output=True, text=True,
                             env=env, timeout=120)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {"median_s": statistics.median(r["shown_s"] for r in runs), "heavy_imported": runs[-1]["heavy_imported"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    empty, app = measure(EMPTY, args.repeat), measure(APP, args.repeat)
    print(f"empty PySide6 window (baseline): {empty['median_s']:.2f} s")
    print(f"Logit Lab window shown:          {app['median_s']:.2f} s  ({app['median_s'] / empty['median_s']:.2f}x the "
          f"baseline; frameworks imported by then: {app['heavy_imported'] or 'none'})")


if __name__ == "__main__":
    main()
