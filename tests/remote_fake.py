"""A scriptable OpenAI-compatible server on 127.0.0.1 (stdlib http.server, in a thread), for what a real server
will not do on demand: stream log-probabilities the standard way, refuse with 401/403/404/429/5xx, send malformed
SSE, cut a stream mid-run, or stall. Each test gives it a `behave(handler, body)` that writes the answer;
`sampling_server` is one that samples from a fixed distribution, honestly or ignoring the fields a test names."""

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


# a server that samples: honestly from a fixed distribution, or ignoring some fields --------------------------------
WORDS = (" ant", " bee", " cat", " dog", " eel", " fox", " gnu", " hen", " ibis", " jay", " kiwi", " lark")
SAMPLED_FIELDS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "frequency_penalty",
                  "presence_penalty", "seed", "stop", "logit_bias", "n", "echo", "top_logprobs")


class MarkovModel:
    """A fixed tiny 'model' (numpy's seeded draws): twelve word tokens, the next one's logits a function of the last
    word only (the row after the prompt: the last row). Greedy decoding cycles, so it repeats within 12 tokens."""

    def __init__(self, seed: int = 0, scale: float = 1.0) -> None:
        import numpy as np

        self.logits = np.random.default_rng(seed).normal(0.0, scale, (len(WORDS) + 1, len(WORDS)))

    def row(self, last: int | None) -> Any:
        return self.logits[-1 if last is None else last].copy()

    @staticmethod
    def prompt_ids(prompt: str) -> list[int]:
        """The prompt's words that are words of the vocabulary (what a repetition penalty counts)."""
        return [WORDS.index(" " + w) for w in prompt.split() if " " + w in WORDS]


def _log_softmax(x: Any) -> Any:
    import numpy as np

    with np.errstate(divide="ignore"):
        z = x - x.max()
        return z - np.log(np.exp(z).sum())


def _filter(probs: Any, top_k: int, top_p: float, min_p: float) -> Any:
    """The probabilities after top-k, top-p (the smallest set holding top_p) and min-p, renormalised."""
    import numpy as np

    order = np.argsort(-probs, kind="stable")
    keep = np.ones_like(probs, dtype=bool)
    if top_k > 0:
        keep[order[top_k:]] = False
    if top_p < 1.0:
        before = np.cumsum(probs[order]) - probs[order]
        keep[order[before >= top_p]] = False
    if min_p > 0:
        keep &= probs >= min_p * probs.max()
    out = np.where(keep, probs, 0.0)
    return out / out.sum()


FIELD_DEFAULTS = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.0,
                  "frequency_penalty": 0.0, "presence_penalty": 0.0, "seed": None, "stop": None, "logit_bias": None,
                  "n": 1, "echo": False, "top_logprobs": None}


class _Fields:
    """A request's sampling fields as a server that ignores `ignores` reads them (an ignored one: its default)."""

    def __init__(self, body: dict, ignores: frozenset[str]) -> None:
        self.body, self.ignores = body, ignores

    def __getattr__(self, name: str) -> Any:
        default = FIELD_DEFAULTS[name]
        return default if name in self.ignores else self.body.get(name, default)


def _step(model: MarkovModel, f: _Fields, context: list[int], generated: list[int], rng: Any) -> tuple[int, Any, Any]:
    """One token: its id, the model's log-probabilities, the log-probabilities it was drawn from."""
    import numpy as np

    logits = model.row(generated[-1] if generated else None)
    raw = _log_softmax(logits)
    for tid, value in (f.logit_bias or {}).items():
        logits[int(tid)] += float(value)
    for tid in set(context + generated):  # the repetition penalty as Hugging Face's (prompt and output)
        r = f.repetition_penalty
        logits[tid] = logits[tid] / r if logits[tid] > 0 else logits[tid] * r
    for tid in set(generated):
        logits[tid] -= f.frequency_penalty * generated.count(tid) + f.presence_penalty
    if f.temperature == 0:
        pick = int(np.argmax(logits))
        return pick, raw, np.where(np.arange(len(logits)) == pick, 0.0, -np.inf)
    probs = _filter(np.exp(_log_softmax(logits / f.temperature)), f.top_k, f.top_p, f.min_p)
    with np.errstate(divide="ignore"):
        return int(rng.choice(len(probs), p=probs)), raw, np.log(probs)


