"""The window's remote pieces: the model bar's server fields (its spec, the server's model list fetched off the
UI thread) and the sampler panel's marks for what a server may not apply."""

from __future__ import annotations

import math
import re

import numpy as np
from PySide6.QtGui import QColor

from app.cli.flags import spec_from
from app.cli.window import parser as window_parser
from app.core.models.sources import ModelSpec
from app.core.record.export import shade, shade_rgba
from app.core.record.span_stats import confidence, varentropy
from app.core.remote.server_request import SERVER_NOTES
from app.ui.formatting import format_prob
from app.ui.main_window import MainWindow
from app.ui.panels.model_bar import ModelBar
from app.ui.panels.sampler_panel import SamplerPanel
from tests.remote_fake import Handler, chunk, entry, fake_server, stream_tokens
from tests.ui.conftest import RUN_TIMEOUT


def test_the_remote_backend_shows_its_fields_and_makes_a_remote_spec(qtbot):
    bar = ModelBar()
    qtbot.addWidget(bar)
    bar.show()
    assert not bar.remote.isVisible() and bar.device.isVisible()
    bar.set_backend("remote")
    assert bar.remote.isVisible() and not bar.device.isVisible() and not bar.offline.isVisible()
    bar.remote.url.setText(" http://gpu:8000/v1 ")
    bar.remote.concurrency.setValue(8)
    bar.model.setCurrentText("llama-70b")
    spec = bar.spec()
    assert (spec.backend, spec.source, spec.base_url, spec.concurrency) == ("remote", "llama-70b",
                                                                             "http://gpu:8000/v1", 8)


def test_browse_lists_the_servers_models(qtbot):
    bar = ModelBar()
    qtbot.addWidget(bar)
    bar.set_backend("remote")
    with fake_server(stream_tokens(1)) as srv:
        bar.remote.url.setText(srv.url)
        with qtbot.waitSignal(bar.remote.models_listed, timeout=10_000):
            bar.browse()
    assert bar.model.findText("fake-model") >= 0 and bar.source() == "fake-model"
    assert "1 model on" in bar.status.text()


def test_an_unreachable_server_says_so_in_the_status(qtbot):
    bar = ModelBar()
    qtbot.addWidget(bar)
    bar.set_backend("remote")
    bar.remote.url.setText("http://127.0.0.1:9/v1")  # the discard port: nothing listens
    with qtbot.waitSignal(bar.remote.models_listed, timeout=10_000):
        bar.browse()
    assert "connection refused" in bar.status.text()


def test_the_sampler_panel_marks_what_a_server_may_not_apply(qtbot):
    panel = SamplerPanel()
    qtbot.addWidget(panel)
    panel.show()
    assert not any(n.isVisible() for n in panel.notes.values()) and panel.order.isEnabled()
    panel.set_remote(True)
    assert all(n.isVisible() for n in panel.notes.values()) and not panel.order.isEnabled()
    assert all(n.toolTip().endswith(SERVER_NOTES[name]) for name, n in panel.notes.items())
    assert set(panel.notes) == set(SERVER_NOTES)
    panel.set_remote(False)
    assert not any(n.isVisible() for n in panel.notes.values()) and panel.order.isEnabled()



