"""A side-by-side column's model: the window's (the default), or another one the user can pick elsewhere: the
built-in model, the built-in draft, a recent model, one chosen in the model picker (the HF cache, the user's
folders, a folder or .gguf file, a hub id), or a server's model through the model bar's server fields.

`spec(window)` is the column's `ModelSpec`: a local model takes the window's backend and load options (device,
dtype, threads), so two columns differ by their model only; a server's is its own. Knows nothing of runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLineEdit, QWidget

from app.core.models.drafts import BUILTIN_DRAFT_PATH
from app.core.models.sources import BUILTIN_NAME, ModelSpec, is_builtin
from app.ui.panels.remote_fields import RemoteFields

WINDOW = "Window's model"
OTHER, SERVER = "other", "server"  # the entries that ask for a model
SHORT_NAMES = {BUILTIN_NAME: "Built-in model", str(BUILTIN_DRAFT_PATH): "Built-in draft"}


@dataclass(frozen=True)
class ModelSources:
    """What the window knows of the user's models: recent ones, the picker's folders, the server last used."""

    recent: Sequence[str] = ()
    folders: Sequence[str] = ()
    server: str = ""


def short_name(spec: ModelSpec) -> str:
    """A model's name short enough for a column's header: the built-in ones by what they are, a folder by its
    name, a server's model as `name @ host`."""
    if spec.is_remote:
        host = spec.base_url.split("://")[-1].split("/")[0]
        return f"{spec.source or 'served'} @ {host}"
    if is_builtin(spec.source):
        return SHORT_NAMES[BUILTIN_NAME]
    return SHORT_NAMES.get(spec.source) or Path(spec.source).name or spec.source


class ColumnModel(QComboBox):
    """Window's model, built-in, built-in draft, recent models, then Other model… and Server…, which ask."""

    def __init__(self, sources: Callable[[], ModelSources] = ModelSources, parent: QWidget | None = None) -> None:
        super().__init__(parent, toolTip="The column's model: the window's, or another one beside it (loaded "
                         "when the columns run, if it fits in memory; a server's through its URL)")
        self.sources = sources
        self.setMinimumContentsLength(10)
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.addItem(WINDOW, None)
        for source in (BUILTIN_NAME, str(BUILTIN_DRAFT_PATH), *sources().recent):
            self._add(ModelSpec(source))
        self.insertSeparator(self.count())
        self.addItem("Other model…", OTHER)
        self.addItem("Server…", SERVER)
        self._last = 0
        self.activated.connect(self._chosen)

    def choice(self) -> ModelSpec | None:
        """The model chosen (None: the window's)."""
        data = self.currentData()
        return data if isinstance(data, ModelSpec) else None

    def spec(self, window: ModelSpec) -> ModelSpec:
        """The column's model: the window's, a server's as chosen, or a local one under the window's backend and
        load options."""
        chosen = self.choice()
        if chosen is None or chosen.is_remote:
            return chosen or window
        return ModelSpec(chosen.source) if window.is_remote else replace(window, source=chosen.source)

    def set_choice(self, spec: ModelSpec | None) -> None:
        """Choose `spec` (None: the window's model), listing it first if it is not yet."""
        self.setCurrentIndex(0 if spec is None else self._add(spec))
        self._last = self.currentIndex()

    def _add(self, spec: ModelSpec) -> int:
        """The entry of `spec`'s model (by source, and server), added before the asking entries if new."""
        key = (spec.source, spec.base_url) if spec.is_remote else (spec.source, "")
        for i in range(1, self.count()):
            d = self.itemData(i)
            if isinstance(d, ModelSpec) and ((d.source, d.base_url) if d.is_remote else (d.source, "")) == key:
                return i
        other = self.findData(OTHER)
        at = self.count() if other < 0 else other - 1  # before the separator (at the end while building)
        self.insertItem(at, short_name(spec), spec if spec.is_remote else ModelSpec(spec.source))
        self.setItemData(at, spec.base_url if spec.is_remote else spec.source, Qt.ItemDataRole.ToolTipRole)
        return at

    def _chosen(self, index: int) -> None:
        data = self.itemData(index)
        if data not in (OTHER, SERVER):
            self._last = index
            return
        spec = self._ask_local() if data == OTHER else self._ask_server()
        self.setCurrentIndex(self._add(spec) if spec is not None else self._last)
        self._last = self.currentIndex()

    def _ask_local(self) -> ModelSpec | None:
        from app.ui.panels.model_picker import ModelPicker  # (scans the HF cache: only when asked)

        s = self.sources()
        picker = ModelPicker(list(s.recent), self, folders=s.folders)
        return ModelSpec(picker.choice) if picker.exec() and picker.choice else None

    def _ask_server(self) -> ModelSpec | None:
        dialog = ServerDialog(self.sources().server, self)
        return dialog.spec() if dialog.exec() else None


class ServerDialog(QDialog):
    """A server's base URL, key and concurrency (the model bar's own fields), and the model name it serves."""

    def __init__(self, url: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("A column on a server")
        self.fields = RemoteFields()
        self.fields.url.setText(url)
        self.name = QLineEdit(placeholderText="the server's model name (empty: the one it serves)")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout(self)
        form.addRow("Server", self.fields)
        form.addRow("Model", self.name)
        form.addRow(buttons)

    def spec(self) -> ModelSpec | None:
        """The server's model (None without a URL)."""
        url = self.fields.base_url()
        if not url:
            return None
        return ModelSpec(source=self.name.text().strip(), backend="remote", base_url=url,
                         api_key_env=self.fields.api_key_env(), concurrency=self.fields.concurrency.value())
