"""Help → About Logit Lab (version, the main libraries with their versions and licences, where settings and
data live) and Help → Keyboard shortcuts (read from the menus themselves, so the list is never out of date).

Versions come from the installed packages' metadata: nothing heavy is imported to show them.
"""

from __future__ import annotations

import html
import platform
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QMenu, QMenuBar, QVBoxLayout, QWidget

import app

LIBRARIES = (  # (distribution, what it is here, licence)
    ("PySide6-Essentials", "Qt for Python: the window", "LGPL-3.0"),
    ("pyqtgraph", "charts", "MIT"),
    ("numpy", "the sampler's reference maths", "BSD-3-Clause"),
    ("torch", "PyTorch backend", "BSD-3-Clause"),
    ("transformers", "PyTorch backend, tokenizers' chat templates", "Apache-2.0"),
    ("mlx", "MLX backend", "MIT"),
    ("mlx-lm", "MLX backend", "MIT"),
    ("tokenizers", "tokenization", "Apache-2.0"),
    ("safetensors", "weights", "Apache-2.0"),
    ("huggingface-hub", "the model cache and downloads", "Apache-2.0"),
    ("platformdirs", "where settings and data live", "MIT"),
)


def version_of(dist: str) -> str:
    from importlib import metadata  # on use: ~25 ms of the window's startup otherwise (this module loads with it)

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def locations(preferences_file: str, state_folder: Path) -> list[tuple[str, Path]]:
    """Where Logit Lab keeps what it writes, and where the models it opens are cached."""
    from huggingface_hub.constants import HF_HUB_CACHE

    from app.core.sampler.presets import default_path as presets_file

    return [("Preferences", Path(preferences_file)), ("Presets", presets_file()),
            ("Autosaved session", state_folder), ("Models (Hugging Face cache)", Path(HF_HUB_CACHE))]


def about_html(locations: list[tuple[str, Path]]) -> str:
    rows = "".join(f"<tr><td>{name}</td><td>{version_of(name)}</td><td>{lic}</td><td>{role}</td></tr>"
                   for name, role, lic in LIBRARIES)
    where = "".join(f"<tr><td>{html.escape(what)}</td><td><code>{html.escape(str(path))}</code></td></tr>"
                    for what, path in locations)
    return (f"<h2>Logit Lab {app.__version__}</h2>"
            "<p>Watch a language model choose each token. MIT licence.<br>"
            f"Python {platform.python_version()} on {html.escape(platform.system())} {platform.machine()}</p>"
            "<h3>Libraries</h3><table cellspacing='6'><tr><th align=left>package</th><th align=left>version</th>"
            f"<th align=left>licence</th><th align=left>used for</th></tr>{rows}</table>"
            f"<h3>Where things live</h3><table cellspacing='6'>{where}</table>")


class AboutDialog(QDialog):
    def __init__(self, locations: list[tuple[str, Path]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("About Logit Lab")
        self.text = QLabel(about_html(locations), wordWrap=True,
                           textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        _layout(self, self.text)


def shortcut_rows(bar: QMenuBar) -> list[tuple[str, str]]:
    """(menu → action, its key sequences) for every action in the menus that has a shortcut, in menu order."""
    rows: list[tuple[str, str]] = []

    def walk(menu: QMenu, path: str) -> None:
        for a in menu.actions():
            name = f"{path} → {a.text().replace('&', '')}"
            if a.menu() is not None:
                walk(a.menu(), name)
            elif a.shortcuts():
                keys = ", ".join(s.toString(QKeySequence.SequenceFormat.NativeText) for s in a.shortcuts())
                rows.append((name, keys))

    for a in bar.actions():
        if a.menu() is not None:
            walk(a.menu(), a.text().replace("&", ""))
    return rows


class ShortcutsDialog(QDialog):
    def __init__(self, bar: QMenuBar, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        self.rows = shortcut_rows(bar)
        body = "".join(f"<tr><td>{html.escape(name)}</td><td><b>{html.escape(keys)}</b></td></tr>"
                       for name, keys in self.rows)
        self.text = QLabel(f"<table cellspacing='6'>{body}</table><p>In a text field the usual editing keys "
                           "apply to it (copy, paste, undo, select all).</p>",
                           textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        _layout(self, self.text)


def open_dialog(dialog: QDialog) -> None:
    """Shown over the window without blocking it (the model keeps streaming); freed when closed."""
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.open()


def _layout(dialog: QDialog, body: QWidget) -> None:
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    buttons.rejected.connect(dialog.reject)
    box = QVBoxLayout(dialog)
    box.addWidget(body)
    box.addWidget(buttons)
