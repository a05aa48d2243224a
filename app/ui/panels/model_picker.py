"""The model picker dialog: models already in the Hugging Face cache and in the user's model folders (size,
which backends load them; .gguf files too), recent models, a folder or .gguf file chooser and a hub id field.
Returns what to put in the model field; `folders` is the list of model folders, with any the user added
(`folder_added` says so at once, for the preferences to keep it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.models.catalog import ModelEntry, builtin_entry, builtin_thinking_entry, scan_cache, scan_folder
from app.core.models.sources import HUB_ID, model_label
from app.ui.panels.info import human_bytes


class ModelPicker(QDialog):
    folder_added = Signal(str)  # a folder of models the user opened, now listed
    COLUMNS = ("Model", "Size", "Type", "Backends", "Quantization")

    def __init__(self, recent: list[str], parent: QWidget | None = None, cache_dir: str | None = None,
                 folders: Sequence[str] = ()) -> None:
        super().__init__(parent)
        self.setWindowTitle("Choose a model")
        self.resize(760, 420)
        cached = scan_cache(cache_dir)
        self.folders = [f for f in folders if Path(f).is_dir()]
        self.entries = [builtin_entry(), *filter(None, [builtin_thinking_entry()]), *cached,
                        *(e for f in self.folders for e in scan_folder(f))]
        known = {e.source for e in self.entries}
        self.entries += [ModelEntry(r, r, 0, "recent", (), None) for r in recent if r not in known]
        self.table = QTableWidget(0, len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels(self.COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self._add_rows(self.entries)
        self.table.itemDoubleClicked.connect(lambda _: self.accept())
        self.table.itemSelectionChanged.connect(self._row_chosen)
        self.hub = QLineEdit(placeholderText="or a hub id to download: owner/name")
        self.hub.textChanged.connect(self._validate)
        folder = QPushButton("Open folder…", toolTip="A model folder, or a folder of models (.gguf files, "
                             "model folders) to list here")
        folder.clicked.connect(self._folder)
        gguf = QPushButton("Open .gguf file…", toolTip="A GGUF file (llama.cpp, LM Studio): the llama.cpp backend "
                           "runs it on its own quantized weights (pip install llama-cpp-python); without it, torch "
                           "loads it dequantized")
        gguf.clicked.connect(self._gguf_file)
        self.hint = QLabel("")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        row = QHBoxLayout()
        row.addWidget(self.hub, 1)
        row.addWidget(folder)
        row.addWidget(gguf)
        box = QVBoxLayout(self)
        box.addWidget(QLabel(f"The built-in models, <b>{len(cached)} in your Hugging Face cache</b>, your model "
                             "folders' and recent ones:"))
        box.addWidget(self.table, 1)
        box.addLayout(row)
        box.addWidget(self.hint)
        box.addWidget(self.buttons)
        self.choice = ""
        self.table.selectRow(0)

    def _add_rows(self, entries: list[ModelEntry]) -> None:
        for e in entries:
            row = self.table.rowCount()
            self.table.insertRow(row)
            name = e.label or model_label(e.source)
            size = human_bytes(e.size_bytes) if e.size_bytes else ""
            for col, text in enumerate((name, size, e.model_type, ", ".join(e.backends), e.quantization or "")):
                item = QTableWidgetItem(text)
                item.setToolTip(e.path or name)
                self.table.setItem(row, col, item)

    def _row_chosen(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if rows:
            self.choice = self.entries[rows[0].row()].source
            self.hub.blockSignals(True)
            self.hub.clear()
            self.hub.blockSignals(False)
            self._validate()

    def _validate(self) -> None:
        text = self.hub.text().strip()
        if text:
            self.table.clearSelection()
            self.choice = text
        ok = bool(self.choice) and (not text or bool(HUB_ID.match(text)))
        self.hint.setText("" if ok else "A hub id looks like owner/name, e.g. Qwen/Qwen2.5-0.5B-Instruct")
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(ok)

    def _folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open a model folder, or a folder of models")
        if folder:
            self.open_folder(folder)

    def open_folder(self, folder: str) -> None:
        """A model folder is the choice; any other folder's models (.gguf files, model folders) join the list."""
        if (Path(folder) / "config.json").exists():
            self.choice = folder
            self.accept()
            return
        known = {e.source for e in self.entries}
        listed = scan_folder(folder)
        new = [e for e in listed if e.source not in known]
        if folder not in self.folders:
            self.folders.append(folder)
            self.folder_added.emit(folder)
        self.entries += new
        self._add_rows(new)
        if new:
            self.table.selectRow(len(self.entries) - len(new))
        self.hint.setText(f"{len(listed)} model{'s' * (len(listed) != 1)} in {folder}" if listed else
                          f"No model folders or .gguf files in {folder}")

    def _gguf_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a GGUF file", "", "GGUF files (*.gguf)")
        if path:
            self.choice = path
            self.accept()

    def keyPressEvent(self, e: object) -> None:  # noqa: N802 - Qt override
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and self.buttons.button(
                QDialogButtonBox.StandardButton.Ok).isEnabled():
            self.accept()
            return
        super().keyPressEvent(e)
