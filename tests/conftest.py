"""Session fixtures: tiny real models made once per test session, loaded through the real loaders."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# The user's own folders stay untouched on Linux (CI): settings, presets, sessions and autosaves go to folders of
# the test run's (platformdirs reads XDG_* on every call there; on macOS it does not). The HF cache is left
# alone: tests make their models.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="logitlab-tests-config-")
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="logitlab-tests-data-")
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="logitlab-tests-state-")

from pathlib import Path

import pytest
from hypothesis import settings

from backends import installed
from backends.base import LoadOptions
from tests.tiny import make_model

# Fuzz tests draw the same examples on every machine and every run: no test's outcome depends on luck or on a
# local example database (a fresh clone found a bug the developer's database never replayed; it is a test now).
settings.register_profile("logitlab", derandomize=True, database=None)
settings.load_profile("logitlab")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test parametrized by a local backend, or marked `needs("torch")`, skips where that backend is not installed
    (`.[torch]` or `.[mlx]` alone gives a green suite with the other backend's tests skipped)."""
    callspec = getattr(item, "callspec", None)
    names = {callspec.params.get("backend")} if callspec else set()
    names |= {name for mark in item.iter_markers("needs") for name in mark.args}
    for name in sorted(n for n in names if n in ("torch", "mlx")):
        if not installed(name):
            pytest.skip(f"{name} backend not installed")


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("models") / "tiny-llama", chat=True)


@pytest.fixture(scope="session")
def torch_model(tiny_path: Path):
    if not installed("torch"):
        pytest.skip("torch backend not installed")
    from backends.torch.backend import TorchBackend

    return TorchBackend().load(tiny_path, LoadOptions(device="cpu", dtype="float32"))


@pytest.fixture(scope="session")
def mlx_model(tiny_path: Path):
    if not installed("mlx"):
        pytest.skip("mlx backend not installed")
    from backends.mlx.backend import MlxBackend

    return MlxBackend().load(tiny_path, LoadOptions(dtype="float32"))


@pytest.fixture(scope="session", params=["torch", "mlx"])
def model(request: pytest.FixtureRequest):
    return request.getfixturevalue(f"{request.param}_model")


@pytest.fixture(scope="session", params=["torch", "mlx"])
def builtin(request: pytest.FixtureRequest):
    """The shipped built-in model, through each backend's real loader."""
    from app.core.models.sources import BUILTIN_PATH

    if not (BUILTIN_PATH / "config.json").exists():
        pytest.fail(f"the built-in model is missing from {BUILTIN_PATH}")
    if not installed(request.param):
        pytest.skip(f"{request.param} backend not installed")
    from backends import get_backend

    return get_backend(request.param).load(BUILTIN_PATH, LoadOptions())
