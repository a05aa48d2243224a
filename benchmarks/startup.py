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
print(json.dumps({{"shown_s": shown, "cpu_s": time.process_time(), "heavy_imported": heavy}}), flush=True)
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
PYCACHE = os.path.join(tempfile.gettempdir(), "logitlab-startup-pycache")
EMPTY = """
from PySide6.QtWidgets import QApplication, QWidget
app = QApplication(sys.argv[:1])
w = QWidget(); w.resize(1400, 860); w.show()
"""


def environment() -> dict[str, str]:
    """Offscreen, with a bytecode cache of its own (as an installed app has; this checkout's may be switched off
    by PYTHONDONTWRITEBYTECODE), kept out of the source tree."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "QT_QPA_PLATFORM": "offscreen", "PYTHONPYCACHEPREFIX": PYCACHE}


def measure(body: str, repeat: int) -> dict:
    env = environment()
    runs = []
    for i in range(repeat + 1):  # the first run fills the bytecode cache and is not counted
        ini = os.path.join(tempfile.mkdtemp(), "s.ini")
        out = subprocess.run([sys.executable, "-c", PROBE.format(body=body), ini], capture_output=True, text=True,
                             env=env, timeout=120)
        if i:
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {"median_s": statistics.median(r["shown_s"] for r in runs),
            "cpu_s": statistics.median(r["cpu_s"] for r in runs), "heavy_imported": runs[-1]["heavy_imported"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    empty, app = measure(EMPTY, args.repeat), measure(APP, args.repeat)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores; medians of "
          f"{args.repeat}; CPU: the process's own CPU time by then (steadier than wall time on a busy machine)")
    print(f"empty PySide6 window (baseline): {empty['median_s']:.2f} s, CPU {empty['cpu_s']:.2f} s")
    print(f"Logit Lab window shown:          {app['median_s']:.2f} s, CPU {app['cpu_s']:.2f} s  "
          f"({app['median_s'] / empty['median_s']:.2f}x the baseline, CPU {app['cpu_s'] / empty['cpu_s']:.2f}x; "
          f"frameworks imported by then: {app['heavy_imported'] or 'none'})")


if __name__ == "__main__":
    main()
