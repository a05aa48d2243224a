"""mlx-lm's models without mlx-lm's package: its `__init__` imports its generate and convert modules, which import
transformers, and transformers imports torch (seconds at every start). The model modules themselves
(`mlx_lm.models.<arch>`, its cache) need only mlx.

`models_only()` registers `mlx_lm` as its package object without running its `__init__`, which runs at the first
use of anything it defines (so `from mlx_lm import load` still works, then paying the import). `load_lean` builds a
plain (unquantized, no custom code) Llama, Mistral, Qwen2 or Qwen3 folder as mlx-lm's `load_model` does: its
`ModelArgs` from config.json, its weights from the safetensors files, its `sanitize`, strict `load_weights`; None
for anything else, which then loads through mlx-lm's own loader.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from backends.base import ModelLoadError

LEAN_TYPES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}  # (mlx-lm's remapping)
UNUSUAL_KEYS = ("quantization", "quantization_config", "model_file", "text_config", "quantize_activations")


def models_only() -> None:
    """Make `mlx_lm.models.*` importable without running `mlx_lm/__init__.py` (nothing to do once it has run)."""
    if "mlx_lm" in sys.modules:
        return
    spec = importlib.util.find_spec("mlx_lm")
    if spec is None or spec.loader is None:
        raise ImportError("mlx-lm is not installed")
    package = importlib.util.module_from_spec(spec)  # (its __path__ set, its code not run)
    state = {"ran": False}

    def complete(name: str) -> Any:
        """The package's own names, from its `__init__`, run at their first use."""
        if state["ran"] or name.startswith("__"):
            raise AttributeError(f"module 'mlx_lm' has no attribute {name!r}")
        state["ran"] = True
        spec.loader.exec_module(package)  # type: ignore[union-attr]
        return getattr(package, name)

    package.__getattr__ = complete  # type: ignore[method-assign]
    sys.modules["mlx_lm"] = package


def load_lean(path: Path) -> tuple[nn.Module, dict] | None:
    """The model in `path` and its config, built as mlx-lm's `load_model` builds it; None where this path does not
    apply (another architecture, quantized weights, custom code, no safetensors)."""
    try:
        text = (path / "config.json").read_text(encoding="utf-8")
        config = json.loads(text)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(config, dict) or "__float__" in text or any(k in config for k in UNUSUAL_KEYS):
        return None
    arch_name = LEAN_TYPES.get(str(config.get("model_type")))
    files = sorted(path.glob("model*.safetensors"))
    if arch_name is None or not files:
        return None
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    if arch_name == "llama" and isinstance(heads, int) and isinstance(hidden, int) and heads and hidden % heads:
        raise ModelLoadError(f"{path / 'config.json'}: The hidden size ({hidden}) is not a multiple of the number of "
                             f"attention heads ({heads}).")  # (transformers' Llama rule, in its words)
    models_only()
    arch = importlib.import_module(f"mlx_lm.models.{arch_name}")
    model = arch.Model(arch.ModelArgs.from_dict(config))
    weights: dict[str, mx.array] = {}
    for f in files:
        weights.update(mx.load(str(f)))
    if hasattr(model, "sanitize"):
        weights = model.sanitize(weights)
    model.eval()
    model.load_weights(list(weights.items()), strict=True)
    return model, config