def test_a_run_cut_by_the_server_keeps_its_tokens_and_says_why(qtbot, store):
    """The server closes each stream after 3 tokens: the output keeps them, the banner says what happened once,
    and showing that run again (as the branch tree does) says it again."""
    with fake_server(stream_tokens(3, then=lambda h: h.cut())) as srv:
        w = MainWindow(settings=store, spec=ModelSpec(source="fake-model", backend="remote"))
        qtbot.addWidget(w)
        w.model_bar.remote.url.setText(srv.url)  # before the preload reads the bar
        w.sessions.ask = lambda: "discard"
        w.show()
        qtbot.waitUntil(lambda: w.playground.info is not None, timeout=RUN_TIMEOUT)
        messages = []
        w.playground.run_error.connect(messages.append)
        runs = []
        for _ in range(2):
            with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT) as got:
                w.generate()
            runs.append(got.args[0])
    assert [(r.reason, r.message) for r in runs] == [("error", messages[0])] * 2 and len(messages) == 2
    assert "after 3 tokens" in messages[0] and not w.banner.isHidden() and w.banner.label.text() == messages[0]
    assert w.output.text.toPlainText().startswith("w0w1w2")
    qtbot.waitUntil(lambda: w.timeline.chart.n == 3)
    assert len(w.timeline.chart.prob.getData()[1]) == 3  # the model's p of each drawn token (the next test holds it)
    assert not len(w.timeline.chart.entropy.getData()[0] if w.timeline.chart.entropy.getData()[0] is not None else [])
    w.banner.hide()
    status = w.model_bar.status.text()
    w.playground.show_run(runs[0].run_id)
    assert len(messages) == 3 and not w.banner.isHidden() and w.output.text.toPlainText().startswith("w0w1w2")
    assert status and w.model_bar.status.text() == status  # the model is still loaded: its status stays
    w.close()


# A run whose drawn tokens range from likely to very unlikely (p = 1.2e-4: no "0.000" may stand for it).
LIKELY_TO_RARE = [("a", -0.05, [("a", -0.05), ("b", -3.2), ("c", -9.0)]),
                  ("b", -1.2, [("c", -0.4), ("b", -1.2), ("a", -9.3)]),
                  ("c", -9.0, [("a", -0.1), ("b", -2.5), ("c", -9.0)])]


def stream(tokens: list) -> object:
    def behave(h: Handler, body: dict) -> None:
        h.start_stream()
        for tok, lp, top in tokens:
            h.event(chunk(tok, [entry(tok, lp, top)]))
        h.event(chunk("", None, "length"))
        h.end_stream()

    return behave


def remote_window(qtbot, store, url: str, *argv: str) -> MainWindow:
    """The window as `logitlab --backend remote --base-url URL ARGV...` opens it, its model loaded."""
    spec = spec_from(window_parser().parse_args(["--backend", "remote", "--base-url", url, *argv]))
    w = MainWindow(settings=store, spec=spec)
    qtbot.addWidget(w)
    w.sessions.ask = lambda: "discard"
    w.show()
    qtbot.waitUntil(lambda: w.playground.info is not None, timeout=RUN_TIMEOUT)
    return w


def test_a_remote_run_draws_the_models_probability_of_each_drawn_token_and_says_so(qtbot, store):
    """A server reports the model's log-probabilities, not the distribution it sampled from: the timeline's area
    and the output's shading are the record's p under the model, named so; the entropy, never reported, is no
    line (not zeros) and the note says why."""
    with fake_server(stream(LIKELY_TO_RARE)) as srv:
        w = remote_window(qtbot, store, srv.url)
        with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT):
            w.generate()
        steps = w.playground.steps
        qtbot.waitUntil(lambda: w.timeline.chart.n == 3)
    model_p = [st.raw_prob for st in steps]
    assert [st.prob for st in steps] == [None] * 3 and [st.drawn_prob for st in steps] == [(p, "model") for p in
                                                                                        model_p]
    np.testing.assert_allclose(model_p, [math.exp(lp) for _t, lp, _top in LIKELY_TO_RARE], rtol=1e-6)
    tl = w.timeline.chart
    tl.show_step(2, steps[2])
    x, y = tl.prob.getData()
    np.testing.assert_array_equal(x, [0, 1, 2])
    np.testing.assert_allclose(y, model_p, rtol=1e-6)  # the record's numbers, not 0 and not recomputed
    assert tl.entropy.getData()[0] is None or len(tl.entropy.getData()[0]) == 0
    assert tl.getPlotItem().getAxis("left").labelText == "p (model)"
    assert tl.note.isVisible() and tl.note.toPlainText() == ("p under the model (server's sampling unseen)"
                                                             " · no entropy")
    conf, k = confidence(steps[2].sample)  # (the core's figures from the reported log-probabilities)
    assert tl.point_tip(2) == (f"step 2 · p(drawn) under the model {format_prob(model_p[2])} (the server's "
                               f"sampling not observed) · entropy not reported · varentropy "
                               f"{varentropy(steps[2].sample):.2f} · confidence {conf:.2f} (k {k}) — click to select")
    text = w.output.text
    assert text.span_count() == 3 and [text.span_text(i) for i in range(3)] == ["a", "b", "c"]
    for i, p in enumerate(model_p):  # each token shaded by the record's p under the model
        assert text.span_format(i).background().color() == QColor(*shade_rgba(shade(p)))
    assert w.output.scale.text() == "p under the model = 0" and "under the model" in w.output.legend.toolTip()
    tips = [text.tooltip_for(k) for k in range(3)]
    assert all(not re.search(r"\b0\.0+\b", tip) and "entropy not reported" in tip for tip in tips)  # no 0 shown
    assert "p under the model = <b>1.2e-4</b> <span style='color:gray'>(the server's sampling not observed)" in tips[2]
    assert re.search(r"<code>a</code> 9\.[0-9]e-5", tips[1])  # an alternative's p: not "0.000" either
    assert (f"drew <code>c</code> with p under the model = {format_prob(model_p[2])}, rank 2 <span style='color:gray'>"
            "(the server's sampling not observed)") in w.step_panel.title.text()  # the step shown: the last
    w.output.text.clear_run()  # a new run shows the final distribution's legend again
    w.output._name_shading()
    assert w.output.scale.text() == "p = 0"
    w.close()


