"""Run ▸ Server… in the real window: the window's model served on a free port of 127.0.0.1, asked with httpx; each
request a row of the list and a run of the window's session (the same tokens as the answer), shown on a
double-click; Stop, and closing the window while a request streams, end the server cleanly."""

from __future__ import annotations

import threading

import httpx
import pytest
from PySide6.QtCore import Qt

from app.ui.main_window import MainWindow
from app.ui.tools.server_view import ServerView

RUN_TIMEOUT = 60_000


def started(qtbot, w: MainWindow) -> ServerView:
    """Open Run ▸ Server…, on port 0 (any free one), and press Start."""
    w.tools["server"].trigger()
    view = w.tools["server"].view
    assert isinstance(view, ServerView) and view.isVisible()
    view.port.setValue(0)
    qtbot.mouseClick(view.start_button, Qt.MouseButton.LeftButton)
    assert view.serving, view.status.text()
    assert view.server.url.startswith("http://127.0.0.1:") and not view.start_button.isEnabled()
    return view


def test_a_served_completion_is_a_row_and_a_finished_run_with_the_answer_s_tokens(qtbot, window):
    view = started(qtbot, window)
    pg = window.playground
    body = {"prompt": "Hello", "max_tokens": 6, "seed": 3, "logprobs": 1}
    answer = httpx.post(view.server.url + "/completions", json=body, timeout=60)
    assert answer.status_code == 200
    run_id = int(answer.headers["X-Logitlab-Run"])
    qtbot.waitUntil(lambda: view.table.rowCount() == 1 and view.table.item(0, 4).text() not in ("queued",
                                                                                                 "running"),
                    timeout=RUN_TIMEOUT)
    run = pg.session.get(run_id)
    assert run is not None and run.finished is not None and run.name == "/v1/completions"
    choice, eos = answer.json()["choices"][0], pg.tokenizer.eos_ids
    assert run.trace.text == choice["text"]
    shown_tokens = [s for s in run.steps if s.text or s.token_id not in eos]  # (an end token is not in the text)
    assert answer.json()["usage"]["completion_tokens"] == len(shown_tokens)
    assert choice["logprobs"]["token_logprobs"] == pytest.approx([s.sample.raw_logprob for s in shown_tokens], abs=1e-6)
    cells = [view.table.item(0, c).text() for c in range(view.table.columnCount())]
    assert cells[1].startswith("127.0.0.1:") and cells[2] == "/v1/completions"
    assert cells[3] == str(len(run.steps)) and cells[4] == run.finished.reason and cells[5] == str(run_id)
    assert pg.shown is not run  # a served run is not thrust on the user: a double-click shows it
    view.table.cellDoubleClicked.emit(0, 2)
    assert pg.shown is run
    assert [s.token_id for s in pg.steps] == list(run.trace.token_ids)


def test_generate_still_runs_while_serving_and_stop_ends_the_server(qtbot, window):
    view = started(qtbot, window)
    server = view.server
    window.prompt.set_prompt("Hi")
    window.sampler.editors["max_tokens"].setValue(4)
    window.generate()
    answer = httpx.post(server.url + "/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                                "max_tokens": 4}, timeout=60)
    assert answer.status_code == 200
    qtbot.waitUntil(lambda: not window.playground.busy and view.table.rowCount() == 1
                    and view.table.item(0, 4).text() not in ("queued", "running"), timeout=RUN_TIMEOUT)
    assert len(window.playground.session.runs) == 2  # the window's run and the served one
    qtbot.mouseClick(view.stop_button, Qt.MouseButton.LeftButton)
    assert not view.serving and not server.thread.is_alive() and view.start_button.isEnabled()
    with pytest.raises(httpx.TransportError):
        httpx.get(server.url + "/models", timeout=2)


def test_closing_the_window_while_a_request_streams_stops_the_server_first(qtbot, window):
    view = started(qtbot, window)
    server, worker = view.server, window.playground.worker
    eos = min(window.playground.tokenizer.eos_ids)
    body = {"prompt": "Hello", "max_tokens": 100_000, "stream": True, "logit_bias": {str(eos): -100}}
    streaming = threading.Event()

    def ask() -> None:
        try:
            with httpx.stream("POST", server.url + "/completions", json=body, timeout=60) as r:
                for _ in r.iter_lines():
                    streaming.set()
        except httpx.HTTPError:
            pass  # (the server went away: what closing does)

    client = threading.Thread(target=ask, daemon=True)
    client.start()
    qtbot.waitUntil(streaming.is_set, timeout=RUN_TIMEOUT)
    qtbot.waitUntil(lambda: view.table.rowCount() == 1, timeout=RUN_TIMEOUT)
    window.close()
    assert not server.thread.is_alive() and worker.stopped.is_set()
    client.join(10)
    assert not client.is_alive()
    (run,) = [r for r in window.playground.session.runs.values()]
    assert 0 < len(run.steps) < 100_000
