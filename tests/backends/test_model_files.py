"""Opening real model folders: the HF cache, broken folders, safe defaults and their opt-ins, quantization,
the memory check. Every model here is made by the test itself."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.core.decoding.generation import generate
from app.core.events import Request
from app.core.models.catalog import check_fits, estimate_memory, scan_cache
from app.core.settings import SamplerSettings
from backends import installed
from backends.base import LoadOptions, ModelLoadError, PickleRefusedError, RemoteCodeRefusedError
from tests.tiny import LOCAL_BACKENDS, make_model, make_remote_code_model

ENV = {**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error"}


def load(backend: str, path: Path, **opts):
    from backends import get_backend

    return get_backend(backend).load(path, LoadOptions(**opts))


def works(model) -> bool:
    events = list(generate(model, Request(prompt="Hello", settings=SamplerSettings(max_tokens=4, seed=0)),
                           threading.Event()))
    return events[-1].metrics.generated_tokens > 0


def place_in_hf_cache(cache: Path, repo_id: str, folder: Path) -> Path:
    """The layout huggingface_hub writes: blobs by hash, a snapshot of symlinks, refs/main."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snap = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for f in folder.iterdir():
        data = f.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snap


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_a_model_in_the_hf_cache_is_listed_and_opens_offline(tiny_path: Path, tmp_path: Path):
    cache = tmp_path / "hub"
    place_in_hf_cache(cache, "someone/tiny-llama", tiny_path)
    (entry,) = scan_cache(cache)
    assert entry.source == "someone/tiny-llama" and entry.model_type == "llama"
    assert entry.backends == LOCAL_BACKENDS and entry.size_bytes > 100_000
    env = {**ENV, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "XDG_CONFIG_HOME": str(tmp_path / "config")}
    r = subprocess.run([sys.executable, "-m", "app", "models", "--cache-dir", str(cache)], capture_output=True,
                       text=True, env=env, timeout=60)
    assert "someone/tiny-llama" in r.stdout and ",".join(LOCAL_BACKENDS) in r.stdout
    r = subprocess.run([sys.executable, "-m", "app", "generate", "--model", "someone/tiny-llama", "--prompt", "Hi",
                        "--max-tokens", "3", "--backend", LOCAL_BACKENDS[0]], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_broken_folders_say_which_file_or_why(tiny_path: Path, tmp_path: Path, backend: str):
    no_config = copy(tiny_path, tmp_path / "no-config")
    (no_config / "config.json").unlink()
    with pytest.raises(ModelLoadError, match=r"has no config\.json"):
        load(backend, no_config)

    truncated = copy(tiny_path, tmp_path / "truncated")
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match=r"model.safetensors is truncated"):
        load(backend, truncated)

    no_tok = copy(tiny_path, tmp_path / "no-tokenizer")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (no_tok / f).unlink()
    with pytest.raises(ModelLoadError, match="has no tokenizer"):
        load(backend, no_tok)

    alien = copy(tiny_path, tmp_path / "alien")
    cfg = json.loads((alien / "config.json").read_text())
    cfg.update(model_type="zorblax", architectures=["ZorblaxForCausalLM"])
    (alien / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="zorblax"):
        load(backend, alien)


@pytest.mark.skipif(not installed("torch"), reason="torch backend not installed (only it opens pickle weights)")
def test_pickle_weights_are_refused_unless_allowed(tmp_path: Path):
    import torch
    from transformers import AutoModelForCausalLM

    path = make_model(tmp_path / "pickled")
    torch.save(AutoModelForCausalLM.from_pretrained(path).state_dict(), path / "pytorch_model.bin")
    (path / "model.safetensors").unlink()
    assert any(path.glob("*.bin"))
    with pytest.raises(PickleRefusedError, match="only pickle weights"):
        load("torch", path)
    model = load("torch", path, allow_pickle=True)  # transformers loads it with weights_only=True
    assert works(model) and torch.__version__ >= "2.6"


