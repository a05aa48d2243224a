"""The lean start on torch: a Llama-family folder built without transformers (`backends/torch/lean.py`) holds exactly
the weights and RoPE tables transformers' `from_pretrained` gives, so its logits and a whole run's record are those
of the same folder loaded through transformers, bit for bit; a folder it cannot reproduce loads through transformers;
a fresh torch run imports no transformers; and `logitlab bench` still times transformers' own model.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from app.core.events import Finished, Request
from app.core.models.sources import BUILTIN_PATH
from app.core.settings import SamplerSettings
from backends.base import LoadOptions
from tests.backends.test_lean_load import qwen_folder

pytestmark = pytest.mark.needs("torch")
ROOT = Path(__file__).resolve().parents[2]
CPU32 = LoadOptions(device="cpu", dtype="float32")
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


def variant(tiny_path: Path, to: Path, **config: object) -> Path:
    """A copy of the tiny Llama folder with `config` merged into its config.json (None: the key removed)."""
    shutil.copytree(tiny_path, to)
    merged = json.loads((to / "config.json").read_text()) | config
    (to / "config.json").write_text(json.dumps({k: v for k, v in merged.items() if v is not None}))
    return to


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, tiny_path: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lean-torch")
    return {"builtin": BUILTIN_PATH, "llama": tiny_path, "qwen2": qwen_folder(root / "qwen2"),
            # scaled RoPE in the older config spelling (rope_theta + rope_scaling), and with linear scaling
            "llama3-rope": variant(tiny_path, root / "llama3", rope_parameters=None, rope_theta=50000.0,
                                   rope_scaling=LLAMA3, max_position_embeddings=512),
            "linear-rope": variant(tiny_path, root / "linear", rope_parameters={
                "rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})}


def both(path: Path, options: LoadOptions, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """The folder loaded on the lean path, and through transformers."""
    from backends.torch import backend

    lean = backend.TorchBackend().load(path, options)
    with monkeypatch.context() as m:
        m.setattr(backend, "load_lean", lambda *_: None)
        full = backend.TorchBackend().load(path, options)
    return lean, full


@pytest.mark.parametrize(("name", "dtype"), [("builtin", "float32"), ("builtin", "bfloat16"), ("llama", "float32"),
                                             ("qwen2", "float32"), ("llama3-rope", "float32"),
                                             ("linear-rope", "float32")])
def test_the_lean_model_holds_transformers_weights_and_rope(folders, name, dtype, monkeypatch):
    import torch

    from backends.torch.lean import LeanLlama

    lean, full = both(folders[name], LoadOptions(device="cpu", dtype=dtype), monkeypatch)
    assert isinstance(lean.model, LeanLlama) and not isinstance(full.model, LeanLlama)
    mine, theirs = dict(lean.model.named_parameters()), dict(full.model.named_parameters())
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert mine[next(iter(mine))].dtype == getattr(torch, dtype)
    assert torch.equal(lean.fast.w.cos, full.fast.w.cos) and torch.equal(lean.fast.w.sin, full.fast.w.sin)
    assert lean.info == full.info
    ids = [[1, 5, 9, 2, 7, 3]]
    assert np.array_equal(lean.forward(ids, lean.new_cache()), full.forward(ids, full.new_cache()))


def test_a_run_on_the_lean_path_is_the_transformers_loaded_run(folders, monkeypatch):
    from app.core.decoding.generation import generate

    def run(model: object) -> list:
        req = Request(prompt="def add(a, b):", settings=SamplerSettings(temperature=0.8, top_k=20, max_tokens=12,
                                                                        seed=3), ignore_eos=True)
        fin = [e for e in generate(model, req, threading.Event()) if isinstance(e, Finished)][-1]  # type: ignore[arg-type]
        return [(s.token_id, s.text, s.sample.top_ids.tobytes(), s.sample.values.tobytes()) for s in fin.trace.steps]

    lean, full = both(folders["qwen2"], CPU32, monkeypatch)
    assert run(lean) == run(full)


@pytest.mark.parametrize("change", [
    {"quantization_config": {"quant_method": "bitsandbytes"}}, {"mlp_bias": True}, {"model_type": "gemma"},
    {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}},
    {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}},
    {"model_type": "mistral", "sliding_window": 16}, {"hidden_act": "gelu"},
])
def test_what_the_lean_path_cannot_reproduce_is_left_to_transformers(tiny_path, tmp_path, change):
    import torch

    from backends.torch.lean import load_lean

    folder = variant(tiny_path, tmp_path / "odd", **change)
    assert load_lean(folder, json.loads((folder / "config.json").read_text()), torch.float32) is None


def test_a_weight_missing_or_unknown_leaves_the_folder_to_transformers(tiny_path, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    from backends.torch.backend import TorchBackend
    from backends.torch.lean import LeanLlama, load_lean

    folder = variant(tiny_path, tmp_path / "extra")
    config = json.loads((folder / "config.json").read_text())
    weights = load_file(str(folder / "model.safetensors"))
    save_file(weights | {"model.layers.0.self_attn.q_norm.weight": torch.ones(4)}, str(folder / "model.safetensors"))
    assert load_lean(folder, config, torch.float32) is None
    weights.pop("model.layers.0.mlp.up_proj.weight")
    save_file(weights, str(folder / "model.safetensors"))
    assert load_lean(folder, config, torch.float32) is None
    (folder / "model.safetensors").unlink()
    assert load_lean(folder, config, torch.float32) is None  # (no weights file: check_folder says so)
    dynamic = variant(tiny_path, tmp_path / "dynamic", rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                                         "rope_theta": 10000.0})
    model = TorchBackend().load(dynamic, CPU32)  # transformers' model, run by the lean forward as before
    assert not isinstance(model.model, LeanLlama) and model.fast is not None


def test_the_benchmarks_baseline_is_transformers_own_model(monkeypatch):
    """`logitlab bench` times transformers' `generate` on its own copy of the folder: our model is not one."""
    import torch

    from backends.baselines import plain_model

    lean, _ = both(BUILTIN_PATH, CPU32, monkeypatch)
    hf = plain_model("torch", BUILTIN_PATH, lean).model
    assert type(hf).__name__ == "LlamaForCausalLM" and hasattr(hf, "generate")
    ids = [[1, 5, 9, 2, 7, 3]]
    with torch.inference_mode():
        theirs = hf(input_ids=torch.tensor(ids)).logits[:, -1].float().numpy()
    np.testing.assert_allclose(lean.forward(ids, lean.new_cache()), theirs, rtol=1e-4, atol=1e-4)


def test_a_fresh_torch_run_imports_no_transformers():
    code = ("import sys\nfrom app.cli.main import main\n"
            "rc = main(['generate', '--prompt', 'def', '--max-tokens', '3', '--backend', 'torch', '--seed', '0'])\n"
            "print('RC', rc, 'HEAVY', sorted(m for m in ('transformers', 'mlx') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert out.stdout.strip().endswith("RC 0 HEAVY []"), out.stdout + out.stderr
