"""The model bar: backend, model (built-in, recent, a folder, or a hub id), device and dtype, load progress.

Bound to the `EditingState`: every edit writes the model spec there, and the bar shows the model and backend the
state holds. Emits `load_requested(ModelSpec)` (and offers what a load needing an opt-in asks: `opt_in_offer`); its
`LoadStatus` (app/ui/panels/load_status.py) shows the progress and status it is told about. It knows which backends
are installed (a cheap check that imports no framework) and disables the others with a hint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import astuple
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QToolButton,
    QWidget,
)

from app.core.models.sources import BUILTIN_LABEL, BUILTIN_NAME, BUILTIN_THINKING_NAME, ModelSpec, model_label
from app.ui.panels.load_status import LoadStatus
from app.ui.panels.remote_fields import RemoteFields
from app.ui.viewmodel.editing_state import EditingState
from backends import INSTALL_HINT, ModelLoadError, installed, resolve_name
from backends.base import LoadOptions
from backends.threads import MAX_THREADS

if TYPE_CHECKING:
    from app.ui.viewmodel.playground import Playground

OPT_IN_LABELS = {"trust_remote_code": "Allow its code", "allow_pickle": "Allow pickle weights"}  # the banner's button
BACKEND_LABELS = {"llamacpp": "llama.cpp"}  # a backend's name as the list shows it (else its name)


class ModelBar(QWidget):
    load_requested = Signal(object)  # ModelSpec
    folders_changed = Signal(list)  # list[str]: the model folders the picker lists, after the user added one
    opt_ins_changed = Signal(dict)  # per model, the LoadOptions flags the user allowed, after they allowed one

    def __init__(self, state: EditingState | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state if state is not None else EditingState(self)
        self._showing = False  # the state's model is being put into the fields: not an edit
        self.backend = QComboBox(toolTip="Which framework runs the model; auto: MLX on Apple Silicon, else "
                                 "torch (a .gguf file: llama.cpp where it is installed, else torch)")
        self.backend.addItem("auto", "auto")
        for name in ("mlx", "torch", "llamacpp", "remote"):
            self.backend.addItem(BACKEND_LABELS.get(name, name), name)
            if not installed(name):
                item = self.backend.model().item(self.backend.count() - 1)
                item.setEnabled(False)
                item.setToolTip(f"not installed: {INSTALL_HINT[name]}")
        self.model = QComboBox(editable=True, toolTip="A model folder, a Hugging Face hub id (owner/name), "
                               "or the built-in model")
        self.model.setMinimumContentsLength(22)
        self.model.lineEdit().setPlaceholderText("folder or hub id, e.g. Qwen/Qwen2.5-0.5B-Instruct")
        self.model.addItem(BUILTIN_LABEL, BUILTIN_NAME)
        self.model.addItem(BUILTIN_THINKING_NAME, BUILTIN_THINKING_NAME)  # its name is what source() reads back
        browse = QToolButton(text="…", toolTip="Choose a model: cached, recent, a folder or a hub id (Ctrl+O)")
        browse.clicked.connect(self.browse)
        self.device = QComboBox(toolTip="torch device; auto picks CUDA, then Apple MPS, then CPU")
        for d in ("auto", "cuda", "mps", "cpu"):
            self.device.addItem(d, None if d == "auto" else d)
        self.dtype = QComboBox(toolTip="Weights precision; auto picks per device (bf16 on CUDA, fp32 on CPU)")
        for d in ("auto", "bfloat16", "float16", "float32"):
            self.dtype.addItem(d, None if d == "auto" else d)
        self.threads = QSpinBox(minimum=0, maximum=MAX_THREADS, specialValueText="threads: auto", prefix="threads: ",
                                toolTip="torch and llama.cpp: CPU threads; auto: 1 for a model under 50M parameters "
                                "(faster, and much faster on a busy machine), else the framework's default")
        self.quantize = QComboBox(toolTip="MLX: quantize the weights as they load (group size 64): less memory, "
                                  "slightly different distributions")
        for label, bits in (("full precision", None), ("4-bit", 4), ("8-bit", 8)):
            self.quantize.addItem(label, bits)
        self.offline = QCheckBox("Offline", toolTip="Never touch the network: only local folders and the HF cache")
        self.remote = RemoteFields()  # backend "remote": the server's URL, key and concurrency
        self.remote.models_listed.connect(self._show_server_models)
        self.load_status = LoadStatus(self)  # the progress bar and the status line (the loaded model, a compile…)
        self.progress, self.status = self.load_status.progress, self.load_status.status
        self.remote.key_stored.connect(self.load_status.show_status)
        self.apple: bool | None = None  # whether "auto" resolves as on Apple Silicon; None: this machine's platform
        self.backend.currentIndexChanged.connect(self._show_backend_fields)
        self.model.currentTextChanged.connect(self._show_engine_fields)  # auto: torch for a .gguf file
        self.opt_ins: dict[str, list[str]] = {}  # per model: LoadOptions flags the user allowed (remembered)
        self.cli_opt_ins: dict[str, list[str]] = {}  # what the command line allowed: this session only
        self.recent: list[str] = []
        self.base_options = LoadOptions()  # what the bar has no field for (--compile's length) comes from here
        self.folders: list[str] = []  # folders of models the picker lists (the user's, kept in the preferences)
        self.load_button = QPushButton("Load", toolTip="Load this model now (Generate also loads it)")
        self.load_button.clicked.connect(lambda: self.load_requested.emit(self.spec()))
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for w, stretch in ((QLabel("Backend"), 0), (self.backend, 0), (QLabel("Model"), 0), (self.model, 2),
                           (browse, 0), (self.remote, 0), (self.device, 0), (self.dtype, 0), (self.threads, 0),
                           (self.quantize, 0),
                           (self.offline, 0), (self.load_button, 0),
                           (self.progress, 0), (self.status, 1)):
            row.addWidget(w, stretch)
        self._show_backend_fields()
        for signal in (self.backend.currentIndexChanged, self.model.currentTextChanged, self.device.currentIndexChanged,
                       self.dtype.currentIndexChanged, self.threads.valueChanged, self.quantize.currentIndexChanged,
                       self.offline.toggled, self.remote.url.textChanged, self.remote.concurrency.valueChanged,
                       self.remote.key_stored):
            signal.connect(self._edited)
        self.state.model_changed.connect(self._show)
        self._edited()

    def bind(self, pg: Playground) -> None:
        """Load progress and the loaded model from the view-model; Load is off while it is busy."""
        self.load_status.bind(pg)
        pg.busy_changed.connect(lambda busy: self.load_button.setEnabled(not busy))

    def _edited(self) -> None:
        if not self._showing:
            self.state.set_model(self.spec())

    def _show(self, spec: ModelSpec) -> None:
        """Show the state's model and backend (the other fields stay: what they then say goes back)."""
        if astuple(spec) == astuple(self.spec()):
            return
        self._showing = True
        try:
            self.set_source(spec.source)
            self.set_backend(spec.backend)
        finally:
            self._showing = False
        self._edited()

    def set_opt_ins(self, opt_ins: dict[str, list[str]]) -> None:
        """The LoadOptions flags the user allowed, per model (kept in the preferences)."""
        self.opt_ins = opt_ins
        self._edited()

    def allow(self, source: str, opt_in: str) -> None:
        """Remember that the user allowed `opt_in` (a LoadOptions flag) for `source`."""
        self.opt_ins.setdefault(source, []).append(opt_in)
        self._edited()
        self.opt_ins_changed.emit(self.opt_ins)

    def source(self) -> str:
        text = self.model.currentText().strip()
        if text == BUILTIN_LABEL or not text:
            return BUILTIN_NAME
        return text

    def spec(self) -> ModelSpec:
        source = self.source()
        if self.is_remote():
            return ModelSpec(source=source, backend="remote", base_url=self.remote.base_url(),
                             api_key_env=self.remote.api_key_env(), concurrency=self.remote.concurrency.value())
        allowed = self.opt_ins.get(source, []) + self.cli_opt_ins.get(source, [])
        own_types = self.engine() == "llamacpp"  # llama.cpp runs the file's own types: no dtype, no quantize-on-load
        opts = dataclasses.replace(self.base_options, device=self.device.currentData(),
                                   dtype=None if own_types else self.dtype.currentData(),
                                   quantize_bits=None if own_types else self.quantize.currentData(),
                                   threads=self.threads.value() or None,
                                   trust_remote_code="trust_remote_code" in allowed,
                                   allow_pickle="allow_pickle" in allowed)
        return ModelSpec(source=source, backend=self.backend.currentData(), options=opts,
                         offline=self.offline.isChecked())

    def set_source(self, source: str) -> None:
        self.model.setCurrentText(model_label(source))

    def show_options(self, spec: ModelSpec) -> None:
        """The fields as `spec` (the command line's) asks: device, dtype, quantization, threads; a server's URL
        and concurrency when it names one, and the environment variable that holds its key (for the URL shown,
        the command line's or else the one kept in the preferences). What the bar has no field for travels on in
        `base_options`."""
        o = spec.options
        for box, value in ((self.device, o.device), (self.dtype, o.dtype), (self.quantize, o.quantize_bits)):
            box.setCurrentIndex(max(0, box.findData(value)) if value is not None else 0)  # 0: auto / full precision
        self.threads.setValue(o.threads or 0)  # 0 reads "threads: auto"
        self.base_options = LoadOptions(compile_len=o.compile_len, fast=o.fast)
        self.cli_opt_ins = {spec.source: [f for f in ("trust_remote_code", "allow_pickle") if getattr(o, f)]}
        if spec.base_url:
            self.remote.url.setText(spec.base_url)
            self.remote.concurrency.setValue(spec.concurrency)
        self.remote.set_key_env(spec.api_key_env)
        self._edited()

    def set_backend(self, name: str) -> None:
        i = self.backend.findData(name)
        if i >= 0 and self.backend.model().item(i).isEnabled():
            self.backend.setCurrentIndex(i)

    def add_recent(self, sources: list[str]) -> None:
        for s in sources:
            if s not in self.recent:
                self.recent.append(s)
            if s != BUILTIN_NAME and self.model.findText(s) < 0:
                self.model.addItem(s, s)

    def is_remote(self) -> bool:
        return self.backend.currentData() == "remote"

    def engine(self) -> str | None:
        """The framework the chosen backend runs on ("auto" resolved), or None if none is installed."""
        try:
            return resolve_name(self.backend.currentData(), self.source(), self.apple)
        except ModelLoadError:
            return None

    def _show_backend_fields(self) -> None:
        remote = self.is_remote()
        if remote and self.source() == BUILTIN_NAME:
            self.model.setCurrentText("")  # a server's model by its name: "" is the one it serves
        self.remote.setVisible(remote)
        for w in (self.device, self.dtype, self.offline):
            w.setVisible(not remote)
        self._show_engine_fields()
        self.model.lineEdit().setPlaceholderText("the server's model name (… lists them)" if remote else
                                                 "folder or hub id, e.g. Qwen/Qwen2.5-0.5B-Instruct")

    def _show_engine_fields(self) -> None:
        engine = None if self.is_remote() else self.engine()
        self.threads.setVisible(engine in ("torch", "llamacpp"))  # each only where it applies: the bar fits 900 px
        self.quantize.setVisible(engine == "mlx")
        self.dtype.setVisible(not self.is_remote() and engine != "llamacpp")  # llama.cpp: the file's own types

    def _show_server_models(self, names: list[str] | None, status: str) -> None:
        self.load_status.show_status(status)
        for name in names or ():
            if self.model.findText(name) < 0:
                self.model.addItem(name, name)
        if names and self.source() not in names:
            self.model.setCurrentText(names[0])

    def browse(self) -> None:
        if self.is_remote():  # the server's own list, fetched off the UI thread
            from backends.remote.backend import where

            url = self.remote.base_url()
            self.load_status.show_status(f"Asking {where(url) if url else 'the server'} for its models…")
            self.remote.list_models()
            return
        picker = self.make_picker()
        if picker.exec() and picker.choice:
            self.set_source(picker.choice)
            self.load_requested.emit(self.spec())

    def make_picker(self, cache_dir: str | None = None) -> QWidget:  # a ModelPicker, imported when first asked
        """The model picker over the recent models and the user's folders; a folder added there is kept."""
        from app.ui.panels.model_picker import ModelPicker

        picker = ModelPicker(self.recent, self, cache_dir=cache_dir, folders=self.folders)
        picker.folder_added.connect(self._add_folder)
        return picker

    def _add_folder(self, folder: str) -> None:
        if folder not in self.folders:
            self.folders.append(folder)
            self.folders_changed.emit(list(self.folders))


def opt_in_offer(bar: ModelBar, opt_in: str) -> tuple[str, Callable[[], None]]:
    """What a load that needs `opt_in` (a LoadOptions flag) offers, as the banner's button: its text, and what it
    does: allow it for the model the bar shows, remembered, and load that model again."""
    source = bar.source()

    def allow() -> None:
        bar.allow(source, opt_in)
        bar.load_requested.emit(bar.spec())

    return f"{OPT_IN_LABELS[opt_in]} for {source}", allow
