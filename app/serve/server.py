"""The HTTP server: uvicorn serving the app in a thread of its own, on a socket bound here (so a busy port is one
line before anything runs, and port 0 picks a free one). uvicorn leaves signals alone off the main thread; `stop`
sets its exit flag and waits. Why uvicorn + Starlette: a maintained HTTP/1.1 stack with streaming and disconnects
handled, not a hand-written server; Starlette is the small ASGI toolkit FastAPI sits on, without its validation layer
(ours names our fields). A host that is not loopback needs an API key (`check_exposure`).
"""

from __future__ import annotations

import ipaddress
import socket
import threading

from app.serve.app import make_app
from app.serve.host import Host

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, api_key: str | None) -> None:
    """Refuse to serve beyond this machine without a key (a ValueError saying how)."""
    if not is_loopback(host) and not api_key:
        raise ValueError(f"serving on {host} lets other machines in: give an API key (--api-key-env NAME), or "
                         "keep the default 127.0.0.1")


class Server:
    """`host`'s model served on `address:port` until `stop`."""

    def __init__(self, host: Host, address: str = "127.0.0.1", port: int = 0, api_key: str | None = None) -> None:
        import uvicorn  # (not for --help)

        check_exposure(address, api_key)
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((address, port))
        except OSError as e:
            self.sock.close()
            raise ValueError(f"cannot listen on {address}:{port}: {e.strerror or e}") from None
        self.port = self.sock.getsockname()[1]
        self.address = address
        config = uvicorn.Config(make_app(host, api_key), log_level="warning", lifespan="off", access_log=False,
                                timeout_graceful_shutdown=5)
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, kwargs={"sockets": [self.sock]},
                                       name="logitlab-serve", daemon=True)

    @property
    def url(self) -> str:
        shown = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{shown}:{self.port}/v1"

    def start(self, timeout: float = 10.0) -> Server:
        self.thread.start()
        for _ in range(int(timeout / 0.02)):
            if self.uvicorn.started or not self.thread.is_alive():
                break
            threading.Event().wait(0.02)
        if not self.uvicorn.started:
            raise RuntimeError(f"the server did not start on {self.url}")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(timeout)
        self.sock.close()