class KeyedHandler(Handler):
    """A server that answers only requests with its Bearer key (401 otherwise), its model list included."""

    KEY = "sk-test-7f3a"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.auth.append(self.headers.get("Authorization"))
        if self.headers.get("Authorization") != f"Bearer {self.KEY}":
            self.answer(401, {"error": {"message": "Invalid API key"}})
        else:
            super().do_GET()


def keyed(behave: object) -> object:
    def answer(h: Handler, body: dict) -> None:
        if h.headers.get("Authorization") != f"Bearer {KeyedHandler.KEY}":
            h.answer(401, {"error": {"message": "Invalid API key"}})
        else:
            behave(h, body)

    return answer


def test_the_window_opened_with_api_key_env_sends_that_key_for_its_list_and_runs(qtbot, store, monkeypatch):
    """`logitlab --backend remote --base-url URL --api-key-env NAME`: the window's load, its model list and its
    runs all send the key in NAME; another server typed in the window gets no such key."""
    monkeypatch.setenv("LOGITLAB_TEST_KEY", KeyedHandler.KEY)
    with fake_server(keyed(stream_tokens(3))) as srv:
        srv.RequestHandlerClass = KeyedHandler
        w = remote_window(qtbot, store, srv.url, "--api-key-env", "LOGITLAB_TEST_KEY")
        bar = w.model_bar
        assert bar.spec().api_key_env == "LOGITLAB_TEST_KEY" and "LOGITLAB_TEST_KEY" in bar.remote.key.toolTip()
        with qtbot.waitSignal(bar.remote.models_listed, timeout=10_000) as listed:
            bar.browse()
        assert listed.args[0] == ["fake-model"] and bar.status.text().startswith("1 model on")
        with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT) as done:
            w.generate()
        assert done.args[0].reason == "length" and w.output.text.toPlainText().startswith("w0w1w2")
        assert len(srv.auth) >= 3 and set(srv.auth) == {f"Bearer {KeyedHandler.KEY}"}  # load, list, run
    bar.remote.url.setText("http://127.0.0.1:9/v1")  # another server: the variable holds the first one's key
    assert bar.spec().api_key_env is None and "LOGITLAB_TEST_KEY" not in bar.remote.key.toolTip()
    bar.remote.url.setText(srv.url + "/")  # the same server, with a trailing slash
    assert bar.spec().api_key_env == "LOGITLAB_TEST_KEY"
    w.close()
