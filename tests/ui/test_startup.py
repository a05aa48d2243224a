"""Startup: the window paints before pyqtgraph, superqt or a framework is imported, and before numpy, psutil, secrets
(hashlib), datetime and the core's model-side modules (the model thread, generation, sampling, the records, a
server's run, the catalog); the charts are built and the model thread started right after the first paint (or at
their first use) and then draw runs as before. Parts hidden at start (the Chat tab's editor, the prompt's surprisal
and tokens) are built when first shown or used, the Chat tab right after the first paint too. No times are
asserted: what is checked is what was imported, and what exists, at each point."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from PySide6.QtWidgets import QLabel

from app.core.models.sources import ModelSpec
from app.ui.charts.chart_host import ChartHost, LazyHost, TimelineHost
from app.ui.charts.step_chart import StepChart
from app.ui.charts.timeline import TimelineChart
from app.ui.main_window import MainWindow

RUN_TIMEOUT = 60_000
LATER = ("pyqtgraph", "superqt", "torch", "mlx", "transformers")
# what the first paint does without: the model thread and what it runs (imported when it starts, after the paint)
CORE_LATER = ("numpy", "psutil", "app.core.runs.model_thread", "app.core.decoding.generation",
              "app.core.sampler.sampling", "app.core.sampler.pipeline", "app.core.record.record",
              "app.core.record.trace", "app.core.record.trace_file", "app.core.session.branches",
              "app.core.decoding.surprisal", "app.core.remote.remote_run", "app.core.models.catalog",
              "app.core.codegen.snippets", "app.core.remote.secrets", "backends.remote.backend", "secrets",
              "hashlib", "datetime")  # (a branch's new seed; an autosave's time, offered back)

# A fresh process: the window made and shown; "shown" is the first turn of the event loop after its first paint
# (a zero timer posted from the window's paint event, as the charts' own are).
FIRST_PAINT = """
import json, sys, tempfile
LATER = sys.argv[1].split(",")
CORE_LATER = sys.argv[2].split(",")
from PySide6.QtCore import QEvent, QObject, QSettings, QTimer
from app.ui.main import make_app

app = make_app()
from app.ui.main_window import MainWindow

w = MainWindow(settings=QSettings(tempfile.mkdtemp() + "/s.ini", QSettings.Format.IniFormat))
seen = {"made": [m for m in LATER if m in sys.modules], "core_made": [m for m in CORE_LATER if m in sys.modules],
        "worker_made": w.playground._worker is not None}


def built():
    return [w.step_panel.chart.is_built, w.timeline.is_built]


def hidden_built():  # the Chat tab's editor, the prompt's surprisal and tokens
    return [w.prompt._chat.is_built, w.prompt._surprisal.is_built, w.prompt._boundaries.is_built]


seen["hidden_made"] = hidden_built()


class FirstPaint(QObject):
    def eventFilter(self, obj, ev):
        if ev.type() == QEvent.Type.Paint and "painted" not in seen:
            seen["painted"] = True
            QTimer.singleShot(0, self, self.shown)
        return False

    def shown(self):
        seen["shown"] = [m for m in LATER if m in sys.modules]
        seen["built_when_shown"] = built()
        seen["hidden_when_shown"] = hidden_built()
        seen["core_shown"] = [m for m in CORE_LATER if m in sys.modules]
        seen["worker_when_shown"] = w.playground._worker is not None


first_paint = FirstPaint()
w.installEventFilter(first_paint)
w.show()
for _ in range(100_000):  # the event loop alone: nothing here touches a chart
    app.processEvents()
    if "shown" in seen and all(built()) and w.playground._worker is not None and w.prompt._chat.is_built:
        break
seen["built"] = built()
seen["hidden_after"] = hidden_built()
seen["charts"] = [type(w.step_panel.chart.chart).__name__, type(w.timeline.chart).__name__]
seen["pyqtgraph_after"] = "pyqtgraph" in sys.modules
seen["worker_after"] = type(w.playground.worker).__name__ if w.playground._worker is not None else None
seen["model_thread_after"] = "app.core.runs.model_thread" in sys.modules
print(json.dumps(seen), flush=True)
import os; os._exit(0)
"""


@pytest.fixture(scope="module")
def seen() -> dict:
    """What the fresh process saw, made once for the tests that read it."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", FIRST_PAINT, ",".join(LATER), ",".join(CORE_LATER)],
                         capture_output=True, text=True, env=env, cwd=root, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_window_paints_before_pyqtgraph_superqt_or_a_framework_is_imported(seen: dict):
    assert seen["made"] == [] and seen["shown"] == []  # MainWindow() and its first paint import none of them
    assert seen["built_when_shown"] == [False, False]
    assert seen["built"] == [True, True] and seen["pyqtgraph_after"]  # then the loop built both, unasked
    assert seen["charts"] == ["StepChart", "TimelineChart"]


def test_the_window_paints_without_its_hidden_parts_and_builds_the_chat_tab_right_after(seen: dict):
    assert seen["hidden_made"] == seen["hidden_when_shown"] == [False, False, False]
    assert seen["hidden_after"] == [True, False, False]  # surprisal and tokens wait until they are toggled on