def _entry(tid: int, lps: Any, top_n: int) -> dict:
    import numpy as np

    order = [int(i) for i in np.argsort(-lps, kind="stable")[:top_n] if np.isfinite(lps[i])]
    cand = lambda i: {"id": i, "token": WORDS[i], "logprob": float(lps[i]), "bytes": list(WORDS[i].encode())}
    return {**cand(tid), "top_logprobs": [cand(i) for i in order]}


def _sample(model: MarkovModel, f: _Fields, prompt: str, rng: Any, reports: str, top_n: int | None,
            max_tokens: int) -> tuple[str, list[dict], str]:
    """One choice: its text, its log-probability entries and its finish reason."""
    generated: list[int] = []
    entries: list[dict] = []
    stops = [f.stop] if isinstance(f.stop, str) else list(f.stop or [])
    text = ""
    for _ in range(max_tokens):
        tid, raw, used = _step(model, f, model.prompt_ids(prompt), generated, rng)
        if any(s in text + WORDS[tid] for s in stops):
            cut = min((text + WORDS[tid]).find(s) for s in stops if s in text + WORDS[tid])
            return (text + WORDS[tid])[:cut], entries, "stop"
        generated.append(tid)
        text += WORDS[tid]
        if top_n is not None:
            entries.append(_entry(tid, raw if reports == "raw" else used, top_n))
    return text, entries, "length"


def sampling_server(ignores: frozenset[str] | set[str] = frozenset(), reports: str = "raw", seed: int = 1234,
                    model: MarkovModel | None = None) -> Behave:
    """A completions server over `MarkovModel` that applies every field of SAMPLED_FIELDS except those it `ignores`
    (read as absent), honours a request's seed (unseeded requests draw from its own generator, seeded with `seed`),
    and reports the model's log-probabilities (`reports="raw"`) or those of the distribution it drew from
    ("sampled": after temperature, penalties, bias and the filters it applies). A stream carries the first choice
    token by token; a whole answer carries all `n`. Its log-probability entries name token ids, as mlx_lm.server's do.
    Unknown to it: chat."""
    import numpy as np

    model = model or MarkovModel()
    own = np.random.default_rng(seed)
    lock = threading.Lock()
    ignores = frozenset(ignores)

    def behave(h: Handler, body: dict) -> None:
        f = _Fields(body, ignores)
        logprobs = body.get("logprobs")
        top_n = None if not logprobs else (int(body.get("top_logprobs") or 0) if logprobs is True else int(logprobs))
        if top_n is not None and "top_logprobs" in ignores:
            top_n = len(WORDS)
        prompt = str(body.get("prompt", ""))
        choices = []
        with lock:
            for i in range(max(1, int(f.n))):
                rng = np.random.default_rng(f.seed + i) if f.seed is not None else own
                text, entries, finish = _sample(model, f, prompt, rng, reports, top_n, int(body.get("max_tokens", 16)))
                if f.echo:
                    text = prompt + text
                    entries = [{"token": prompt, "logprob": -1.0, "bytes": list(prompt.encode())}, *entries]
                choice: dict[str, Any] = {"index": i, "text": text, "finish_reason": finish}
                if top_n is not None:
                    choice["logprobs"] = {"content": entries}
                choices.append(choice)
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": 0, "total_tokens": 0}
        if not body.get("stream"):
            h.answer(200, {"object": "text_completion", "system_fingerprint": "fake", "choices": choices,
                           "usage": usage})
            return
        h.start_stream()
        first = choices[0]
        for e in first.get("logprobs", {}).get("content", []):
            h.event(chunk(e["token"], [e]))
        h.event({**chunk("", None, first["finish_reason"]), "usage": usage})
        h.end_stream()

    return behave