def test_remote_code_is_refused_unless_allowed(tiny_path: Path, tmp_path: Path):
    path = make_remote_code_model(tiny_path, tmp_path / "remote")
    for backend in LOCAL_BACKENDS:
        with pytest.raises(RemoteCodeRefusedError, match="needs code from its repository"):
            load(backend, path)
    if installed("torch"):  # transformers runs a repository's code; mlx-lm has no such loader
        model = load("torch", path, trust_remote_code=True)
        assert type(model.model).__name__ == "TinyRemoteForCausalLM" and works(model)


def test_mlx_quantize_on_load_lowers_the_memory_and_still_generates(tmp_path: Path):
    if not installed("mlx"):
        pytest.skip("mlx backend not installed")
    path = make_model(tmp_path / "q", hidden=128, layers=2)
    full = load("mlx", path)
    q4 = load("mlx", path, quantize_bits=4)
    assert q4.info.quantization == "4-bit, group 64" and q4.info.unquantized_bytes == full.info.weight_bytes
    assert q4.info.weight_bytes < 0.35 * full.info.weight_bytes
    assert q4.info.parameters == full.info.parameters
    assert works(q4)


def test_memory_estimate_is_exact_for_weights_and_refuses_what_cannot_fit(tiny_path: Path, tmp_path: Path, model):
    est = estimate_memory(tiny_path)
    assert est.weight_bytes == model.info.weight_bytes and est.parameters == model.info.parameters
    assert est.kv_bytes_per_1k_tokens == 2 * 2 * 2 * 16 * 2 * 1000  # 2 × layers × KV heads × head dim × fp16
    check_fits(tiny_path)
    huge = copy(tiny_path, tmp_path / "huge")
    size = 300_000 * 300_000 * 4  # 360 GB of float32 weights, as a sparse file: no byte of them is written
    header = json.dumps({"w": {"dtype": "F32", "shape": [300_000, 300_000], "data_offsets": [0, size]}}).encode()
    with (huge / "model.safetensors").open("wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + size)
    with pytest.raises(ModelLoadError, match="GiB is free: it would swap"):
        check_fits(huge)


def _cut(data: bytes) -> bytes:
    return data[: len(data) // 2]


@pytest.mark.parametrize(("damage", "message"), [
    (_cut, r"model\.safetensors is truncated: its [\d,]+ bytes on disk do not hold what its header lists"),
    (lambda d: d[:20], r"model\.safetensors is truncated"),  # the header itself cut short
    (lambda d: d[:5], r"model\.safetensors is truncated or empty \(5 bytes\)"),
    (lambda d: d[:8] + b"}" + d[9:], r"model\.safetensors has a damaged header \(invalid JSON"),
])
def test_a_damaged_safetensors_file_is_named_with_what_is_wrong(tiny_path: Path, tmp_path: Path, damage,
                                                                message: str):
    from backends.checks import check_safetensors

    f = tmp_path / "model.safetensors"
    f.write_bytes(damage((tiny_path / "model.safetensors").read_bytes()))
    with pytest.raises(ModelLoadError, match=message):
        check_safetensors(f)


def test_the_config_shape_is_read_once_for_every_layout():
    from backends.checks import ConfigShape

    flat = {"num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 512, "vocab_size": 1000,
            "max_position_embeddings": 2048}
    shape = ConfigShape.from_config(flat)  # no KV heads, no head dim: the defaults transformers fills in
    assert shape == ConfigShape(layers=4, heads=8, kv_heads=8, head_dim=64, hidden=512, vocab=1000, context=2048)
    nested = ConfigShape.from_config({"model_type": "vlm", "text_config": {**flat, "num_key_value_heads": 2,
                                                                           "head_dim": 128}})
    assert (nested.kv_heads, nested.head_dim) == (2, 128)
    assert nested.kv_bytes_per_token(2) == 2 * 4 * 2 * 128 * 2
    assert ConfigShape.from_config({}).kv_bytes_per_token(2) == 0


@pytest.mark.skipif(not installed("torch"), reason="torch backend not installed")
def test_cuda_path_when_a_gpu_is_present(tiny_path: Path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine")
    model = load("torch", tiny_path)
    assert model.info.device.startswith("cuda") and model.info.dtype in ("bfloat16", "float16")
    assert works(model)
