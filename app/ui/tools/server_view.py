"""Run ▸ Server…: the window's model served over an OpenAI-compatible API on 127.0.0.1 (app.serve), on the window's
own model thread, so its jobs queue beside the window's Generate. Start / Stop, the port and the name of the
environment variable holding the API key (none: no key); a live list of the requests (time, client, route, tokens,
status, runs) refreshed on the router's tick, never per token. Every request is a run of the window's session (the
router registers it from `Playground.served_events`); a double-click shows it. The server follows the window's model
when another loads, and stops before the model thread closes (`Playground.closing`). It holds no sampling.
"""

from __future__ import annotations

import html
import time
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

if TYPE_CHECKING:
    from app.core.session.store import Run
    from app.serve.host import Host
    from app.serve.served import Served
    from app.serve.server import Server
    from app.ui.viewmodel.playground import Playground

ADDRESS = "127.0.0.1"  # the window serves this machine only (`logitlab serve --host` binds elsewhere, with a key)
DEFAULT_PORT = 8000
STOP_S = 10.0  # how long Stop (and closing the window) waits for uvicorn to finish its requests
COLUMNS = ("time", "client", "route", "tokens", "status", "run")
STOPPED = "Stopped. Start serves the window's model at http://127.0.0.1:PORT/v1 (OpenAI's API); every request " \
          "becomes a run of this session."


