"""Which backends can load a model folder, decided from its config.json without importing any framework.

A model type is supported when the installed transformers / mlx-lm ships a module for it (looked up on disk
through the package's location, which does not import the package). MLX-quantized checkpoints load on MLX only.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

# mlx-lm runs some architectures with another's module (mlx_lm.utils.MODEL_REMAPPING)
MLX_REMAP = {"mistral": "llama", "llava": "mistral3", "phi-msft": "phixtral", "falcon_mamba": "mamba",
             "kimi_k2": "deepseek_v3", "qwen2_5_vl": "qwen2_vl", "minimax_m2": "minimax", "iquestcoder": "llama"}


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def torch_supports(model_type: str) -> bool:
    root = _package_dir("transformers")  # mlx-lm installs transformers too: torch itself must be there as well
    return (root is not None and importlib.util.find_spec("torch") is not None
            and (root / "models" / model_type.replace("-", "_")).is_dir())


def mlx_supports(model_type: str) -> bool:
    root = _package_dir("mlx_lm")
    name = MLX_REMAP.get(model_type, model_type).replace("-", "_")
    return root is not None and (root / "models" / f"{name}.py").is_file()


def loadable_by(config: dict) -> list[str]:
    """Backends (of those installed) that can load a model with this config."""
    mtype = str(config.get("model_type", ""))
    out = []
    if mlx_supports(mtype):
        out.append("mlx")
    if torch_supports(mtype) and "quantization" not in config:
        out.append("torch")
    return out
