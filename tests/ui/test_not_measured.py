"""What the window shows of a run and a model: a dash for every figure that was not measured (None in the core's
`Metrics`: a server's KV cache, its prompt tokens, an answer that arrived whole) or that a server does not report
(its `ModelInfo` holds 0 parameters, layers, sizes), never a 0 that reads like a measurement. And the sampler
panel's limits and stop-string box follow the core's one definition of each."""

from __future__ import annotations

from app.core.metrics import Metrics
from app.core.settings import FIELDS, SamplerSettings
from app.ui.panels.info import MetricsStrip, ModelCard
from app.ui.panels.sampler_panel import BOX_MAX, SamplerPanel
from backends.remote.backend import remote_info


def shown(strip: MetricsStrip) -> dict[str, str]:
    return {k: label.text().split("<b>")[-1].removesuffix("</b>") for k, label in strip.values.items()}


def test_the_metrics_strip_shows_a_dash_for_each_figure_not_measured(qtbot):
    strip = MetricsStrip()
    qtbot.addWidget(strip)
    strip.final(Metrics(generated_tokens=5, ttft_s=0.04, total_s=0.3))  # a server's whole answer
    assert shown(strip) == {"ttft": "40 ms", "rate": "—", "prefill": "—", "tokens": "— + 5", "itl": "—", "kv": "—"}
    strip.final(Metrics(prompt_tokens=7, generated_tokens=5, ttft_s=0.04, prefill_s=0.02, decode_s=0.2,
                        total_s=0.3, itl_mean_s=0.05, itl_p95_s=0.06, kv_cache_bytes=2048))
    assert shown(strip) == {"ttft": "40 ms", "rate": "20.0 tok/s", "prefill": "350 tok/s", "tokens": "7 + 5",
                            "itl": "50.0 ms (60.0)", "kv": "2.0 KiB"}
    strip.started(0, 0.0)  # a server's run starts: its prefill is not measured
    strip.live(1, None, None, None)
    assert shown(strip)["prefill"] == shown(strip)["rate"] == shown(strip)["kv"] == "—"


def test_the_model_card_of_a_server_shows_no_zeros(qtbot):
    card = ModelCard()
    qtbot.addWidget(card)
    card.show_info(remote_info("served-model", "http://someone:hunter2@127.0.0.1:8000/v1"))
    texts = {row: label.text() for row, label in card.labels.items()}
    for row in ("Parameters", "Layers", "Heads (KV)", "Context", "Weights", "KV / 1k tokens"):
        assert texts[row] == "—", row
    assert texts["Device"] == "http://127.0.0.1:8000/v1" and "hunter2" not in "".join(texts.values())
    card.show_kv(None)
    assert card.labels["KV now"].text() == "—"


def test_the_sampler_panel_takes_each_settings_range_and_its_stop_strings_typed_as_on_the_command_line(qtbot):
    panel = SamplerPanel()
    qtbot.addWidget(panel)
    for f in FIELDS:
        editor = panel.editors[f.name]
        assert (editor.minimum(), editor.maximum()) == (f.lo, min(f.hi, BOX_MAX)), f.name
    panel.stop_edit.setPlainText("\\n\\n\na\\tb\n\\\\n")
    assert panel.settings().stop == ("\n\n", "a\tb", "\\n")
    panel.set_settings(SamplerSettings(stop=("x\\y", "\r\n")))
    assert panel.settings().stop == ("x\\y", "\r\n")
