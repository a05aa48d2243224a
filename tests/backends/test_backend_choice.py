"""Which backend "auto" means, resolved in one place (`backends.resolve_name`) for the model thread, the CLI and
the model bar: MLX on Apple Silicon and torch elsewhere, but torch for a .gguf file wherever it runs (MLX
cannot open one). The platform is an argument here, so Apple Silicon's choice is tested on any machine."""

from __future__ import annotations

import pytest

from backends import installed, is_gguf_source, resolve_name
from backends.base import ModelLoadError

both = pytest.mark.skipif(not (installed("mlx") and installed("torch")), reason="needs both backends installed")


@both
@pytest.mark.parametrize(("source", "apple", "want"), [
    ("/models/qwen2.5-0.5b-q8_0.gguf", True, "torch"),  # the case that picked MLX, which refuses GGUF
    ("C:/Models/Llama.Q4_K_M.GGUF", True, "torch"),
    ("/models/qwen2.5-0.5b-q8_0.gguf", False, "torch"),
    ("/models/Qwen2.5-0.5B", True, "mlx"),  # a model folder on Apple Silicon: MLX, as before
    ("Qwen/Qwen2.5-0.5B-Instruct-GGUF", True, "mlx"),  # a hub repo of GGUF files is a folder id, not a file
    ("/models/Qwen2.5-0.5B", False, "torch"),
    ("builtin", True, "mlx"),
])
def test_auto_picks_torch_for_a_gguf_file_and_mlx_on_apple_silicon_otherwise(source: str, apple: bool, want: str):
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
