"""The window says what the first token waits for with --compile: a real torch.compile of the tiny Llama's decode
step, shown in the model bar's status while it compiles ("Compiling the decode step (first run only)…"), then how
long it took; the status's tooltip says what --compile costs and how to go without it."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from app.core.models.sources import ModelSpec
from app.ui.main_window import MainWindow
from app.ui.panels.load_status import COMPILE_COST
from backends.base import LoadOptions
from tests.ui.conftest import RUN_TIMEOUT

pytest.importorskip("torch")

from backends.torch import static as torch_static  # after the skip (it imports torch)

SHOTS = os.environ.get("LOGITLAB_SHOTS")  # a folder: the status while compiling is saved there, at 900x600


def test_the_status_says_the_decode_step_is_compiling_then_how_long_it_took(qtbot, tiny_path: Path,
                                                                            store: QSettings, monkeypatch):
    monkeypatch.setattr(torch_static, "CPU_MODE", "default")  # a CPU's max-autotune tunes for minutes
    options = LoadOptions(device="cpu", dtype="float32", compile_len=48)
    w = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), "torch", options=options))
    qtbot.addWidget(w)
    w.resize(900, 600)
    w.show()
    qtbot.waitUntil(lambda: w.playground.info is not None, timeout=RUN_TIMEOUT)
    status = w.model_bar.status

    def compiling() -> bool:
        if "Compiling the decode step (first run only)…" not in status.text():
            return False
        if SHOTS:
            w.grab().save(str(Path(SHOTS) / "compile-status-900x600.png"))
        return True

    line = status.text()  # the loaded model's
    assert line.startswith(w.playground.info.name)
    w.prompt.set_prompt("Hello there")
    w.sampler.editors["max_tokens"].setValue(4)
    with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT):
        assert w.playground.generate(replace(w.playground.make_request(), ignore_eos=True))
        qtbot.waitUntil(compiling, timeout=RUN_TIMEOUT)
        assert status.text() == f"{line} · Compiling the decode step (first run only)…"  # the model's line stays
        assert COMPILE_COST in status.toolTip() and "without --compile" in status.toolTip()
        assert w.metrics.note.text() == "Compiling the decode step (first run only)…"  # where a small window shows it
    qtbot.waitUntil(lambda: "Compiled the decode step in " in status.text(), timeout=RUN_TIMEOUT)
    assert status.text().startswith(f"{line} · Compiled the decode step in ") and status.text().endswith(" s")
    assert "Compiling" not in status.text() and w.metrics.note.text() == status.text().split(" · ")[-1]
    w.close()
