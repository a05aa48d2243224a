"""A scriptable OpenAI-compatible server on 127.0.0.1 (stdlib http.server, in a thread), for what a real server
will not do on demand: stream log-probabilities the standard way, refuse with 401/403/404/429/5xx, send malformed
SSE, cut a stream mid-run, or stall. Each test gives it a `behave(handler, body)` that writes the answer."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Behave = Callable[["Handler", dict], None]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.server.gets.append(self.path)
        if self.path.rstrip("/").endswith("/models") and self.server.list_models is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # (the client gave up)
                self.server.list_models(self)
        elif self.path.rstrip("/").endswith("/models"):
            self.answer(200, {"object": "list", "data": self.server.models})
        else:
            self.answer(404, {"error": {"message": "no such path"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        self.server.auth.append(self.headers.get("Authorization"))
        try:
            self.server.behave(self, body)
        except (BrokenPipeError, ConnectionResetError):
            self.server.client_left.set()

    def answer(self, code: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.send_response(code)
        for k, v in {"Content-Type": "application/json", **(headers or {})}.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def send_chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def event(self, obj: Any) -> None:
        self.send_chunk(f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n")

    def end_stream(self) -> None:
        self.event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def cut(self) -> None:
        """Close the connection mid-body (no last chunk): a stream cut mid-run."""
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(2)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    behave: Behave
    bodies: list[dict]
    auth: list[str | None]
    client_left: threading.Event
    models: list[dict]
    list_models: Callable[[Handler], None] | None
    gets: list[str]
    applied: list[dict]


@contextmanager
def fake_server(behave: Behave, models: list[dict] | None = None,
                list_models: Callable[[Handler], None] | None = None) -> Iterator[_Server]:
    """A server that answers completions as `behave` writes them and GET /models with `models` (or as
    `list_models` writes it); what it was sent is in `bodies`, `auth` and `gets`."""
    server = _Server(("127.0.0.1", 0), Handler)
    server.behave, server.bodies, server.auth, server.client_left = behave, [], [], threading.Event()
    server.models = list(models or [{"id": "fake-model", "object": "model"}])
    server.list_models, server.gets = list_models, []
    server.applied = []
    server.url = f"http://127.0.0.1:{server.server_address[1]}/v1"  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


# what a standard server streams -------------------------------------------------------------------------------
def candidate(token: str | bytes, logprob: float) -> dict:
    data = token if isinstance(token, bytes) else token.encode()
    return {"token": data.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(data)}


def entry(token: str | bytes, logprob: float, top: list[tuple[str | bytes, float]]) -> dict:
    return {**candidate(token, logprob), "top_logprobs": [candidate(t, lp) for t, lp in top]}


def chunk(text: str, entries: list[dict] | None, finish: str | None = None) -> dict:
    choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish}
    if entries is not None:
        choice["logprobs"] = {"content": entries}
    return {"object": "text_completion", "choices": [choice]}


# A run of tokens: (token, logprob, top-3); each as a standard server (OpenAI, vLLM, llama.cpp) sends it.
TOKENS = [(f"w{i}", -0.5 - i / 10, [(f"w{i}", -0.5 - i / 10), ("x", -1.5), ("y", -2.5)]) for i in range(200)]


def stream_tokens(n: int, *, delay: float = 0.0, then: Callable[[Handler], None] | None = None) -> Behave:
    """Stream the first n of TOKENS one per event, then `then` (default: the finish and [DONE])."""

    def behave(h: Handler, body: dict) -> None:
        h.start_stream()
        for tok, lp, top in TOKENS[:n]:
            h.event(chunk(tok, [entry(tok, lp, top)]))
            if delay:
                time.sleep(delay)
        if then is not None:
            then(h)
        else:
            h.event(chunk("", None, "length"))
            h.end_stream()

    return behave


def trickle(after: int = 0, every: float = 0.2) -> Behave:
    """Stream the first `after` of TOKENS, then one byte of a comment line every `every` seconds (a server that
    never stops and never finishes), until the client leaves or a minute has passed."""

    def behave(h: Handler, body: dict) -> None:
        stream_tokens(after, then=lambda h: h.send_chunk(": "))(h, body)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            h.send_chunk("x")
            time.sleep(every)

    return behave


# llama.cpp's server as it ships (llama-cpp-python 0.3.36) --------------------------------------------------------
LLAMACPP_DEFAULTS = {"temperature": 0.8, "top_p": 0.95, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1,
                     "frequency_penalty": 0.0, "presence_penalty": 0.0}
LLAMACPP_MODELS = [{"id": "/models/tiny.gguf", "object": "model", "owned_by": "me", "permissions": []}]


def llamacpp_like(n: int = 5, delay: float = 0.02) -> Behave:
    """Streams as llama-cpp-python's server does: its defaults for every sampling field the request leaves out
    (its own names: `repeat_penalty`; `repetition_penalty` is ignored), the legacy logprobs format with no ids, and
    a running stream ended ([DONE], no finish, connection dropped) when another request arrives. What it applied
    is in `server.applied`."""
    lock = threading.Lock()
    current: dict[str, Any] = {"gen": 0}

    def behave(h: Handler, body: dict) -> None:
        with lock:
            current["gen"] += 1
            mine = current["gen"]
        h.server.applied.append({k: body.get(k, v) for k, v in LLAMACPP_DEFAULTS.items()})
        h.start_stream()
        for i in range(min(n, body.get("max_tokens") or 16)):
            if current["gen"] != mine:  # interrupted by a newer request
                h.event("[DONE]")
                h.cut()
                return
            tok = f"t{i}"
            h.event({"object": "text_completion", "choices": [{"text": tok, "index": 0, "finish_reason": None,
                     "logprobs": {"tokens": [tok], "text_offset": [0], "token_logprobs": [-0.5],
                                  "top_logprobs": [{tok: -0.5, "z": -1.5}]}}]})
            time.sleep(delay)
        h.event(chunk("", None, "length"))
        h.end_stream()

    return behave
