"""The project's own rules, machine-checked: import contracts (ARCHITECTURE.md) and ruff."""

from __future__ import annotations

import ast
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


# -- the house: rooms a newcomer can find from the tree (issue "Rooms with corridors") ------------------------------
MAX_MODULES, MAX_LINES, MAX_METHODS = 15, 400, 20
# Classes that implement one operation of a backend contract per method (backends/ops.py `ArrayOps` and the
# frameworks' implementations): their size is the contract's, and splitting them would split the contract.
CONTRACT_CLASSES = {"ArrayOps", "TorchOps", "MlxOps", "NumpyOps"}


def _modules() -> list[Path]:
    return [p for top in ("app", "backends") for p in sorted((ROOT / top).rglob("*.py"))]


def test_no_package_holds_more_than_15_flat_modules():
    crowded = {}
    for d in {p.parent for p in _modules()}:
        n = len([p for p in d.glob("*.py") if p.name != "__init__.py"])
        if n > MAX_MODULES:
            crowded[str(d.relative_to(ROOT))] = n
    assert not crowded, crowded


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_no_class_has_more_than_about_20_methods():
    big = {}
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ClassDef) and node.name not in CONTRACT_CLASSES:
                n = sum(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) for b in node.body)
                if n > MAX_METHODS:
                    big[f"{p.relative_to(ROOT)}:{node.name}"] = n
    assert not big, big
