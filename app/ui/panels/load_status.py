"""What the model bar says about a load: a progress bar with the download's speed and time left, the loaded model's
line, the decode step compiling (and how long it took), a server's answer; cleared when a load fails. It shows what
it is told and decides nothing.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QProgressBar, QSizePolicy, QWidget

if TYPE_CHECKING:
    from app.core.events import Compiling
    from app.ui.viewmodel.playground import Playground

COMPILE_COST = ("--compile (torch): a static KV cache and a torch.compile'd decode step, faster per token; its "
                "first run compiles, tens of seconds (a minute or more on a CPU; torch's caches make a second start "
                "quicker). Start without --compile to decode eagerly: no wait.")


class ElidedLabel(QLabel):
    """A one-line label that ends in "…" where the room ends (the whole text in its tooltip) and never widens
    its window."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        super().setText(text)
        self.setToolTip(text)  # the whole of what may be cut

    def paintEvent(self, _event: object) -> None:  # noqa: N802 - Qt override
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        text = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())
        painter.drawText(self.contentsRect(), int(self.alignment()), text)


class LoadStatus(QObject):
    """The bar's `progress` and `status` widgets (it places them) and what they show."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.progress = QProgressBar(maximumWidth=160, textVisible=True)
        self.progress.hide()
        self._download_start: tuple[float, int] | None = None
        self.status = ElidedLabel()  # a long status (a download's progress, a model's name) ends in "…"
        self.status.setObjectName("model_status")
        self.status.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)

    def bind(self, pg: Playground) -> None:
        """Load progress, the loaded model and its compile from the view-model; a failed load clears the line."""
        pg.loading.connect(self.show_progress)
        pg.loaded.connect(lambda info: self.show_status(f"{info.name} · {info.backend} · {info.device}"))
        pg.compiling.connect(self.show_compiling)
        pg.failed.connect(lambda _message: self.show_status(""))
        pg.opt_in_needed.connect(lambda _message, _opt_in: self.show_status(""))

    def show_progress(self, message: str, done: int, total: int) -> None:
        self.progress.setVisible(total > 0)
        if total <= 0:
            self._download_start = None
            self.status.setText(message)
            return
        now = time.monotonic()
        if self._download_start is None:
            self._download_start = (now, done)
        t0, d0 = self._download_start
        speed = (done - d0) / (now - t0) if now > t0 else 0.0
        left = f", {(total - done) / speed:.0f} s left" if speed > 0 else ""
        self.status.setText(f"{message} {speed / 2**20:.1f} MiB/s{left} — Stop (Esc) cancels")
        self.progress.setRange(0, 1000)
        self.progress.setValue(int(1000 * done / total))
        self.progress.setFormat(f"{done / 2**20:.0f} / {total / 2**20:.0f} MiB")

    def show_compiling(self, ev: Compiling) -> None:
        """The decode step compiling (the first token waits for it), then how long it took, after the model's line."""
        model = self.status.text().split(" · Compil")[0]
        self.show_status(f"{model} · {ev.message}")
        self.status.setToolTip(f"{self.status.text()}\n\n{COMPILE_COST}")

    def show_status(self, text: str) -> None:
        self._download_start = None
        self.progress.hide()
        self.status.setText(text)