def test_hidden_parts_are_built_when_first_shown_or_used_and_look_as_before(qtbot, store):
    w = MainWindow(settings=store)  # never shown: never painted
    qtbot.addWidget(w)
    p = w.prompt
    assert not p._chat.is_built and not p._surprisal.is_built and not p._boundaries.is_built
    assert p.shown().messages == () and not p.chat_mode
    p.tabs.setCurrentIndex(1)  # the Chat tab, made current: built as it is shown
    assert p._chat.is_built and p.chat.parent() is p._chat and [t.role.currentText() for t in p.chat.turns] == ["user"]
    p.chat.turns[0].text.setPlainText("Hi")
    assert w.editing.prompt.chat and [m.content for m in w.editing.prompt.messages] == ["Hi"]
    w.show()
    qtbot.waitExposed(w)
    p.show_surprisal.setChecked(True)
    assert p._surprisal.is_built and p.surprisal.isVisible()  # shown at once, not a turn of the loop later
    p.show_tokens.setChecked(True)
    assert p._boundaries.is_built and p.boundaries.isVisible() and not p.tabs.isVisible()
    w.sessions.ask = lambda: "discard"
    w.close()


def test_a_lazy_host_builds_once_at_first_use_or_show(qtbot):
    made = []
    host = LazyHost(lambda: made.append(QLabel("x")) or made[-1])
    qtbot.addWidget(host)
    assert not host.is_built and made == []
    host.show()  # shown: built before it paints
    assert host.is_built and host.widget is made[0] and host.widget.isVisible() and len(made) == 1


def test_the_window_paints_before_the_model_thread_numpy_or_psutil_and_starts_the_thread_right_after(seen: dict):
    assert seen["core_made"] == [] and seen["core_shown"] == []  # MainWindow() and its first paint import none
    assert not seen["worker_made"] and not seen["worker_when_shown"]
    assert seen["worker_after"] == "ModelThread" and seen["model_thread_after"]  # then the loop started it, unasked


def test_the_model_thread_starts_at_first_use_when_that_comes_before_the_first_paint(qtbot, store):
    w = MainWindow(settings=store)  # never shown: never painted
    qtbot.addWidget(w)
    assert w.playground._worker is None
    w.playground.stop()  # nothing runs: Stop starts nothing
    assert w.playground._worker is None
    worker = w.playground.worker  # a verb reads it: started now, and the same one after
    assert worker.__class__.__name__ == "ModelThread" and w.playground.worker is worker
    w.sessions.ask = lambda: "discard"
    w.close()
    assert worker.stopped.is_set()


def test_the_charts_are_built_after_the_first_paint_and_draw_a_run(qtbot, window):
    qtbot.waitUntil(lambda: window.step_panel.chart.is_built and window.timeline.is_built)
    for host in (window.step_panel.chart, window.timeline):
        assert host.chart.parent() is host and host.chart.isVisible()
    window.prompt.set_prompt("Hello")
    window.sampler.editors["max_tokens"].setValue(8)
    with qtbot.waitSignal(window.playground.finished, timeout=RUN_TIMEOUT):
        window.generate()
    steps = window.playground.steps
    assert window.timeline.chart.n == len(steps) > 0
    assert window.step_panel.chart.chart.shown[0] is steps[-1].sample
    assert window.timeline.chart.cursor.value() == len(steps) - 1


def test_a_run_before_the_charts_are_built_builds_them_and_is_drawn(qtbot, tiny_path, store):
    w = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), "torch"))  # never shown: never painted
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: w.playground.info is not None, timeout=RUN_TIMEOUT)
    assert not w.step_panel.chart.is_built and not w.timeline.is_built
    w.sampler.editors["max_tokens"].setValue(6)
    with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT):
        w.generate()
    steps = w.playground.steps
    assert w.step_panel.chart.is_built and w.timeline.is_built  # the run's first step built them
    assert w.timeline.chart.n == len(steps) > 0 and w.step_panel.chart.chart.shown[0] is steps[-1].sample
    w.sessions.ask = lambda: "discard"
    w.close()


def test_a_host_builds_its_chart_once_at_first_use_and_carries_its_signals(qtbot):
    """`host.chart` builds the chart the first time it is read, inside the host, and is that one chart after;
    the host's signals carry the chart's."""
    step, timeline = ChartHost("StepChart"), TimelineHost()
    for host, cls in ((step, StepChart), (timeline, TimelineChart)):
        qtbot.addWidget(host)
        assert not host.is_built
        chart = host.chart
        assert isinstance(chart, cls) and host.is_built and host.chart is chart and chart.parent() is host
    with qtbot.waitSignal(timeline.uncertain_clicked) as got:
        timeline.chart.uncertain_clicked.emit(4)
    assert got.args == [4]


def test_until_built_a_host_is_the_charts_background(qtbot):
    host = ChartHost("StepChart")
    qtbot.addWidget(host)
    host.resize(200, 120)
    image = host.grab().toImage()  # grab paints it; the chart is made only when the event loop turns
    base = host.palette().color(host.backgroundRole())
    assert not host.is_built and image.pixelColor(100, 60) == base and image.pixelColor(3, 3) == base
    qtbot.waitUntil(lambda: host.is_built)
    assert host.chart.backgroundBrush().color() == base  # the same colour once the chart is there
