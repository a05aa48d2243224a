"""Which local models can draft for a target: those whose tokenizer files are the target's, byte for byte.

A cheap look at files, for the picker (no model is loaded); the model thread checks the loaded pair again
(`speculative.check_pair`) and refuses a mismatch with one line. The built-in model's draft ships beside it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from app.core.models import catalog
from app.core.models.catalog import ModelEntry
from app.core.models.sources import BUILTIN_DRAFT_PATH, is_builtin, resolve
from backends.base import ModelLoadError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt")


def tokenizer_digest(folder: Path) -> str | None:
    """A digest of the folder's tokenizer files (None: it has none, or they cannot be read)."""
    h = hashlib.sha256()
    found = False
    for name in TOKENIZER_FILES:
        try:
            data = (folder / name).read_bytes()
        except OSError:
            continue
        h.update(name.encode() + b"\0" + data)
        found = True
    return h.hexdigest() if found else None


def draft_candidates(target: Path, entries: Iterable[ModelEntry]) -> list[ModelEntry]:
    """The model folders among `entries` (other than the target) that tokenize exactly as `target` does."""
    want = tokenizer_digest(target)
    if want is None:
        return []
    out = []
    for e in entries:
        path = Path(e.path)
        if path.is_dir() and path.resolve() != target.resolve() and tokenizer_digest(path) == want:
            out.append(e)
    return out


def local_path(source: str) -> Path | None:
    """The folder a model source names here without any download (the built-in model, a folder, a cached hub
    id); None for a server's model or one not on this machine."""
    try:
        return resolve(source, offline=True)
    except (ModelLoadError, OSError, ValueError):
        return None


def offered_drafts(target_source: str, entries: Iterable[ModelEntry]) -> list[ModelEntry]:
    """What the picker offers for a target: the built-in draft for the built-in model, then every folder among
    `entries` whose tokenizer files are the target's."""
    target = local_path(target_source)
    builtin = builtin_draft_entry()
    out = [builtin] if builtin is not None and is_builtin(target_source) else []
    if target is not None:
        out += [e for e in draft_candidates(target, entries) if builtin is None or e.path != builtin.path]
    return out


def builtin_draft_entry() -> ModelEntry | None:
    """The draft shipped for the built-in model, as the picker offers it: by its folder (None where it is
    missing)."""
    entry = catalog.builtin_draft_entry()
    return None if entry is None else replace(entry, source=str(BUILTIN_DRAFT_PATH))
