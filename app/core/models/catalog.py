"""What models the user has and whether they fit: the Hugging Face cache listing and a memory estimate.

Reads config.json, safetensors headers and GGUF headers only (no framework, no tensor loads). Lists model
folders and `.gguf` files in the HF cache and in folders the user adds; one that cannot be read or checked (a
damaged header, a config with a wrong field, a link to a file that is gone) is listed as type "?", loadable by
no backend, with why (`problem`). `logitlab models` prints the listing, then a line per such problem; the
window's model picker shows the same entries.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import psutil

from app.core.files import parse_json
from app.core.models.sources import (
    BUILTIN_DRAFT_LABEL,
    BUILTIN_DRAFT_NAME,
    BUILTIN_DRAFT_PATH,
    BUILTIN_LABEL,
    BUILTIN_NAME,
    BUILTIN_PATH,
    BUILTIN_THINKING_LABEL,
    BUILTIN_THINKING_NAME,
    BUILTIN_THINKING_PATH,
)
from backends import installed
from backends.base import ModelLoadError
from backends.checks import ConfigShape, check_config, read_config, safetensors_header
from backends.gguf import is_gguf, read_gguf
from backends.gguf import loadable_by as gguf_loadable_by
from backends.support import loadable_by

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U32": 4, "I16": 2, "I8": 1, "U8": 1,
               "F8_E4M3": 1, "F8_E5M2": 1, "BOOL": 1}
DEFAULT_CONTEXT = 4096  # tokens the memory check budgets for
FOLDER_DEPTH = 3  # how deep a user's folder is searched: LM Studio keeps models/publisher/repo/file.gguf


@dataclass(frozen=True)
class ModelEntry:
    source: str  # what to type in the model field: a hub id or a folder
    path: str
    size_bytes: int
    model_type: str
    backends: tuple[str, ...]
    quantization: str | None
    label: str = ""  # a shorter name than `source` where there is one (a GGUF file: repo/file.gguf)
    problem: str = ""  # why no backend can load it (a damaged file, a wrong config field); "" where none


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
    if not isinstance(q, dict):  # (check_config names it)
        return "quantized"
    if "bits" in q:
        return f"{q['bits']}-bit, group {q.get('group_size', '?')}"
    return str(q.get("quant_method", "quantized"))


def estimate_memory(path: Path, config: dict | None = None, bytes_per_value: float | None = None) -> MemoryEstimate:
    """Weights (from the safetensors headers: exact) + KV cache per 1,000 tokens (from the config)."""
    if is_gguf(path):
        return _gguf_memory(path, bytes_per_value)
    config = config or read_config(path)
    weight_bytes = params = 0
    for f in sorted(path.glob("*.safetensors")):
        for t in safetensors_header(f).values():
            n = math.prod(t["shape"])
            params += n
            weight_bytes += n * DTYPE_BYTES.get(t["dtype"], 2)
    kv = ConfigShape.from_config(config).kv_bytes_per_token(bytes_per_value or 2)
    return MemoryEstimate(weight_bytes, params, kv * 1000, psutil.virtual_memory().available)


def _gguf_memory(path: Path, bytes_per_value: float | None) -> MemoryEstimate:
    """A GGUF file's weights as the backend `auto` opens it on holds them: llama.cpp, where it is installed, its
    tensors as stored; else torch, dequantized on load to 4 bytes a parameter (float32, the CPU's dtype)."""
    gguf = read_gguf(path)
    kv = ConfigShape.from_config(gguf.config()).kv_bytes_per_token(bytes_per_value or 2)
    weights = gguf.tensor_bytes if installed("llamacpp") else gguf.parameters * 4
    return MemoryEstimate(weights, gguf.parameters, kv * 1000, psutil.virtual_memory().available)


def check_fits(path: Path, beside: Sequence[Path] = (), available: int | None = None) -> None:
    """A ModelLoadError where the model at `path` would not fit in memory beside the models at `beside` (loaded
    already: their estimates are counted). `available`: the bytes free for models with none of them loaded (None:
    what the system has free now, plus the weights of `beside`, which it already counts as used)."""
    est = estimate_memory(path)
    others = [estimate_memory(p) for p in beside]
    free = est.available_bytes + sum(o.weight_bytes for o in others) if available is None else available
    est = replace(est, available_bytes=max(0, free - sum(o.needed_bytes for o in others)))
    if est.fits:
        return
    if beside:
        names = ", ".join(p.name for p in beside)
        raise ModelLoadError(f"{path.name} does not fit beside {names} in memory: {est.message()}, or compare on "
                             "fewer models at once")
    raise ModelLoadError(f"{path.name}: {est.message()}")


def scan_cache(cache_dir: str | Path | None = None) -> list[ModelEntry]:
    """Models in the Hugging Face cache (folders with a config.json, and .gguf files), newest first."""
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
        snapshot = Path(max(repo.revisions, key=lambda r: r.last_modified or 0).snapshot_path)
        folder = folder_entry(snapshot, repo.repo_id, repo.size_on_disk)
        out += [folder] if folder else []
        out += [gguf_entry(f, f"{repo.repo_id}/{f.relative_to(snapshot)}") for f in sorted(snapshot.rglob("*.gguf"))]
    return out


def folder_entry(folder: Path, source: str, size: int) -> ModelEntry | None:
    """A model folder (one whose config.json is a JSON object), or None; a config with a wrong field is listed
    loadable by no backend, with the field named."""
    f = folder / "config.json"
    try:
        config = parse_json(f.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    try:
        check_config(config, f)
    except ModelLoadError as e:
        return ModelEntry(source, str(folder), size, "?", (), None, problem=str(e))
    return ModelEntry(source, str(folder), size, str(config.get("model_type", "?")), tuple(loadable_by(config)),
                      _quant_label(config))


def gguf_entry(path: Path, label: str = "") -> ModelEntry:
    """A .gguf file; one that cannot be read is listed as type '?', loadable by no backend, with why."""
    size = _size(path)
    try:
        gguf = read_gguf(path)  # a link to a file that is gone: "cannot read …: No such file or directory"
    except ModelLoadError as e:
        return ModelEntry(str(path), str(path), size, "?", (), None, label, str(e))
    return ModelEntry(str(path), str(path), size, gguf.model_type or gguf.architecture,
                      tuple(gguf_loadable_by(gguf)), f"GGUF {gguf.weight_type}", label)


def scan_folder(folder: str | Path) -> list[ModelEntry]:
    """Model folders and .gguf files in a folder of the user's, up to `FOLDER_DEPTH` levels down, by name."""
    root, out = Path(folder).expanduser().resolve(), []
    for here, dirs, files in os.walk(root):
        path = Path(here)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and len(path.relative_to(root).parts) < FOLDER_DEPTH)
        if "config.json" in files:
            size = sum(_size(path / f) for f in files)
            entry = folder_entry(path, str(path), size)
            out += [entry] if entry else []
        out += [gguf_entry(path / f, str((path / f).relative_to(root))) for f in sorted(files)
                if f.lower().endswith(".gguf")]
    return out


def _size(path: Path) -> int:
    """A file's size; 0 where it cannot be read (a link to a file that is gone)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def main(argv: list[str], write: Callable[[str], None] = print) -> int:
    """`logitlab models`' local listing; each line of it goes to `write` (the command line's writer)."""
    p = argparse.ArgumentParser(prog="logitlab models", description="List the models in the Hugging Face cache "
                                "(model folders and .gguf files) and in the folders given with --folder.")
    p.add_argument("--cache-dir", help="another cache folder (default: the standard HF cache)")
    p.add_argument("--folder", action="append", default=[], help="also list the model folders and .gguf files in "
                   f"this folder, up to {FOLDER_DEPTH} levels down (repeatable; e.g. ~/.lmstudio/models)")
    p.add_argument("--json", action="store_true", help="one JSON array of the entries")
    args = p.parse_args(argv)
    missing = [f for f in args.folder if not Path(f).expanduser().is_dir()]
    if missing:
        print(f"logitlab models: error: no folder {missing[0]}", file=sys.stderr)
        return 2
    shipped = [builtin_entry(), *filter(None, [builtin_draft_entry(), builtin_thinking_entry()])]
    entries = [*shipped, *scan_cache(args.cache_dir)] + [e for f in args.folder for e in scan_folder(f)]
    if args.json:
        write(json.dumps([asdict(e) for e in entries], indent=1))
        return 0
    width = max(48, *(len(e.source) for e in entries))  # a GGUF's source is its path: what to type in --model
    write(f"{'model':{width}} {'size':>9}  {'type':14} {'backends':12} quantization")
    for e in entries:
        write(f"{e.source:{width}} {e.size_bytes / 2**20:7.0f} MB  {e.model_type:14} "
              f"{','.join(e.backends) or '-':12} {e.quantization or ''}")
    if len(entries) == len(shipped):
        write(f"\nNo models in the Hugging Face cache{' or those folders' if args.folder else ''} yet. Open a local "
              "folder or .gguf file, or give a hub id to download one.")
    for e in entries:
        if e.problem:
            print(f"logitlab models: {e.source} cannot be loaded: {e.problem}", file=sys.stderr)
    return 0


def builtin_entry() -> ModelEntry:
    """The model shipped with Logit Lab: listed first wherever models are listed (`logitlab models`, the picker)."""
    size = sum(f.stat().st_size for f in BUILTIN_PATH.iterdir() if f.is_file()) if BUILTIN_PATH.is_dir() else 0
    return ModelEntry(BUILTIN_NAME, str(BUILTIN_PATH), size, "llama", ("mlx", "torch"), None, BUILTIN_LABEL)


def builtin_draft_entry() -> ModelEntry | None:
    """The built-in model's draft, by the name every command takes (`--draft-model builtin-draft`); None where it
    is missing."""
    return _shipped_entry(BUILTIN_DRAFT_NAME, BUILTIN_DRAFT_PATH, BUILTIN_DRAFT_LABEL)


def builtin_thinking_entry() -> ModelEntry | None:
    """The built-in thinking model, by the name every command takes (`--model builtin-thinking`); None where it is
    missing."""
    return _shipped_entry(BUILTIN_THINKING_NAME, BUILTIN_THINKING_PATH, BUILTIN_THINKING_LABEL)


def _shipped_entry(name: str, path: Path, label: str) -> ModelEntry | None:
    if not (path / "config.json").exists():
        return None
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    return ModelEntry(name, str(path), size, "llama", ("mlx", "torch"), None, label)
