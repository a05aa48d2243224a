"""The built-in model means something: its distributions look like Python, through both backends.
Each check here fails on random weights (see test_the_checks_fail_on_random_weights)."""

from __future__ import annotations

import re
import threading

import pytest

from app.core.decoding.generation import generate
from app.core.events import Finished, Request, Step
from app.core.models.sources import BUILTIN_PATH
from app.core.settings import SamplerSettings

MODULES = {"os", "sys", "re", "io", "time", "json", "math", "types", "typing", "warnings", "collections",
           "functools", "itertools", "threading", "logging", "abc", "string", "struct", "socket", "errno", "copy",
           "weakref", "operator", "subprocess", "tempfile", "unittest", "codecs", "enum", "contextlib", "stat"}


def first_step(model, prompt: str):
    req = Request(prompt=prompt, settings=SamplerSettings(temperature=0, max_tokens=1), top_n=10)
    return next(e.trace for e in generate(model, req, threading.Event()) if isinstance(e, Step))


def greedy(model, prompt: str, n: int = 48) -> str:
    req = Request(prompt=prompt, settings=SamplerSettings(temperature=0, max_tokens=n))
    return "".join(e.text for e in generate(model, req, threading.Event()) if isinstance(e, Step))


def import_names(model) -> set[str]:
    return {t.strip() for t in first_step(model, "import ").top_texts}


def test_after_import_the_top_10_holds_common_module_names(builtin):
    assert len(import_names(builtin) & MODULES) >= 3


def test_after_def_init_the_top_token_is_self(builtin):
    assert first_step(builtin, "class Point:\n    def __init__(").top_texts[0].startswith("self")


def test_for_i_in_range_continues_plausibly(builtin):
    top5 = [t.strip() for t in first_step(builtin, "for i in range(").top_texts[:5]]
    assert {"len", "n", "0", "1", "self", "10", "2", "size", "count"} & set(top5), top5


PYTHON_BODY = re.compile(r'^\n( {4})+("""|#|return\b|if\b|for\b|while\b|try:|with\b|raise\b|[A-Za-z_][\w.]* *=|'
                         r'[A-Za-z_][\w.]*\()')


def test_greedy_fibonacci_looks_like_python(builtin):
    text = greedy(builtin, "def fibonacci(n):")
    assert PYTHON_BODY.match(text), text  # a new line, indented, opening with a Python statement
    assert text.count("\n") >= 1 and "\t" not in text

def test_the_model_card_and_size_are_as_promised():
    card = (BUILTIN_PATH / "README.md").read_text()
    assert "validation loss" in card and "PSF" in card
    size = sum(f.stat().st_size for f in BUILTIN_PATH.iterdir())
    assert size < 40 * 2**20


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_the_checks_fail_on_random_weights(tmp_path, backend: str):
    """The same checks on a random model of the same shape and tokenizer, through each backend: they must not pass.
    The weights are numpy's seeded draws as transformers initializes a Llama (normal(0, initializer_range) for each
    matrix, ones for each norm): no framework is needed to make them."""
    import json
    import shutil

    import numpy as np
    from safetensors.numpy import load_file, save_file

    from backends import get_backend
    from backends.base import LoadOptions

    rand = tmp_path / "random"
    shutil.copytree(BUILTIN_PATH, rand)
    std = json.loads((rand / "config.json").read_text())["initializer_range"]
    rng = np.random.default_rng(0)
    weights = {name: (rng.normal(0, std, w.shape) if w.ndim == 2 else np.ones(w.shape)).astype(w.dtype)
               for name, w in load_file(rand / "model.safetensors").items()}
    save_file(weights, str(rand / "model.safetensors"), metadata={"format": "pt"})
    m = get_backend(backend).load(rand, LoadOptions())
    assert len(import_names(m) & MODULES) < 3
    assert not first_step(m, "class Point:\n    def __init__(").top_texts[0].startswith("self")
    fin = [e for e in generate(m, Request(prompt="x", settings=SamplerSettings(max_tokens=2)), threading.Event())
           if isinstance(e, Finished)]
    assert fin
