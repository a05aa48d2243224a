"""The Linux one-folder bundle as a user gets it: built by packaging/build.py (PyInstaller, minutes), then run from
outside the source tree, offline, with no display: a one-token `generate` on the built-in model it carries, a
`--screenshot` of the window, and a GGUF file. Slow: deselected by default, run with `pytest -m slow`."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.core.models.sources import BUILTIN_PATH

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the test builds the Linux bundle"),
]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("PyInstaller")
    out = tmp_path_factory.mktemp("bundle")
    r = subprocess.run([sys.executable, str(ROOT / "packaging" / "build.py"), "--dist", str(out / "dist"),
                        "--work", str(out / "work")], capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stderr[-4000:]
    exe = out / "dist" / "logitlab" / "logitlab"
    assert exe.is_file() and os.access(exe, os.X_OK)
    return exe


def run(exe: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The bundle alone: no source tree on the path, no display, no network, a fresh config folder."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DISPLAY", "WAYLAND_DISPLAY",
                                                            "QT_QPA_PLATFORM")}
    env.update(HF_HUB_OFFLINE="1", XDG_CONFIG_HOME=str(cwd / "config"), HF_HOME=str(cwd / "hf"))
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


def greedy_first_token(path: Path, prompt: str) -> int:
    """The token the installed app draws greedily: what the bundle must draw too."""
    from app.core.decoding.generation import generate
    from app.core.events import Request, Step
    from app.core.settings import SamplerSettings
    from backends.base import LoadOptions
    from backends.torch.backend import TorchBackend

    model = TorchBackend().load(path, LoadOptions(device="cpu", dtype="float32"))
    request = Request(prompt=prompt, settings=SamplerSettings(temperature=0, max_tokens=1))
    return next(e.token_id for e in generate(model, request, threading.Event()) if isinstance(e, Step))


@pytest.mark.parametrize("name", ["builtin-model", "builtin-draft", "builtin-thinking"])
def test_the_bundle_carries_the_builtin_models(bundle: Path, name: str):
    shipped = bundle.parent / "_internal" / "resources" / name
    for f in (BUILTIN_PATH.parent / name).iterdir():
        assert (shipped / f.name).read_bytes() == f.read_bytes(), f.name


def test_the_bundle_generates_one_token_on_its_builtin_model(bundle: Path, tmp_path: Path):
    r = run(bundle, "generate", "--prompt", "import ", "--max-tokens", "1", "--temperature", "0", "--device", "cpu",
            "--dtype", "float32", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    step, summary = (json.loads(line) for line in r.stdout.splitlines())
    assert summary["generated_tokens"] == 1 and summary["finish_reason"] == "length"
    assert step["token_id"] == greedy_first_token(BUILTIN_PATH, "import ")


def test_the_bundle_saves_a_screenshot_of_the_window_without_a_display(bundle: Path, tmp_path: Path):
    shot = tmp_path / "window.png"
    r = run(bundle, "--screenshot", str(shot), "--prompt", "import ", "--max-tokens", "4", "--seed", "1",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", header[16:24])
    assert width >= 900 and height >= 600  # the whole window, not an empty grab


def test_the_bundle_opens_a_gguf_file(bundle: Path, tiny_path: Path, tmp_path: Path):
    from tests.backends.test_gguf import write_gguf

    gguf = write_gguf(tiny_path, tmp_path / "tiny.gguf")
    r = run(bundle, "generate", "--model", str(gguf), "--prompt", "def add(a, b):", "--max-tokens", "1",
            "--temperature", "0", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[0])["token_id"] == greedy_first_token(tiny_path, "def add(a, b):")
