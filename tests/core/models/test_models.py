"""Resolving what the user typed into a model folder; download progress and cancel (no network needed)."""

from __future__ import annotations

import socket
import threading

import pytest

from app.core.models import sources as models
from app.core.models.sources import (
    BUILTIN_DRAFT_PATH,
    BUILTIN_LABEL,
    BUILTIN_PATH,
    Cancelled,
    ModelSpec,
    _progress_tqdm,
    check_source,
    model_label,
    resolve,
)
from backends.base import ModelLoadError


def test_builtin_and_folders_resolve_locally(tmp_path):
    assert resolve("builtin") == BUILTIN_PATH == resolve("")
    assert resolve(str(tmp_path)) == tmp_path.resolve()


def test_the_built_in_draft_is_a_name_the_one_resolver_reads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "builtin-draft").mkdir()  # a folder of that name here: the name still means the shipped draft
    assert resolve("builtin-draft") == BUILTIN_DRAFT_PATH
    check_source("builtin-draft")
    check_source("owner/name")  # a hub id passes the check (no network: `resolve` finds it or not)
    with pytest.raises(ModelLoadError, match="no model folder at 'builtin-draftt'"):
        check_source("builtin-draftt")


@pytest.mark.parametrize(("source", "message"), [("./no/such/dir", "no model folder at './no/such/dir'"),
                                                  ("just-a-name", "not a hub id like 'owner/name'")])
def test_what_is_neither_a_folder_nor_a_hub_id_is_named(source, message):
    with pytest.raises(ModelLoadError, match=message):
        resolve(source)


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """An empty HF cache, and any attempt to download or open a connection fails the test."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))

    def refuse(*_args, **_kwargs):
        pytest.fail("offline resolving touched the network")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(models, "download", refuse)


def test_offline_mode_never_downloads(monkeypatch, no_network):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="offline mode is on"):
        resolve("someone-unlikely/never-cached-model")


def test_an_offline_spec_refuses_an_uncached_hub_id_without_the_environment_variable(monkeypatch, no_network):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    spec = ModelSpec("someone-unlikely/never-cached-model", offline=True)
    with pytest.raises(ModelLoadError) as e:
        resolve(spec.source, offline=spec.offline)
    assert str(e.value) == ("someone-unlikely/never-cached-model is not in the local Hugging Face cache and "
                            "offline mode is on: turn offline mode off to download it, or open a local folder")


def test_the_offline_switch_does_not_make_another_model():
    """A model loaded online is the one asked for offline: switching offline must not reload it."""
    assert ModelSpec("a/b", offline=True) == ModelSpec("a/b")


def test_the_built_in_model_has_one_name_everywhere():
    assert model_label("builtin") == model_label("") == ModelSpec().label == BUILTIN_LABEL
    assert model_label("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"


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
