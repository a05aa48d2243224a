"""What models the user has and whether they fit: the Hugging Face cache listing and a memory estimate.

Reads config.json and safetensors headers only (no framework, no tensor loads). `logitlab models` prints the
listing; the window's model picker shows the same entries.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from backends.base import ModelLoadError
from backends.checks import ConfigShape, read_config, safetensors_header
from backends.support import loadable_by

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U32": 4, "I16": 2, "I8": 1, "U8": 1,
               "F8_E4M3": 1, "F8_E5M2": 1, "BOOL": 1}
DEFAULT_CONTEXT = 4096  # tokens the memory check budgets for


@dataclass(frozen=True)
class ModelEntry:
    source: str  # what to type in the model field: a hub id or a folder
    path: str
    size_bytes: int
    model_type: str
    backends: tuple[str, ...]
    quantization: str | None


@dataclass(frozen=True)
class MemoryEstimate:
    weight_bytes: int
    parameters: int
    kv_bytes_per_1k_tokens: int
    available_bytes: int

    @property
    def needed_bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes_per_1k_tokens * DEFAULT_CONTEXT // 1000

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.available_bytes

    def message(self) -> str:
        gib = 2**30
        return (f"this model needs about {self.needed_bytes / gib:.1f} GiB ({self.weight_bytes / gib:.1f} GiB of "
                f"weights + {DEFAULT_CONTEXT:,} tokens of KV cache) and {self.available_bytes / gib:.1f} GiB is "
                "free: it would swap. Close other programs, or choose a smaller or quantized model")


def _quant_label(config: dict) -> str | None:
    q = config.get("quantization") or config.get("quantization_config")
    if not q:
        return None
    if "bits" in q:
        return f"{q['bits']}-bit, group {q.get('group_size', '?')}"
    return str(q.get("quant_method", "quantized"))


def estimate_memory(path: Path, config: dict | None = None, bytes_per_value: float | None = None) -> MemoryEstimate:
    """Weights (from the safetensors headers: exact) + KV cache per 1,000 tokens (from the config)."""
    config = config or read_config(path)
    weight_bytes = params = 0
    for f in sorted(path.glob("*.safetensors")):
        for t in safetensors_header(f).values():
            n = math.prod(t["shape"])
            params += n
            weight_bytes += n * DTYPE_BYTES.get(t["dtype"], 2)
    kv = ConfigShape.from_config(config).kv_bytes_per_token(bytes_per_value or 2)
    return MemoryEstimate(weight_bytes, params, kv * 1000, psutil.virtual_memory().available)


def check_fits(path: Path) -> None:
    est = estimate_memory(path)
    if not est.fits:
        raise ModelLoadError(f"{path.name}: {est.message()}")


def scan_cache(cache_dir: str | Path | None = None) -> list[ModelEntry]:
    """Models in the Hugging Face cache that have a config.json, newest first."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(cache_dir)
    except CacheNotFound:
        return []
    out = []
    for repo in sorted(info.repos, key=lambda r: -(r.last_modified or 0)):
        if repo.repo_type != "model" or not repo.revisions:
            continue
        rev = max(repo.revisions, key=lambda r: r.last_modified or 0)
        cfg_path = Path(rev.snapshot_path) / "config.json"
        if not cfg_path.exists():
            continue
        try:
            config = json.loads(cfg_path.read_text())
        except (OSError, ValueError):
            continue
        out.append(ModelEntry(repo.repo_id, str(rev.snapshot_path), repo.size_on_disk,
                              str(config.get("model_type", "?")), tuple(loadable_by(config)), _quant_label(config)))
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="logitlab models", description="List the models in the Hugging Face cache.")
    p.add_argument("--cache-dir", help="another cache folder (default: the standard HF cache)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    entries = scan_cache(args.cache_dir)
    if args.json:
        print(json.dumps([asdict(e) for e in entries], indent=1))
        return 0
    if not entries:
        print("No models in the Hugging Face cache. Open a local folder, or give a hub id to download one.")
        return 0
    print(f"{'model':48} {'size':>9}  {'type':14} {'backends':12} quantization")
    for e in entries:
        print(f"{e.source:48} {e.size_bytes / 2**20:7.0f} MB  {e.model_type:14} {','.join(e.backends) or '-':12} "
              f"{e.quantization or ''}")
    return 0
