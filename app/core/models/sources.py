"""Where models come from: the models shipped with Logit Lab, local folders, and hub ids through the HF cache.

`resolve` turns what the user typed into a local folder, downloading through huggingface_hub (resumable,
with progress and cancel) only when the model is not cached and neither the spec's `offline` flag nor
HF_HUB_OFFLINE forbids the network. It is the one reader of model names: 'builtin', 'builtin-draft' and
'builtin-thinking' (the shipped models, `SHIPPED`) mean the same to every command and to the window. Failures
become one `ModelLoadError` line naming the model and what to do.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from backends.base import LoadOptions, ModelLoadError

BUILTIN_NAME = "builtin"
BUILTIN_LABEL = "Built-in model (Python, 5M)"
BUILTIN_PATH = Path(__file__).resolve().parents[3] / "resources" / "builtin-model"
BUILTIN_DRAFT_NAME = "builtin-draft"
BUILTIN_DRAFT_LABEL = "Built-in draft (Python, 0.9M)"
BUILTIN_DRAFT_PATH = BUILTIN_PATH.parent / "builtin-draft"  # the built-in model's draft (speculative decoding)
BUILTIN_THINKING_NAME = "builtin-thinking"
BUILTIN_THINKING_LABEL = "Built-in thinking model (addition, 0.8M)"
BUILTIN_THINKING_PATH = BUILTIN_PATH.parent / "builtin-thinking"  # adds numbers, thinking first (models/arithmetic)
SHIPPED = {BUILTIN_NAME: BUILTIN_PATH, BUILTIN_DRAFT_NAME: BUILTIN_DRAFT_PATH,  # a shipped model's name: its folder
           BUILTIN_THINKING_NAME: BUILTIN_THINKING_PATH}
SHIPPED_WHAT = {BUILTIN_DRAFT_NAME: "draft", BUILTIN_THINKING_NAME: "thinking model"}  # how a missing one is named
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
WEIGHT_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


@dataclass(frozen=True)
class ModelSpec:
    """Which model to use and how: the backend name and the load options travel with it."""

    source: str = BUILTIN_NAME  # "builtin", a local folder, or a hub id (owner/name)
    backend: str = "auto"
    options: LoadOptions = field(default_factory=LoadOptions)
    # Only how the model is found, not which model it is: a model loaded online is the same one offline.
    offline: bool = field(default=False, compare=False)
    # backend "remote": an OpenAI-compatible server, and `source` is its model name ("" or "builtin": the one it
    # serves). The API key is never here: it is read from the environment variable `api_key_env` when named,
    # else from the keychain (app/core/remote/secrets.py). `concurrency` bounds the requests of N samples in flight;
    # `deadline` the seconds one request may take in all, however the server trickles (None: the backend's default).
    base_url: str = ""
    api_key_env: str | None = None
    concurrency: int = field(default=4, compare=False)
    deadline: float | None = field(default=None, compare=False)

    @property
    def label(self) -> str:
        from backends.remote.backend import where  # (the server as a message names it: never user:password)

        return f"{self.source} at {where(self.base_url)}" if self.is_remote else model_label(self.source)

    @property
    def is_remote(self) -> bool:
        return self.backend == "remote"


def is_builtin(source: str) -> bool:
    return source in ("", BUILTIN_NAME)


def model_label(source: str) -> str:
    """How a model is named to a person: the built-in one by what it is (the model bar reads that back), any other
    by what was typed: its folder, hub id or name."""
    return BUILTIN_LABEL if is_builtin(source) else source


def shipped_path(source: str) -> Path | None:
    """The folder of the shipped model `source` names ('builtin' or '', 'builtin-draft', 'builtin-thinking'); None
    for any other."""
    return BUILTIN_PATH if is_builtin(source) else SHIPPED.get(source)


def check_source(source: str) -> None:
    """A `ModelLoadError` unless `source` can name a model: a shipped one, a file or folder that exists, or a hub
    id (which `resolve` may still not find). No network: a command checks its models before loading any."""
    if shipped_path(source) is None and not Path(source).expanduser().exists() and not HUB_ID.match(source):
        raise ModelLoadError(f"no model folder at {source!r}, and it is not a hub id like 'owner/name'")


class Cancelled(Exception):  # noqa: N818 - a user action, not an error
    """The user cancelled a download."""


def offline_by_env() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}


def resolve(source: str, progress: Progress | None = None, cancel: threading.Event | None = None, *,
            offline: bool = False) -> Path:
    """A local folder for `source`, downloading it into the HF cache if needed and allowed.

    `offline` (a `ModelSpec.offline`) or HF_HUB_OFFLINE: only local folders and the HF cache, no network.
    """
    if (shipped := shipped_path(source)) is not None:
        if not (shipped / "config.json").exists():
            what = SHIPPED_WHAT.get(source, "model")
            raise ModelLoadError(f"the built-in {what} is missing from {shipped}: reinstall Logit Lab")
        return shipped
    check_source(source)
    path = Path(source).expanduser()
    if path.exists():
        return path.resolve()
    cached = _snapshot(source, local_only=True)
    if cached is not None:
        return cached
    if offline or offline_by_env():
        raise ModelLoadError(f"{source} is not in the local Hugging Face cache and offline mode is on: "
                             "turn offline mode off to download it, or open a local folder")
    return download(source, progress, cancel)


def _snapshot(repo_id: str, local_only: bool, tqdm_class: type | None = None) -> Path | None:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=local_only, allow_patterns=WEIGHT_PATTERNS,
                                      tqdm_class=tqdm_class))
    except LocalEntryNotFoundError:
        if local_only:
            return None
        raise


def download(repo_id: str, progress: Progress | None = None, cancel: threading.Event | None = None) -> Path:
    """Fetch a hub model into the HF cache (partial files resume on the next try)."""
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        path = _snapshot(repo_id, local_only=False, tqdm_class=_progress_tqdm(progress, cancel))
    except Cancelled:
        raise
    except GatedRepoError as e:
        raise ModelLoadError(f"{repo_id} is gated: accept its licence on the Hub and log in first") from e
    except RepositoryNotFoundError as e:
        raise ModelLoadError(f"there is no model {repo_id} on the Hugging Face Hub (or it is private)") from e
    except (LocalEntryNotFoundError, OSError) as e:
        raise ModelLoadError(f"cannot download {repo_id}: no connection to the Hugging Face Hub. "
                             "Connect and try again, or open a local folder") from e
    assert path is not None
    return path


def _progress_tqdm(progress: Progress | None, cancel: threading.Event | None) -> type:
    """A tqdm class that reports byte progress and raises `Cancelled` when the user cancels."""
    from tqdm.auto import tqdm

    class Reporter(tqdm):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs) -> None:
            self.bytes = kwargs.get("unit") == "B"  # a disabled tqdm keeps neither unit nor count: we do
            self.expected = int(kwargs.get("total") or 0)
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)
            self.done = 0

        def update(self, n: float | None = 1) -> bool | None:
            if cancel is not None and cancel.is_set():
                raise Cancelled
            self.done += int(n or 0)
            if progress is not None and self.bytes:
                progress(self.done, max(self.expected, int(self.total or 0)))
            return None

    return Reporter
