"""The presets combo above the sampler sliders: the shipped presets, then the user's own (app/core/sampler/presets.py).

Bound to the `EditingState`: choosing one sets its sampler settings; seed, length and stop strings stay. The combo
names the preset the settings hold, and says "(modified)" once they leave it. Its menu saves, renames, deletes,
imports and exports presets; a problem (a taken name, a damaged or unwritable file) is one `failed` line, never a
traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QMenu,
    QMessageBox,
    QToolButton,
    QWidget,
)

from app.core.sampler.presets import SHIPPED, Preset, PresetError, PresetStore
from app.ui.viewmodel.editing_state import EditingState

MODIFIED = " (modified)"
FILES = "Logit Lab presets (*.json)"


def ask_name(parent: QWidget, title: str, name: str) -> str | None:
    text, ok = QInputDialog.getText(parent, title, "Preset name:", text=name)
    return text if ok else None


def ask_open(parent: QWidget, title: str) -> str | None:
    return QFileDialog.getOpenFileName(parent, title, str(Path.home()), FILES)[0] or None


def ask_save(parent: QWidget, title: str, name: str) -> str | None:
    path = QFileDialog.getSaveFileName(parent, title, str(Path.home() / name), FILES)[0]
    return path if not path or path.endswith(".json") else f"{path}.json"


def confirm(parent: QWidget, question: str) -> bool:
    return QMessageBox.question(parent, "Logit Lab", question) == QMessageBox.StandardButton.Yes


class PresetsBox(QWidget):
    failed = Signal(str)

    def __init__(self, state: EditingState, store: PresetStore | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.store = store if store is not None else PresetStore()
        # The dialogs, replaceable (tests answer them): (title, suggestion) -> answer, None when cancelled.
        self.ask_name: Callable[[str, str], str | None] = lambda title, name: ask_name(self, title, name)
        self.ask_open: Callable[[str], str | None] = lambda title: ask_open(self, title)
        self.ask_save: Callable[[str, str], str | None] = lambda title, name: ask_save(self, title, name)
        self.confirm: Callable[[str], bool] = lambda question: confirm(self, question)
        self._applying = False
        self.combo = QComboBox(placeholderText="No preset", toolTip="Named sampler settings: choosing one sets the "
                               "sliders (seed, max tokens and stop strings stay)")
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.setMinimumContentsLength(10)
        self.combo.activated.connect(self._chosen)
        self.menu = QMenu(self)
        self.menu.aboutToShow.connect(self._enable_actions)
        self.actions_by_name = {name: self._action(label, slot) for name, label, slot in (
            ("save_as", "Save as new preset…", self.save_as), ("save", "Save changes", self.save_changes),
            ("rename", "Rename…", self.rename), ("delete", "Delete", self.delete), ("", "", None),
            ("import", "Import…", self.import_presets), ("export", "Export this preset…", self.export_current),
            ("export_all", "Export my presets…", self.export_mine))}
        button = QToolButton(text="⋯", toolTip="Save, rename, delete, import or export presets", autoRaise=True,
                             popupMode=QToolButton.ToolButtonPopupMode.InstantPopup)
        button.setMenu(self.menu)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("Preset"))
        row.addWidget(self.combo, 1)
        row.addWidget(button)
        state.settings_changed.connect(self.refresh)
        self._fill()
        self.refresh()

    def _action(self, label: str, slot: Callable[[], None] | None) -> QAction | None:
        if slot is None:
            self.menu.addSeparator()
            return None
        action = self.menu.addAction(label)
        action.triggered.connect(slot)
        return action

    # what the combo shows -------------------------------------------------------------------------------------
    def _fill(self, select: str | None = None) -> None:
        self.combo.clear()
        for group in (SHIPPED, self.store.user):
            if group and self.combo.count():
                self.combo.insertSeparator(self.combo.count())
            for p in group:
                self.combo.addItem(p.name, p.name)
                self.combo.setItemData(self.combo.count() - 1, p.note or "Your preset", Qt.ItemDataRole.ToolTipRole)
        self.combo.setCurrentIndex(self.combo.findData(select) if select else -1)

    def current(self) -> Preset | None:
        name = self.combo.currentData()
        return self.store.get(name) if name else None

    @property
    def modified(self) -> bool:
        return self.combo.currentText().endswith(MODIFIED)

    def refresh(self) -> None:
        """Name the preset the sliders hold (the chosen one, else any that matches), or mark the chosen one
        modified."""
        if self._applying:
            return
        settings = self.state.settings
        current = self.current()
        if current is None or not current.matches(settings):
            match = next((p for p in self.store.presets() if p.matches(settings)), None)
            if match is not None:
                self.combo.setCurrentIndex(self.combo.findData(match.name))
                current = match
        for i in range(self.combo.count()):
            if name := self.combo.itemData(i):
                self.combo.setItemText(i, name)
        if current is not None and not current.matches(settings):
            self.combo.setItemText(self.combo.currentIndex(), current.name + MODIFIED)

    def _chosen(self, index: int) -> None:
        preset = self.store.get(self.combo.itemData(index))
        if preset is None:
            return
        self._applying = True
        try:
            self.state.set_settings(preset.apply(self.state.settings))
        finally:
            self._applying = False
        self.refresh()

    def choose(self, name: str) -> None:
        """Choose a preset by name, as picking it in the combo does."""
        self.combo.setCurrentIndex(self.combo.findData(name))
        self._chosen(self.combo.currentIndex())

    # the menu ---------------------------------------------------------------------------------------------------
    def _enable_actions(self) -> None:
        current = self.current()
        mine = current is not None and not current.shipped
        for name, on in (("save", mine and self.modified), ("rename", mine), ("delete", mine),
                         ("export", current is not None), ("export_all", bool(self.store.user))):
            self.actions_by_name[name].setEnabled(on)

    def _do(self, work: Callable[[], object]) -> object:
        try:
            return work()
        except PresetError as e:
            self.failed.emit(str(e))
        except OSError as e:
            self.failed.emit(f"Presets: {e.filename or ''} could not be written ({e.strerror or e})")
        return None

    def save_as(self) -> None:
        current = self.current()
        name = self.ask_name("Save as new preset", current.name + " (mine)" if current else "My preset")
        if name is not None and self._do(lambda: self.store.save(name, self.state.settings)):
            self._fill(name.strip())
            self.refresh()

    def save_changes(self) -> None:
        current = self.current()
        if current is not None and self._do(lambda: self.store.save(current.name, self.state.settings)):
            self._fill(current.name)
            self.refresh()

    def rename(self) -> None:
        current = self.current()
        name = self.ask_name("Rename preset", current.name) if current is not None else None
        if name is not None and self._do(lambda: self.store.rename(current.name, name)):
            self._fill(name.strip())
            self.refresh()

    def delete(self) -> None:
        current = self.current()
        if current is not None and self.confirm(f"Delete the preset “{current.name}”?"):
            self._do(lambda: self.store.delete(current.name))
            self._fill()
            self.refresh()

    def import_presets(self) -> None:
        path = self.ask_open("Import presets")
        names = self._do(lambda: self.store.import_file(path)) if path else None
        if names:
            self._fill(names[0])
            self._chosen(self.combo.currentIndex())

    def export_current(self) -> None:
        current = self.current()
        path = self.ask_save("Export preset", f"{current.name}.json") if current is not None else None
        if path:
            self._do(lambda: self.store.export(path, [current.name]))

    def export_mine(self) -> None:
        path = self.ask_save("Export my presets", "logitlab-presets.json")
        if path:
            self._do(lambda: self.store.export(path, [p.name for p in self.store.user]))
