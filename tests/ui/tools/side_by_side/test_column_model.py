"""A side-by-side column's model: the window's by default; a local one under the window's backend and options,
chosen in the real model picker; a server's through the model bar's server fields, streaming beside the window's
model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QWidget

from app.core.models.drafts import BUILTIN_DRAFT_PATH
from app.core.models.sources import BUILTIN_NAME, ModelSpec
from app.ui.tools.side_by_side.column_model import OTHER, SERVER, ColumnModel, ModelSources, ServerDialog, short_name
from backends.base import LoadOptions
from tests.remote_fake import fake_server, stream_tokens
from tests.ui.tools.side_by_side.test_side_by_side import opened, ran, streamed_together, watch


def answering(qtbot, combo: ColumnModel, entry: str, answer: Callable[[QWidget], None]) -> None:
    """Choose the asking entry `entry` as a user would; the dialog it opens is answered by `answer`."""
    QTimer.singleShot(0, lambda: answer(QApplication.activeModalWidget()))
    i = combo.findData(entry)
    combo.setCurrentIndex(i)
    combo.activated.emit(i)


def test_a_local_model_runs_under_the_window_s_backend_and_options(qtbot):
    combo = ColumnModel(lambda: ModelSources(recent=["/models/recent-one"]))
    qtbot.addWidget(combo)
    window = ModelSpec("/models/window", "torch", LoadOptions(dtype="float32", threads=1))
    assert combo.choice() is None and combo.spec(window) == window
    assert [combo.itemText(i) for i in range(1, 4)] == ["Built-in model", "Built-in draft", "recent-one"]
    combo.set_choice(ModelSpec(str(BUILTIN_DRAFT_PATH)))
    assert combo.spec(window) == ModelSpec(str(BUILTIN_DRAFT_PATH), "torch", LoadOptions(dtype="float32", threads=1))
    remote = ModelSpec("served", "remote", base_url="http://gpu:8000/v1")
    assert combo.spec(remote) == ModelSpec(str(BUILTIN_DRAFT_PATH))  # a server's options are not a local model's
    assert short_name(remote) == "served @ gpu:8000" and short_name(ModelSpec(BUILTIN_NAME)) == "Built-in model"


def test_other_model_opens_the_picker_and_a_folder_chosen_there_is_the_column_s(qtbot, tiny_path: Path):
    combo = ColumnModel()
    qtbot.addWidget(combo)
    answering(qtbot, combo, OTHER, lambda picker: picker.open_folder(str(tiny_path)))  # a model folder: chosen
    qtbot.waitUntil(lambda: combo.choice() is not None, timeout=10_000)
    assert combo.choice() == ModelSpec(str(tiny_path)) and combo.currentText() == tiny_path.name
    answering(qtbot, combo, OTHER, lambda picker: picker.reject())  # cancelled: the choice stays
    qtbot.waitUntil(lambda: combo.currentData() != OTHER, timeout=10_000)
    assert combo.choice() == ModelSpec(str(tiny_path)) and combo.findData(OTHER) == combo.count() - 2


def test_a_column_on_a_server_streams_beside_the_window_s_model(qtbot, window):
    view = opened(window, max_tokens=6)
    with fake_server(stream_tokens(6, delay=0.01)) as srv:
        def fill(dialog: ServerDialog) -> None:
            dialog.fields.url.setText(srv.url)
            dialog.name.setText("fake-model")
            dialog.accept()

        answering(qtbot, view.forms[1].model, SERVER, fill)
        qtbot.waitUntil(lambda: view.forms[1].model.choice() is not None, timeout=10_000)
        seen = watch(window, view)
        ran(qtbot, window, view)
    a, b = view.runs()
    assert b.request.model.is_remote and b.request.model.base_url == srv.url and srv.bodies
    assert [s.text for s in b.steps] == [f"w{i}" for i in range(6)] and len(a.steps) == 6
    assert streamed_together(seen)  # streaming together
    assert view.table.horizontalHeaderItem(1).text() == f"B · fake-model @ {srv.url.split('/')[2]}"
    assert window.playground.info.backend != "remote"  # the window's model is still its own
    assert view.charts.groups == [(0,), (1,)]
