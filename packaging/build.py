"""Build Logit Lab as a desktop bundle with PyInstaller: a one-folder app on Linux (`DIST/logitlab/logitlab`), a
`.app` on macOS (`DIST/Logit Lab.app`). Both carry the built-in model, its speculative draft and the built-in
thinking model (resources/builtin-model, builtin-draft and builtin-thinking, found through the package's own path,
which PyInstaller keeps under the bundle's root) and every transformers architecture; the
macOS one also carries MLX with its Metal kernels (mlx.metallib, beside libmlx). Builds for the machine it runs on.

    python3 -m pip install pyinstaller && python3 packaging/build.py [--dist DIR] [--work DIR] [--backends torch,mlx]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = Path(__file__).resolve().parent / "launcher.py"
# Imported by name at run time, invisible to PyInstaller's analysis: the backends (`backends.get_backend`), the
# model classes transformers and mlx-lm pick from a config's model_type.
DYNAMIC = {"torch": ["backends", "transformers.models"], "mlx": ["backends", "mlx_lm.models"]}
# transformers checks these packages' versions (importlib.metadata) before it reads a GGUF file.
METADATA = ["gguf", "accelerate"]
# Optional imports of our dependencies the app never uses: leaving them out saves minutes and hundreds of MB.
UNUSED = ["tkinter", "IPython", "matplotlib", "scipy", "pandas", "pytest", "hypothesis", "PyQt5", "PyQt6",
          "torchvision", "torchaudio", "tensorflow", "jax", "flax", "sklearn", "triton"]
DEFAULT_BACKENDS = {"darwin": "mlx,torch", "linux": "torch"}
SHIPPED_MODELS = ("builtin-model", "builtin-draft", "builtin-thinking")  # folders of resources/ the bundle carries


def common_args(dist: Path, work: Path, backends: list[str]) -> list[str]:
    args = ["--noconfirm", "--log-level", "WARN", "--distpath", str(dist), "--workpath", str(work),
            "--specpath", str(work), "--paths", str(ROOT),
            *(arg for name in SHIPPED_MODELS
              for arg in ("--add-data", f"{ROOT / 'resources' / name}{os.pathsep}resources/{name}"))]
    for package in sorted({p for b in backends for p in DYNAMIC[b]}):
        args += ["--collect-submodules", package]
    for package in (METADATA if "torch" in backends else []):
        args += ["--copy-metadata", package]
    for module in UNUSED + [m for b in ("mlx", "torch") if b not in backends for m in framework_modules(b)]:
        args += ["--exclude-module", module]
    return args


def framework_modules(backend: str) -> list[str]:
    return {"mlx": ["mlx", "mlx_lm"], "torch": ["torch", "accelerate", "gguf"]}[backend]


def linux_args() -> list[str]:
    return ["--name", "logitlab", "--onedir", "--console"]


def macos_args(backends: list[str]) -> list[str]:
    args = ["--name", "Logit Lab", "--windowed", "--osx-bundle-identifier", "org.logitlab.LogitLab"]
    if "mlx" in backends:  # mlx.metallib (the Metal kernels) and libmlx.dylib, kept side by side as MLX expects
        args += ["--collect-all", "mlx", "--collect-all", "mlx_lm"]
    return args


def build(dist: Path, work: Path, backends: list[str]) -> Path:
    """Run PyInstaller; the path of the bundle's executable."""
    import PyInstaller.__main__

    mac = sys.platform == "darwin"
    platform_args = macos_args(backends) if mac else linux_args()
    PyInstaller.__main__.run([*common_args(dist, work, backends), *platform_args, str(LAUNCHER)])
    if mac:
        return dist / "Logit Lab.app" / "Contents" / "MacOS" / "Logit Lab"
    return dist / "logitlab" / "logitlab"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dist", type=Path, default=ROOT / "dist", help="where the bundle goes (default: dist/)")
    p.add_argument("--work", type=Path, default=ROOT / "build", help="PyInstaller's work folder (default: build/)")
    p.add_argument("--backends", default=DEFAULT_BACKENDS.get(sys.platform, "torch"),
                   help="comma-separated: torch, mlx (default: mlx,torch on macOS, torch on Linux)")
    args = p.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    if not backends or set(backends) - set(DYNAMIC):
        p.error(f"--backends takes torch and/or mlx, got {args.backends!r}")
    exe = build(args.dist, args.work, backends)
    print(f"built {exe}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
