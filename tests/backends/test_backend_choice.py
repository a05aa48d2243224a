"""Which backend "auto" means, resolved in one place (`backends.resolve_name`) for the model thread, the CLI and
the model bar: MLX on Apple Silicon and torch elsewhere, but for a .gguf file llama.cpp where it is installed, else
torch, wherever it runs (MLX cannot open one). The platform is an argument here, so Apple Silicon's choice is tested
on any machine."""

from __future__ import annotations

import pytest

from backends import installed, is_gguf_source, resolve_name
from backends.base import ModelLoadError

both = pytest.mark.skipif(not (installed("mlx") and installed("torch")), reason="needs both backends installed")
GGUF = "llamacpp" if installed("llamacpp") else "torch"  # what a .gguf file opens on under auto


@both
@pytest.mark.parametrize(("source", "apple", "want"), [
    ("/models/qwen2.5-0.5b-q8_0.gguf", True, GGUF),  # the case that picked MLX, which refuses GGUF
    ("C:/Models/Llama.Q4_K_M.GGUF", True, GGUF),
    ("/models/qwen2.5-0.5b-q8_0.gguf", False, GGUF),
    ("/models/Qwen2.5-0.5B", True, "mlx"),  # a model folder on Apple Silicon: MLX, as before
    ("Qwen/Qwen2.5-0.5B-Instruct-GGUF", True, "mlx"),  # a hub repo of GGUF files is a folder id, not a file
    ("/models/Qwen2.5-0.5B", False, "torch"),
    ("builtin", True, "mlx"),
])
def test_auto_picks_llama_cpp_or_torch_for_a_gguf_file_and_mlx_on_apple_silicon_otherwise(source: str, apple: bool,
                                                                                          want: str):
    assert resolve_name("auto", source, apple=apple) == want


@both
def test_a_named_backend_is_kept_even_for_a_gguf_file():
    assert resolve_name("mlx", "/m/x.gguf", apple=False) == "mlx"  # MLX says why it cannot open it, at load
    assert resolve_name("torch", "/m/folder", apple=True) == "torch"


def test_an_unknown_backend_is_refused_by_name():
    with pytest.raises(ModelLoadError, match="unknown backend 'jax'"):
        resolve_name("jax", "/m/x.gguf")


def test_a_gguf_source_is_a_file_name_ending_in_gguf():
    assert is_gguf_source("/a/b.gguf") and is_gguf_source(" B.GGUF ")
    assert not is_gguf_source("/a/gguf") and not is_gguf_source("owner/repo-GGUF") and not is_gguf_source("")


def test_without_llama_cpp_or_torch_a_gguf_file_says_what_to_install(monkeypatch: pytest.MonkeyPatch):
    import backends

    monkeypatch.setattr(backends, "installed", lambda name: name == "mlx")
    with pytest.raises(ModelLoadError, match=r'opens on the llama.cpp backend .* pip install "logitlab\[llamacpp\]"'):
        resolve_name("auto", "/m/x.gguf")


def test_a_gguf_file_torch_dequantized_says_what_runs_it_on_its_own_weights(monkeypatch: pytest.MonkeyPatch):
    import app.cli.arguments as arguments
    from app.core.events import Loaded
    from backends.base import ModelInfo

    info = ModelInfo("q4.gguf", "torch", "llama", 5_000_000, 2, 4, 2, 16, 64, 384, 1024, "float32", "cpu", None,
                     20_000_000, 256)
    monkeypatch.setattr(arguments, "installed", lambda name: False)
    line = arguments.loaded_line(Loaded(1, info, 0.5, None))
    assert line.endswith('(dequantized; llama.cpp runs it on its own weights: pip install "logitlab[llamacpp]" (on a '
                         'Mac, for Metal: CMAKE_ARGS="-DGGML_METAL=on" pip install llama-cpp-python))')
    monkeypatch.setattr(arguments, "installed", lambda name: True)
    assert "dequantized" not in arguments.loaded_line(Loaded(1, info, 0.5, None))
