"""Backends: the framework-specific half of Logit Lab. Each one is imported only when it is used.

`auto` picks MLX on Apple Silicon and torch elsewhere (MLX's CPU build is ~4x slower than torch on Linux),
falling back to whichever is installed; a .gguf file opens on llama.cpp where llama-cpp-python is installed (its
own quantized weights), else on torch (dequantized), never on MLX.
`resolve_name` is the one place "auto" is resolved: the model thread (window and CLI) and the model bar ask it.
`BACKENDS` declares, per backend, whether it loads a local folder (`get_backend`) or `connects` to a server.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
from dataclasses import dataclass

from backends.base import Backend, Capabilities, LoadedModel, LoadOptions, Model, ModelInfo, ModelLoadError

__all__ = ["Backend", "Capabilities", "LoadOptions", "LoadedModel", "Model", "ModelInfo", "ModelLoadError",
           "connects", "get_backend", "installed", "is_gguf_source", "resolve_name"]


@dataclass(frozen=True)
class Entry:
    """One backend: where its class is, the modules it needs, and whether it `connects` to a server (its class
    has `connect(...)`) rather than loading a local folder (`load(path, options)`, a `Backend`)."""

    module: str
    cls: str
    needs: tuple[str, ...]
    connects: bool = False


BACKENDS = {"mlx": Entry("backends.mlx.backend", "MlxBackend", ("mlx", "mlx_lm")),
            "torch": Entry("backends.torch.backend", "TorchBackend", ("torch", "transformers")),
            "llamacpp": Entry("backends.llamacpp.backend", "LlamaCppBackend", ("llama_cpp",)),
            "remote": Entry("backends.remote.backend", "RemoteBackend", ("httpx",), connects=True)}
# (remote: only an HTTP client)
INSTALL_HINT = {"mlx": 'pip install "logitlab[mlx]"', "torch": 'pip install "logitlab[torch]"',
                "llamacpp": 'pip install "logitlab[llamacpp]" (on a Mac, for Metal: CMAKE_ARGS="-DGGML_METAL=on" '
                            "pip install llama-cpp-python)",
                "remote": "pip install httpx"}


def installed(name: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in BACKENDS[name].needs)


def connects(name: str) -> bool:
    """Whether the backend `name` connects to a server (given a base URL) instead of loading a folder."""
    return name in BACKENDS and BACKENDS[name].connects


def apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def is_gguf_source(source: str | os.PathLike[str]) -> bool:
    """A model source naming a GGUF file (llama.cpp, LM Studio): the llama.cpp and torch backends open those."""
    return str(source).strip().lower().endswith(".gguf")


def resolve_name(name: str, source: str | os.PathLike[str] = "", apple: bool | None = None) -> str:
    """The backend `name` means for the model `source`: "auto" resolved (`apple`: whether this is Apple Silicon,
    None: ask the platform), an explicit name checked. Raises ModelLoadError naming what to install."""
    if name != "auto":
        if name not in BACKENDS:
            raise ModelLoadError(f"unknown backend {name!r}: choose auto, mlx, torch, llamacpp or remote")
        if not installed(name):
            raise ModelLoadError(f"the {name} backend is not installed: {INSTALL_HINT[name]}")
        return name
    if is_gguf_source(source):
        for n in ("llamacpp", "torch"):
            if installed(n):
                return n
        raise ModelLoadError(f"a .gguf file opens on the llama.cpp backend (or on torch, dequantized), and neither "
                             f"is installed: {INSTALL_HINT['llamacpp']}")
    preferred = ["mlx", "torch"] if (apple_silicon() if apple is None else apple) else ["torch", "mlx"]
    for n in preferred:
        if installed(n):
            return n
    raise ModelLoadError(f"no backend is installed: {INSTALL_HINT['torch']} (or [mlx] on a Mac)")


def get_backend(name: str = "auto", source: str | os.PathLike[str] = "") -> Backend:
    """The backend that loads the model folder or file `source` (a .gguf file, under "auto": llama.cpp, else
    torch)."""
    entry = BACKENDS[resolve_name(name, source)]
    if entry.connects:
        raise ModelLoadError(f"the {name} backend connects to a server: give a base URL and a model name")
    return getattr(importlib.import_module(entry.module), entry.cls)()
