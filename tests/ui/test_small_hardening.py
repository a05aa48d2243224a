"""Small things a user meets in the window, each as it should be: the model bar resolves "auto" for the model
it names (llama.cpp, else torch, for a .gguf file, on Apple Silicon too); the folders of models added in the
picker are there at the next start (and in `logitlab models`); `--threads N` shows in the bar, and the model card
names the threads; the remote server's URL and concurrency come back at the next start; with a model on a server,
the prompt editor says why it shows no token count; presets and preferences nested too deeply for json leave the
window starting on its defaults, with a message."""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from app.cli.main import main as cli_main
from app.core.models.sources import ModelSpec
from app.core.settings import SamplerSettings
from app.ui.files.preferences import Preferences, default_path
from app.ui.main_window import MainWindow
from app.ui.panels.info import ModelCard
from app.ui.panels.model_bar import ModelBar
from app.ui.panels.prompt_editor import SERVER_COUNT
from app.ui.panels.prompt_scoring import SERVER_SCORE
from backends import installed
from backends.base import LoadOptions
from tests.remote_fake import fake_server, stream_tokens
from tests.ui.conftest import RUN_TIMEOUT, WINDOW_BACKEND, needs_torch


@pytest.mark.skipif(not (installed("mlx") and installed("torch")), reason="needs both backends installed")
def test_on_apple_silicon_auto_shows_torchs_threads_for_a_gguf_file_and_mlxs_quantize_otherwise(qtbot):
    bar = ModelBar()
    qtbot.addWidget(bar)
    bar.apple = True  # resolve "auto" as on a Mac, on any machine
    bar.set_backend("torch")
    bar.set_backend("auto")
    assert bar.engine() == "mlx" and bar.quantize.isVisibleTo(bar) and not bar.threads.isVisibleTo(bar)
    bar.model.setCurrentText("/models/qwen2.5-0.5b-q8_0.gguf")  # typed or chosen: the fields follow
    gguf_engine = "llamacpp" if installed("llamacpp") else "torch"  # llama.cpp where it is installed
    assert bar.engine() == gguf_engine and bar.threads.isVisibleTo(bar) and not bar.quantize.isVisibleTo(bar)
    bar.model.setCurrentText("/models/Qwen2.5-0.5B")
    assert bar.engine() == "mlx" and bar.quantize.isVisibleTo(bar)


# -- the model folders the user adds are remembered ----------------------------------------------------------


def models_folder(tiny_path: Path, where: Path) -> Path:
    """A folder of models as a user keeps one: a model folder one level down."""
    shutil.copytree(tiny_path, where / "tiny-llama")
    return where


def test_a_folder_added_in_the_picker_is_listed_by_the_next_windows_picker(qtbot, window, store: QSettings,
                                                                           tiny_path: Path, tmp_path: Path):
    folder = models_folder(tiny_path, tmp_path / "my-models")
    picker = window.model_bar.make_picker(cache_dir=str(tmp_path / "no-cache"))
    qtbot.addWidget(picker)
    picker.open_folder(str(folder))  # what "Open folder…" calls with the folder chosen
    on_disk = QSettings(store.fileName(), QSettings.Format.IniFormat)  # another reader of the file
    assert Preferences(on_disk).get("model_folders") == [str(folder)]  # kept at once, not only at a clean exit
    again = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), "torch"))  # the next start
    qtbot.addWidget(again)
    listed = again.model_bar.make_picker(cache_dir=str(tmp_path / "no-cache"))
    qtbot.addWidget(listed)
    assert str((folder / "tiny-llama").resolve()) in [e.source for e in listed.entries]
    again.close()


@pytest.mark.skipif(sys.platform != "linux", reason="XDG_CONFIG_HOME is where platformdirs looks on Linux")
def test_logitlab_models_lists_the_folders_added_in_the_window(tiny_path: Path, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # never the user's own preferences
    assert default_path().is_relative_to(tmp_path)
    folder = models_folder(tiny_path, tmp_path / "my-models")
    prefs = Preferences(QSettings(str(default_path()), QSettings.Format.IniFormat))
    prefs.set("model_folders", [str(folder), str(tmp_path / "unplugged-drive")])  # one gone since: skipped
    prefs.save()
    empty = ["models", "--cache-dir", str(tmp_path / "no-cache")]
    assert cli_main(empty) == 0
    sources = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert sources == ["builtin", "builtin-draft", "builtin-thinking", str((folder / "tiny-llama").resolve())]
    assert cli_main([*empty, "--folder", str(folder)]) == 0  # given as well: listed once
    assert capsys.readouterr().out.count("tiny-llama") == 1


# -- the thread count: shown in the bar from the command line, and on the model card -----------------------------


@needs_torch  # the thread count is torch's
def test_logitlab_threads_shows_in_the_bar_and_the_model_loads_with_it(qtbot, store: QSettings, tiny_path: Path):
    spec = ModelSpec(str(tiny_path), "torch", options=LoadOptions(device="cpu", dtype="float32", threads=2))
    w = MainWindow(settings=store, spec=spec)  # as run_window makes it for `logitlab --threads 2 --device cpu ...`
    qtbot.addWidget(w)
    bar = w.model_bar
    assert bar.threads.text() == "threads: 2" and bar.device.currentText() == "cpu"
    assert bar.dtype.currentText() == "float32"
    assert bar.spec().options == spec.options  # what the first load asks for
    qtbot.waitUntil(lambda: w.playground.info is not None, timeout=RUN_TIMEOUT)
    assert w.playground.info.threads == 2
    assert w.model_card.labels["Device"].text() == "cpu · threads 2"
    w.close()


def test_the_model_card_names_a_torch_models_threads_and_not_an_mlx_models(qtbot, torch_model, mlx_model):
    card = ModelCard()
    qtbot.addWidget(card)
    card.show_info(replace(torch_model.info, threads=3))
    assert card.labels["Device"].text() == f"{torch_model.info.device} · threads 3"
    card.show_info(mlx_model.info)
    assert mlx_model.info.threads is None and card.labels["Device"].text() == mlx_model.info.device


# -- the remote server's URL and concurrency are remembered (its key never is) ---------------------------------


def test_the_servers_url_and_concurrency_are_there_at_the_next_start(qtbot, window, store: QSettings,
                                                                      tiny_path: Path):
    bar = window.model_bar
    bar.set_backend("remote")
    bar.remote.url.setText("http://gpu-box:8000/v1")
    bar.remote.concurrency.setValue(12)
    window.prefs.save()  # what closing the window does
    assert "gpu-box" in Path(store.fileName()).read_text()  # on disk
    again = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), "torch"))  # the next start
    qtbot.addWidget(again)
    assert again.model_bar.remote.server() == ("http://gpu-box:8000/v1", 12)
    again.model_bar.set_backend("remote")
    spec = again.model_bar.spec()
    assert (spec.base_url, spec.concurrency) == ("http://gpu-box:8000/v1", 12)
    assert not any("key" in k.lower() for k in store.allKeys())  # the API key lives in the keychain only
    again.close()


