"""The window's remote pieces: the model bar's server fields (its spec, the server's model list fetched off the
UI thread) and the sampler panel's marks for what a server may not apply."""

from __future__ import annotations

from app.core.remote_run import SERVER_NOTES
from app.ui.model_bar import ModelBar
from app.ui.sampler_panel import SamplerPanel
from tests.remote_fake import fake_server, stream_tokens


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
    assert {name: n.toolTip() for name, n in panel.notes.items()} == SERVER_NOTES
    panel.set_remote(False)
    assert not any(n.isVisible() for n in panel.notes.values()) and panel.order.isEnabled()