class ServerView(QWidget):
    """The Server window: port, key variable, Start / Stop, what is served, and the requests taken so far."""

    run_opened = Signal(int)  # run id: a request's run was opened as the shown run
    failed = Signal(str)  # the server could not start: why (the window's banner shows it)

    def __init__(self, playground: Playground, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("Server — Logit Lab")
        self.pg = playground
        self.server: Server | None = None
        self.host: Host | None = None
        self.rows: list[Served] = []
        self._live: set[int] = set()  # rows whose runs have not all ended
        self.port = QSpinBox(minimum=0, maximum=65535, value=DEFAULT_PORT, prefix="port ",
                             toolTip="The port on 127.0.0.1 (0: any free one)")
        self.key_env = QLineEdit(placeholderText="API key variable (none: no key)", toolTip="The environment "
                                 "variable holding the key clients must send (Authorization: Bearer KEY)")
        self.start_button = QPushButton("Start", toolTip="Serve the window's model; its runs queue beside yours")
        self.stop_button = QPushButton("Stop", enabled=False)
        self.status = QLabel(STOPPED, wordWrap=True, textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = QTableWidget(0, len(COLUMNS), selectionBehavior=QTableWidget.SelectionBehavior.SelectRows,
                                  editTriggers=QTableWidget.EditTrigger.NoEditTriggers)
        self._layout()
        self._wire()

    def _layout(self) -> None:
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        for column in range(len(COLUMNS)):  # the route and the status take the room left; the rest their contents
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Stretch if COLUMNS[column] in ("route", "status")
                                        else QHeaderView.ResizeMode.ResizeToContents)
        self.table.setWordWrap(False)
        top = QHBoxLayout()
        for w in (self.port, self.key_env, self.start_button, self.stop_button):
            top.addWidget(w)
        top.setStretch(1, 1)
        box = QVBoxLayout(self)
        box.addLayout(top)
        box.addWidget(self.status)
        box.addWidget(self.table, 1)
        self.resize(760, 420)

    def _wire(self) -> None:
        pg = self.pg
        self.start_button.clicked.connect(self.start)
        self.stop_button.clicked.connect(self.stop)
        self.table.cellDoubleClicked.connect(self.open_row)
        pg.request_served.connect(self._add)
        pg.steps_recorded.connect(self.refresh)  # once per router tick at most, whatever the tokens' pace
        pg.session_changed.connect(self.refresh)
        pg.loaded.connect(self._follow_model)
        pg.closing.connect(self.stop)  # before the model thread closes

    @property
    def serving(self) -> bool:
        return self.server is not None

    def start(self) -> bool:
        """Serve the window's loaded model on 127.0.0.1 at the port; False (with `failed`'s reason) where it cannot."""
        if self.serving:
            return True
        pg = self.pg
        if pg.info is None or pg.tokenizer is None:
            return self._refuse("load a model first: the server serves the window's model")
        if pg.editing.model.backend == "remote":
            return self._refuse("the server serves a local model: a remote one is served already")
        from app.core.remote.secrets import MissingKeyError, api_key  # (the server's modules: at the first Start)
        from app.serve.host import Host
        from app.serve.server import Server

        try:
            env = self.key_env.text().strip()
            key = api_key(f"http://{ADDRESS}:{self.port.value()}", env) if env else None
            host = Host(pg.editing.model, thread=pg.worker, observer=pg.served_events)
            host.use(pg.editing.model, pg.info, pg.tokenizer)
            self.server = Server(host, ADDRESS, self.port.value(), key).start()
        except (MissingKeyError, ValueError, RuntimeError) as e:
            return self._refuse(f"the server could not start: {e}")
        self.host = host
        self._show_state()
        return True

    def stop(self) -> None:
        """Stop serving: its runs in progress cancelled (each ends within a step, kept as cancelled), then uvicorn's
        exit flag, its thread joined (STOP_S at most). The model thread is the window's and goes on."""
        server, self.server, self.host = self.server, None, None
        if server is not None:
            for row in self._live:
                self.pg.worker.cancel(self.rows[row].request.id)
            server.stop(STOP_S)
        self._show_state()

    def open_row(self, row: int, _column: int = 0) -> None:
        """Show the row's request's (first) run."""
        if 0 <= row < len(self.rows):
            run_id = self.rows[row].request.run_ids[0]
            if self.pg.session.get(run_id) is not None:
                self.pg.show_run(run_id)
                self.run_opened.emit(run_id)

    def refresh(self) -> None:
        """The rows still running: their tokens and status now (rows that ended are left as they are)."""
        for row in sorted(self._live):
            runs = self.pg.session.of_request(self.rows[row].request.id)
            tokens, status = str(sum(len(r.steps) for r in runs)), _status(runs)
            self._set(row, 3, tokens)
            self._set(row, 4, status)
            if not runs or not any(r.running for r in runs):
                self._live.discard(row)

    def _add(self, served: Served) -> None:
        row = len(self.rows)
        self.rows.append(served)
        self.table.insertRow(row)
        cells = (time.strftime("%H:%M:%S", time.localtime(served.at)), served.client, served.name, "0", "queued",
                 ", ".join(str(r) for r in served.request.run_ids))
        for column, text in enumerate(cells):
            item = QTableWidgetItem(text)
            item.setToolTip(text if column != 5 else "Double-click: show this run")
            self.table.setItem(row, column, item)
        self._live.add(row)
        self.refresh()

    def _set(self, row: int, column: int, text: str) -> None:
        item = self.table.item(row, column)
        if item.text() != text:
            item.setText(text)
            item.setToolTip(text)

    def _follow_model(self, _info: object) -> None:
        """The window loaded another model: the server serves that one from now on."""
        pg = self.pg
        if self.host is not None and pg.info is not None and pg.tokenizer is not None:
            self.host.use(pg.editing.model, pg.info, pg.tokenizer)
            self._show_state()

    def _show_state(self) -> None:
        serving = self.serving
        self.start_button.setEnabled(not serving)
        self.stop_button.setEnabled(serving)
        self.port.setEnabled(not serving)
        self.key_env.setEnabled(not serving)
        if self.server is not None and self.host is not None:
            key = " (API key required)" if self.key_env.text().strip() else ""
            name = html.escape(self.host.name)
            self.status.setText(f"Serving <b>{name}</b> at <code>{self.server.url}</code>{key}: point an OpenAI "
                                "client's base URL at it. Double-click a request to show its run.")
        else:
            self.status.setText(STOPPED)

    def _refuse(self, message: str) -> bool:
        self.status.setText(message)
        self.failed.emit(message)
        return False


def _status(runs: list[Run]) -> str:
    """Queued, running, or how its runs ended (a failure: its message); "—" once its runs left the session."""
    if not runs:
        return "—"
    if any(r.running for r in runs):
        return "running" if any(r.steps or r.prefilled for r in runs) else "queued"
    ended = [r.finished for r in runs if r.finished is not None]
    errors = [f.message for f in ended if f.reason == "error"]
    return f"error: {errors[0]}" if errors else ", ".join(dict.fromkeys(f.reason for f in ended))