def test_a_server_named_on_the_command_line_wins_over_the_remembered_one(qtbot, store: QSettings):
    prefs = Preferences(store)
    prefs.set("remote/base_url", "http://gpu-box:8000/v1")
    prefs.set("remote/concurrency", 12)
    w = MainWindow(settings=store, spec=ModelSpec("", "remote", base_url="http://127.0.0.1:9/v1", concurrency=2))
    qtbot.addWidget(w)
    assert w.model_bar.remote.server() == ("http://127.0.0.1:9/v1", 2)
    w.close()


# -- a model on a server: the prompt editor says what is true of its token count ----------------------------------


def test_with_a_model_on_a_server_the_editor_says_why_there_is_no_count_or_surprisal(qtbot, window,
                                                                                     tiny_path: Path):
    assert window.prompt.count.text().endswith(" tokens")  # the local model counts
    bar = window.model_bar
    with fake_server(stream_tokens(1)) as srv:
        bar.set_backend("remote")
        bar.remote.url.setText(srv.url)
        bar.model.setCurrentText("fake-model")
        bar.load_button.click()
        qtbot.waitUntil(lambda: window.playground.info is not None and window.playground.info.backend == "remote",
                        timeout=RUN_TIMEOUT)
    assert window.prompt.count.text() == SERVER_COUNT and "load a model" not in SERVER_COUNT
    window.prompt.show_surprisal.click()
    assert window.prompt.surprisal.text.placeholderText() == SERVER_SCORE
    window.prompt.show_surprisal.click()
    bar.set_backend(WINDOW_BACKEND)  # a local model again: counted again
    bar.set_source(str(tiny_path))
    bar.load_button.click()
    qtbot.waitUntil(lambda: window.prompt.count.text().endswith(" tokens"), timeout=RUN_TIMEOUT)


def test_trust_remote_code_on_the_command_line_reaches_the_window_s_load_for_this_session_only(qtbot, store,
                                                                                             tiny_path: Path):
    spec = ModelSpec(str(tiny_path), "torch", options=LoadOptions(trust_remote_code=True, allow_pickle=True))
    w = MainWindow(settings=store, spec=spec)
    qtbot.addWidget(w)
    opts = w.model_bar.spec().options
    assert opts.trust_remote_code and opts.allow_pickle  # the flags the user typed are the load's
    assert w.model_bar.opt_ins.get(str(tiny_path)) is None  # and not remembered as the window's allowances
    w.model_bar.set_source("some/other-model")
    assert not w.model_bar.spec().options.trust_remote_code  # for the model named with them only
    w.sessions.ask = lambda: "discard"
    w.close()


# -- files nested too deeply for json: the window starts on its defaults and says so ------------------------------


@pytest.mark.skipif(sys.platform != "linux", reason="XDG_DATA_HOME is where platformdirs looks on Linux")
def test_the_window_starts_with_presets_and_preferences_nested_too_deeply(qtbot, tiny_path: Path, tmp_path: Path,
                                                                        monkeypatch, caplog):
    deep = "[" * 100_000 + "]" * 100_000
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    (tmp_path / "data" / "logitlab").mkdir(parents=True)
    (tmp_path / "data" / "logitlab" / "presets.json").write_text(deep)
    store = QSettings(str(tmp_path / "preferences.ini"), QSettings.Format.IniFormat)
    store.setValue("sampler", deep)
    store.setValue("recent_models", deep)
    store.sync()
    w = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), "torch"))
    qtbot.addWidget(w)
    w.show()
    assert w.banner.isVisible() and "presets.json is damaged (not JSON: nested too deeply to be read)" in \
        w.banner.label.text()
    assert w.sampler.settings().with_(seed=None) == SamplerSettings()
    assert sum("nested too deeply to be read" in r.getMessage() for r in caplog.records) == 2  # sampler, models
    w.close()
