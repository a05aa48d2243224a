"""llama.cpp in the window: the model bar lists it (off, with what to install, where it is not installed); for a
.gguf file under auto it shows the threads box and hides the dtype box (a GGUF file runs in the types it was
written in, so the spec asks for none); the window opens a GGUF file on it and streams a run into the charts."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.core.models.sources import ModelSpec
from app.ui.main_window import MainWindow
from app.ui.panels.model_bar import ModelBar
from backends import installed
from tests.gguf_files import write_gguf
from tests.ui.conftest import RUN_TIMEOUT

needs_llamacpp = pytest.mark.skipif(not installed("llamacpp"), reason="llama-cpp-python is not installed")


def test_the_bar_offers_llama_cpp_and_shows_only_its_fields_for_a_gguf_file(qtbot):
    bar = ModelBar()
    qtbot.addWidget(bar)
    i = bar.backend.findData("llamacpp")
    item = bar.backend.model().item(i)
    assert bar.backend.itemText(i) == "llama.cpp"
    if not installed("llamacpp"):
        assert not item.isEnabled() and 'pip install "logitlab[llamacpp]"' in item.toolTip()
        return
    bar.dtype.setCurrentIndex(bar.dtype.findData("float32"))
    bar.set_backend("auto")
    bar.model.setCurrentText("/models/qwen2.5-0.5b-instruct-q4_k_m.gguf")
    assert bar.engine() == "llamacpp"
    assert bar.threads.isVisibleTo(bar) and not bar.dtype.isVisibleTo(bar) and not bar.quantize.isVisibleTo(bar)
    assert bar.spec().options.dtype is None  # the box's float32 is torch's and MLX's
    bar.set_backend("torch")  # the same file, dequantized by torch: its dtype applies again
    assert bar.dtype.isVisibleTo(bar) and bar.spec().options.dtype == "float32"


@needs_llamacpp
def test_the_window_opens_a_gguf_file_on_llama_cpp_and_streams_a_run(qtbot, tiny_path: Path, tmp_path: Path, store):
    gguf = write_gguf(tiny_path, tmp_path / "tiny-f32.gguf")
    w = MainWindow(settings=store, spec=ModelSpec(str(gguf), "auto"))
    qtbot.addWidget(w)
    w.show()
    w.sampler.seed.setValue(3)
    w.sampler.lock.setChecked(True)
    qtbot.waitUntil(lambda: w.playground.info is not None and w.playground.tokenizer is not None, timeout=RUN_TIMEOUT)
    assert w.playground.info.backend == "llamacpp"
    w.prompt.set_prompt("def add(a, b):")
    w.sampler.editors["max_tokens"].setValue(16)
    with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT) as done:
        qtbot.keyClick(w.prompt.completion, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    steps = w.playground.steps
    assert done.args[0].metrics.generated_tokens == len(steps) == 16 and w.timeline.chart.n == 16
    assert w.step_panel.chart.chart.shown[0] is steps[-1].sample  # the chart draws the recorded step
    w.close()
