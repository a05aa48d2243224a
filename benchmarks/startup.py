"""Startup: seconds from process creation to the window shown (its first paint, offscreen), heavy imports deferred,
and to its model ready (the built-in model loaded on `--backend`, the window's preload).

Baseline in the same run: an empty PySide6 window, the floor for any Qt program on this machine. `--before DIR`
also measures another checkout's window (e.g. `git archive HEAD | tar -x -C /tmp/before`). The variants
alternate, one process each per round, and medians are reported: on a busy machine the load moves all alike.

    python benchmarks/startup.py [--repeat 5] [--before DIR] [--backend torch|mlx]

"Shown" is the first moment the event loop is free after the window's first paint (a zero timer posted from
that paint), so work queued behind the paint (building the charts) is not counted; "complete" is one turn of
the loop later, once that work is done.
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
from PySide6.QtCore import QEvent, QObject, QTimer

marks = {{}}
LATER = ("pyqtgraph", "superqt", "torch", "mlx", "transformers")


def mark(name):
    marks[name] = {{"s": time.time() - created, "cpu_s": time.process_time(),
                   "imported": [m for m in LATER if m in sys.modules]}}


class FirstPaint(QObject):
    seen = False

    def eventFilter(self, obj, ev):
        if ev.type() == QEvent.Type.Paint and not self.seen:  # the window's own paint comes before its children's
            self.seen = True
            QTimer.singleShot(0, self, self.shown)  # runs once this paint (and what it paints) is done
        return False

    def shown(self):
        mark("shown")
        QTimer.singleShot(0, self, lambda: mark("complete"))  # behind what was queued during the paint


first_paint = FirstPaint()
w.installEventFilter(first_paint)
w.show()
while "complete" not in marks:
    app.processEvents()
ready = getattr(w, "playground", None)
while ready is not None and ready.info is None:  # the model the window preloads (the empty window has none)
    app.processEvents()
    time.sleep(0.002)
mark("ready")
print(json.dumps(marks), flush=True)
import os; os._exit(0)
"""
APP = """
from PySide6.QtCore import QSettings
from app.ui.main import make_app
app = make_app()
from app.ui.main_window import MainWindow
from app.core.models.sources import BUILTIN_PATH, ModelSpec
w = MainWindow(settings=QSettings(sys.argv[1], QSettings.Format.IniFormat),
               spec=ModelSpec(str(BUILTIN_PATH), sys.argv[2]))
"""
EMPTY = """
from PySide6.QtWidgets import QApplication, QWidget
app = QApplication(sys.argv[:1])
w = QWidget(); w.resize(1400, 860)
"""
PYCACHE = os.path.join(tempfile.gettempdir(), "logitlab-startup-pycache")


def environment() -> dict[str, str]:
    """Offscreen, with a bytecode cache of its own (as an installed app has; this checkout's may be switched off
    by PYTHONDONTWRITEBYTECODE), kept out of the source tree."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "QT_QPA_PLATFORM": "offscreen", "PYTHONPYCACHEPREFIX": PYCACHE}


def probe(body: str, cwd: str, backend: str) -> dict:
    ini = os.path.join(tempfile.mkdtemp(), "s.ini")
    out = subprocess.run([sys.executable, "-c", PROBE.format(body=body), ini, backend], capture_output=True, text=True,
                         env=environment(), cwd=cwd, timeout=120)
    if out.returncode:
        raise SystemExit(f"probe failed in {cwd}:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(runs: list[dict]) -> dict:
    def median(mark: str, key: str) -> float:
        return statistics.median(r[mark][key] for r in runs)

    return {"shown": median("shown", "s"), "shown_cpu": median("shown", "cpu_s"),
            "complete": median("complete", "s"), "complete_cpu": median("complete", "cpu_s"),
            "ready": median("ready", "s"), "ready_cpu": median("ready", "cpu_s"),
            "imported": runs[-1]["shown"]["imported"], "imported_ready": runs[-1]["ready"]["imported"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--before", metavar="DIR", help="another checkout whose window is measured alongside")
    ap.add_argument("--backend", default="torch", choices=("torch", "mlx"), help="the built-in model's backend")
    args = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    variants = {"empty PySide6 window (baseline)": (EMPTY, here)}
    if args.before:
        variants["Logit Lab, before (--before)"] = (APP, os.path.abspath(args.before))
    variants["Logit Lab window"] = (APP, here)
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    loads = [os.getloadavg()[0]]
    for i in range(args.repeat + 1):  # round 0 fills the bytecode caches and is not counted
        for name, (body, cwd) in variants.items():
            r = probe(body, cwd, args.backend)
            if i:
                runs[name].append(r)
        loads.append(os.getloadavg()[0])
    print(f"load average (1 min) {min(loads):.2f}–{max(loads):.2f} on {os.cpu_count()} cores; medians of "
          f"{args.repeat} alternated rounds; CPU: the process's own CPU time by then (steadier than wall time)")
    base = summary(runs[next(iter(runs))])
    for (name, rs), (body, _) in zip(runs.items(), variants.values(), strict=True):
        s = summary(rs)
        print(f"{name:34s} shown {s['shown']:.2f} s, CPU {s['shown_cpu']:.2f} s "
              f"({s['shown'] / base['shown']:.2f}x / CPU {s['shown_cpu'] / base['shown_cpu']:.2f}x the baseline); "
              f"complete {s['complete']:.2f} s, CPU {s['complete_cpu']:.2f} s; imported when shown: "
              f"{', '.join(s['imported']) or 'none of ' + '/'.join(('pyqtgraph', 'superqt', 'torch', 'mlx'))}"
              + (f"; model ready {s['ready']:.2f} s, CPU {s['ready_cpu']:.2f} s, with "
                 f"{', '.join(s['imported_ready']) or 'none of those'}" if body is not EMPTY else ""))


if __name__ == "__main__":
    main()
