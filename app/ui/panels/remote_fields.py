"""The model bar's fields for a remote server: its base URL, an API key entry, and how many requests may run at
once; and the server's model list, fetched off the UI thread.

The key goes to the keychain (or this session only, which the status says) through `app.core.remote.secrets`: this
widget never keeps it, and nothing here writes it to preferences (the URL and concurrency are kept there:
`server` / `set_server`). The command line's `--api-key-env NAME` names an environment variable that holds the key
of the server it opened the window on (`set_key_env`): the model list and the spec (`api_key_env`) name it while
the URL is that server's, never for another. `models_listed` brings the list (or one error line) back to the UI
thread.
"""

from __future__ import annotations

import contextlib
import threading

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QInputDialog, QLineEdit, QSpinBox, QToolButton, QWidget

MAX_CONCURRENCY = 64


class RemoteFields(QWidget):
    models_listed = Signal(object, str)  # list[str] of model names (None on failure), status line
    key_stored = Signal(str)  # where the key went, in words

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.url = QLineEdit(placeholderText="http://127.0.0.1:8080/v1", toolTip="An OpenAI-compatible server "
                             "(vLLM, llama.cpp's server, mlx_lm.server, LM Studio, Ollama): its base URL")
        self.url.setMinimumWidth(180)
        self.key = QToolButton(text="Key…", toolTip="Set this server's API key (kept in the system keychain, or for "
                               "this session only where there is none; never in the preferences)")
        self.key.clicked.connect(self.ask_key)
        self._key_tip = self.key.toolTip()
        self._key_env: tuple[str, str] | None = None  # (variable, the base URL it holds the key of)
        self.url.textChanged.connect(self._show_key_source)
        self.concurrency = QSpinBox(minimum=1, maximum=MAX_CONCURRENCY, value=4, prefix="parallel: ",
                                    toolTip="Samples run as concurrent requests, at most this many at once "
                                    "(the server batches them)")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for w in (self.url, self.key, self.concurrency):
            row.addWidget(w)

    def base_url(self) -> str:
        return self.url.text().strip()

    def server(self) -> tuple[str, int]:
        """What the preferences keep of the server: its base URL and concurrency (never its key)."""
        return self.base_url(), self.concurrency.value()

    def set_server(self, base_url: str, concurrency: int) -> None:
        self.url.setText(base_url)
        self.concurrency.setValue(concurrency)  # clamped to 1..MAX_CONCURRENCY

    def set_key_env(self, name: str | None) -> None:
        """The key of the server now in the URL field is in the environment variable `name` (--api-key-env);
        None: from the keychain."""
        self._key_env = (name, _same(self.base_url())) if name else None
        self._show_key_source()

    def api_key_env(self) -> str | None:
        """The environment variable holding this server's key, when the command line named one for it."""
        if self._key_env is not None and self._key_env[1] == _same(self.base_url()):
            return self._key_env[0]
        return None

    def _show_key_source(self) -> None:
        env = self.api_key_env()
        self.key.setToolTip(self._key_tip if env is None else f"This server's API key is read from the environment "
                            f"variable {env} (--api-key-env), which wins over a key set here")

    def ask_key(self) -> None:
        url = self.base_url()
        if not url:
            self.key_stored.emit("type the server's base URL first: a key belongs to one server")
            return
        key, ok = QInputDialog.getText(self, "API key", f"API key for {url}", QLineEdit.EchoMode.Password)
        if ok and key.strip():
            from app.core.remote.secrets import store_key  # (the HTTP client's: not before the window's first paint)

            self.key_stored.emit(store_key(url, key.strip()))

    def list_models(self) -> None:
        """Ask the server for its models on a thread of its own; `models_listed` answers on the UI thread."""
        url = self.base_url()
        threading.Thread(target=self._list, args=(url, self.api_key_env()), daemon=True,
                         name="logitlab-remote-models").start()

    def _list(self, url: str, key_env: str | None) -> None:
        from app.core.remote.remote_run import list_models
        from backends.base import ModelLoadError

        try:
            names = list_models(url, key_env)
            answer = (names, f"{len(names)} model{'s' * (len(names) != 1)} on {url}")
        except ModelLoadError as e:
            answer = (None, str(e))
        with contextlib.suppress(RuntimeError):  # the window closed while the server answered: nobody asks now
            self.models_listed.emit(*answer)


def _same(url: str) -> str:
    """A base URL as compared: with or without its trailing slash it is one server."""
    return url.strip().rstrip("/")
