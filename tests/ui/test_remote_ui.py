"""The window's remote pieces: the model bar's server fields (its spec, the server's model list fetched off the
UI thread) and the sampler panel's marks for what a server may not apply."""

from __future__ import annotations

from app.core.models import ModelSpec
from app.core.remote_run import SERVER_NOTES
from app.ui.main_window import MainWindow
from app.ui.model_bar import ModelBar
from app.ui.sampler_panel import SamplerPanel
from tests.remote_fake import fake_server, stream_tokens
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
    assert w.output.text.toPlainText() == "w0w1w2"
    qtbot.waitUntil(lambda: w.timeline.n == 3)
    assert all(len(c.getData()[0] if c.getData()[0] is not None else []) == 0 for c in (w.timeline.prob,
               w.timeline.entropy))  # neither p(drawn) nor entropy was reported: no curve (not zeros)
    w.banner.hide()
    status = w.model_bar.status.text()
    w.playground.show_run(runs[0].run_id)
    assert len(messages) == 3 and not w.banner.isHidden() and w.output.text.toPlainText() == "w0w1w2"
    assert status and w.model_bar.status.text() == status  # the model is still loaded: its status stays
    w.close()
