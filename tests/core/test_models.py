"""Resolving what the user typed into a model folder; download progress and cancel (no network needed)."""

from __future__ import annotations

import threading

import pytest

from app.core.models import BUILTIN_PATH, Cancelled, _progress_tqdm, resolve
from backends.base import ModelLoadError


def test_builtin_and_folders_resolve_locally(tmp_path):
    assert resolve("builtin") == BUILTIN_PATH == resolve("")
    assert resolve(str(tmp_path)) == tmp_path.resolve()


@pytest.mark.parametrize(("source", "message"), [("./no/such/dir", "no model folder at './no/such/dir'"),
                                                  ("just-a-name", "not a hub id like 'owner/name'")])
def test_what_is_neither_a_folder_nor_a_hub_id_is_named(source, message):
    with pytest.raises(ModelLoadError, match=message):
        resolve(source)


def test_offline_mode_never_downloads(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="offline mode is on"):
        resolve("someone-unlikely/never-cached-model")


def test_download_progress_reports_bytes_and_cancel_stops_it():
    seen: list[tuple[int, int]] = []
    cancel = threading.Event()
    bar = _progress_tqdm(lambda d, t: seen.append((d, t)), cancel)(total=1000, unit="B")
    bar.update(100)
    bar.update(250)
    assert seen == [(100, 1000), (350, 1000)]
    cancel.set()
    with pytest.raises(Cancelled):
        bar.update(10)
