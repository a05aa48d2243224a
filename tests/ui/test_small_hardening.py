"""Small things a user meets in the window, each as it should be: the model bar resolves "auto" for the model
it names (torch for a .gguf file, on Apple Silicon too)."""

from __future__ import annotations

import pytest

from app.ui.model_bar import ModelBar
from backends import installed


@pytest.mark.skipif(not (installed("mlx") and installed("torch")), reason="needs both backends installed")
def test_on_apple_silicon_auto_shows_torchs_threads_for_a_gguf_file_and_mlxs_quantize_otherwise(qtbot):
    bar = ModelBar()
    qtbot.addWidget(bar)
    bar.apple = True  # resolve "auto" as on a Mac, on any machine
    bar.set_backend("torch")
    bar.set_backend("auto")
    assert bar.engine() == "mlx" and bar.quantize.isVisibleTo(bar) and not bar.threads.isVisibleTo(bar)
    bar.model.setCurrentText("/models/qwen2.5-0.5b-q8_0.gguf")  # typed or chosen: the fields follow
    assert bar.engine() == "torch" and bar.threads.isVisibleTo(bar) and not bar.quantize.isVisibleTo(bar)
    bar.model.setCurrentText("/models/Qwen2.5-0.5B")
    assert bar.engine() == "mlx" and bar.quantize.isVisibleTo(bar)
