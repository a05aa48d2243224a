"""The project's own rules, machine-checked: import contracts (ARCHITECTURE.md) and ruff."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    r = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                        "lint_imports_command()"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_ruff_is_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    r = subprocess.run([ruff, "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout


def test_the_window_module_does_not_import_frameworks_at_start():
    code = ("import sys, app.cli.main, app.core.runs.model_thread, app.core.decoding.generation; "
            "print(sorted(m for m in ('torch', 'mlx', 'transformers', 'mlx_lm') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr
