"""The real window, offscreen, driven as a person would, on a real tiny model (pytest-qt)."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

from PySide6.QtCore import QPoint, Qt, QTimer
from PySide6.QtGui import QTextCursor

from app.core.events import Request
from app.core.models.sources import ModelSpec
from app.ui.main_window import MainWindow
from tests.tiny import LOCAL_BACKENDS
from tests.ui.conftest import WINDOW_BACKEND, needs_torch

RUN_TIMEOUT = 60_000


def run(qtbot, w: MainWindow, max_tokens: int = 24, **settings) -> object:
    w.sampler.editors["max_tokens"].setValue(max_tokens)
    for k, v in settings.items():
        w.sampler.editors[k].setValue(v)
    with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT) as done:
        qtbot.keyClick(w.prompt.completion, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    return done.args[0]


def test_generate_streams_tokens_into_the_view_and_the_charts(qtbot, window):
    window.prompt.set_prompt("Hello")
    fin = run(qtbot, window, max_tokens=20)
    steps = window.playground.steps
    assert fin.reason in ("length", "eos") and len(steps) == fin.metrics.generated_tokens > 0
    assert window.output.text.toPlainText().startswith("".join(s.text for s in steps))
    assert window.timeline.chart.n == len(steps)
    shown, texts = window.step_panel.chart.chart.shown
    assert shown is steps[-1].sample and len(texts) == 20  # the last step, after the run
    assert len(window.step_panel.chart.chart.raw.opts["height"]) == 20
    assert "tok/s" in window.metrics.values["rate"].text()
    assert window.controls.generate_button.isEnabled() and not window.controls.stop_button.isEnabled()


def test_a_one_token_run_claims_no_decode_speed(qtbot, window):
    fin = run(qtbot, window, max_tokens=1)
    assert fin.metrics.generated_tokens == 1
    values = window.metrics.values
    assert values["rate"].text().endswith("—</b>") and values["itl"].text().endswith("—</b>")  # not "0.0"
    assert "tok/s" in values["prefill"].text() and " ms" in values["ttft"].text()


def endless(w: MainWindow) -> None:
    """Start a run that only Stop can end (a random model may otherwise draw end-of-text at any step)."""
    w.sampler.editors["max_tokens"].setValue(100_000)
    assert w.playground.generate(replace(w.playground.make_request(), ignore_eos=True))


def test_stop_ends_the_run_and_the_window_can_run_again(qtbot, window):
    endless(window)
    assert window.controls.stop_button.isEnabled() and not window.controls.generate_button.isEnabled()
    qtbot.waitUntil(lambda: len(window.playground.steps) >= 5, timeout=RUN_TIMEOUT)
    with qtbot.waitSignal(window.playground.finished, timeout=RUN_TIMEOUT) as done:
        qtbot.keyClick(window.output.text, Qt.Key.Key_Escape)
    assert done.args[0].reason == "cancelled"
    assert len(window.playground.steps) < 500
    assert run(qtbot, window, max_tokens=5).reason in ("length", "eos")


def test_closing_mid_run_stops_the_worker_cleanly(qtbot, tiny_path, store):
    w = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), "torch"))
    qtbot.addWidget(w)
    w.show()
    endless(w)
    qtbot.waitUntil(lambda: len(w.playground.steps) >= 3, timeout=RUN_TIMEOUT)
    w.close()
    assert w.playground.worker.stopped.is_set()


def test_moving_a_slider_changes_the_next_request(qtbot, window):
    window.sampler.editors["temperature"].setValue(1.37)
    window.sampler.editors["top_k"].setValue(12)
    window.sampler.order.setCurrentIndex(1)
    s = window.playground.make_request().settings
    assert (s.temperature, s.top_k, s.order.value) == (1.37, 12, "temperature-last")


def test_clicking_a_token_selects_its_step_and_the_chart_follows(qtbot, window):
    window.prompt.set_prompt("The quick")
    run(qtbot, window, max_tokens=12, temperature=0.0)
    view = window.output.text
    k = next(i for i, s in enumerate(window.playground.steps) if i > 2 and len(s.text) > 0)
    cur = QTextCursor(view.document())
    cur.setPosition(view._starts[view._step_of.index(k)])
    rect = view.cursorRect(cur)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.topLeft() + QPoint(2, rect.height() // 2))
    assert window.playground.display.selected == k
    assert window.step_panel.chart.chart.shown[0] is window.playground.steps[k].sample
    assert window.timeline.chart.cursor.value() == k


def test_a_slider_moved_after_a_run_previews_the_selected_step(qtbot, window):
    run(qtbot, window, max_tokens=6, temperature=1.0)
    window.sampler.editors["top_k"].setValue(3)
    preview, _ = window.step_panel.chart.chart.shown
    assert preview is not window.playground.steps[-1].sample
    assert preview.kept_counts[-1] == 3  # the chart shows what top-k 3 would keep at that step
    assert "re-sampled" in window.step_panel.title.text()


def test_an_invalid_model_shows_an_error_and_the_app_then_works(qtbot, window, tiny_path):
    window.prompt.set_prompt("typed text stays")
    window.model_bar.set_source("/no/such/model")
    with qtbot.waitSignal(window.playground.failed, timeout=RUN_TIMEOUT):
        window.generate()
    assert window.banner.isVisible() and "no model folder at '/no/such/model'" in window.banner.label.text()
    assert window.prompt.prompt() == "typed text stays" and window.controls.generate_button.isEnabled()
    window.model_bar.set_source(str(tiny_path))
    assert run(qtbot, window, max_tokens=4).reason in ("length", "eos")


def test_chat_mode_counts_the_templated_prompt(qtbot, window):
    window.prompt.tabs.setCurrentIndex(1)
    window.prompt.chat.turns[0].text.setPlainText("Hi there")
    window.prompt.refresh_count()
    ids = window.playground.tokenizer.encode("<|user|>Hi there\n<|assistant|>", add_special_tokens=False)
    qtbot.waitUntil(lambda: window.prompt.count.text() == f"{len(ids)} tokens")  # rendered off the UI thread
    fin = run(qtbot, window, max_tokens=3)
    assert fin.metrics.prompt_tokens == len(ids)
    assert window.controls.reply_button.isVisible()
    window.controls.reply_button.click()
    roles = [t.role.currentText() for t in window.prompt.chat.turns]
    assert roles == ["user", "assistant", "user"]
    # the message, byte for byte (the editor shows a drawn "\r" as a line break; the message keeps it)
    assert window.prompt.chat.turns[1].message().content == "".join(s.text for s in window.playground.steps)


def test_chat_mode_on_a_model_without_a_chat_template_turns_generate_off_and_says_why(qtbot, store, tmp_path):
    from tests.tiny import make_model

    w = MainWindow(settings=store, spec=ModelSpec(str(make_model(tmp_path / "plain", chat=False)), "torch"))
    qtbot.addWidget(w)
    w.sessions.ask = lambda: "discard"
    w.show()
    qtbot.waitUntil(lambda: w.playground.tokenizer is not None, timeout=RUN_TIMEOUT)
    assert w.controls.generate_button.isEnabled()
    w.prompt.tabs.setCurrentIndex(1)
    w.prompt.chat.turns[0].text.setPlainText("Hi there")
    qtbot.waitUntil(lambda: not w.controls.generate_button.isEnabled(), timeout=10_000)  # rendered off the UI thread
    assert "no chat template" in w.controls.generate_button.toolTip() and not w.controls.generate_action.isEnabled()
    assert "no chat template" in w.prompt.count.toolTip()  # the whole line, where the label is cut
    w.prompt.tabs.setCurrentIndex(0)
    qtbot.waitUntil(lambda: w.controls.generate_button.isEnabled(), timeout=10_000)
    assert "Ctrl+Enter" in w.controls.generate_button.toolTip()
    w.close()


def test_settings_and_prompt_are_remembered(qtbot, tiny_path, store):
    w = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), "torch"))
    qtbot.addWidget(w)
    w.sampler.editors["top_p"].setValue(0.42)
    w.prompt.set_prompt("remember me")
    w.close()
    w2 = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), "torch"))
    qtbot.addWidget(w2)
    assert w2.sampler.settings().top_p == 0.42 and w2.prompt.prompt() == "remember me"
    w2.close()


def test_a_new_window_s_first_run_is_the_next_run_id_though_it_loaded_and_scored_first(qtbot, tiny_path, store):
    """Loading the model and scoring the prompt make no run, so they take no run id: the first run of a new
    process's window is run 1 (here, with other tests' runs before it: the next id)."""
    first = Request().id + 1
    w = MainWindow(settings=store, spec=ModelSpec(str(tiny_path), WINDOW_BACKEND))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.playground.info is not None, timeout=RUN_TIMEOUT)
    w.prompt.set_prompt("Hello")
    w.playground.score_edited()
    run(qtbot, w, max_tokens=2)
    assert list(w.playground.session.runs) == [first] and w.playground.trace.run_id == first
    w.close()


def test_a_long_run_keeps_the_event_loop_responsive(qtbot, window):
    """Behaviour, not speed: while tokens stream, the event loop keeps running (its timer ticks) and the window
    shows the run growing step by step, however busy the machine is (no time budget but a generous timeout)."""
    n = 1000
    ticks: list[tuple[float, int]] = []  # (time, steps shown) at each tick of a 5 ms timer
    timer = QTimer(interval=5)
    timer.timeout.connect(lambda: ticks.append((time.perf_counter(), len(window.playground.steps))))
    timer.start()
    window.sampler.editors["max_tokens"].setValue(n)
    request = replace(window.playground.make_request(), ignore_eos=True)
    with qtbot.waitSignal(window.playground.finished, timeout=10 * RUN_TIMEOUT) as done:
        window.playground.generate(request)
    fin = done.args[0]
    timer.stop()
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(ticks)]
    growing = sorted({shown for _, shown in ticks if 0 < shown < n})  # the run as the window showed it, mid-way
    print(f"\n{n}-token run: {fin.metrics.decode_tokens_per_s:.0f} tok/s, {len(growing)} partial states shown, "
          f"longest event-loop stall {max(gaps) * 1000:.1f} ms over {len(ticks)} ticks")
    assert fin.metrics.generated_tokens == n and len(window.playground.steps) == n
    assert window.timeline.chart.n == n
    assert len(growing) >= 5, growing  # it streamed: the loop drew the run at least 5 times before its end


def test_the_model_picker_lists_the_hf_cache_and_validates_hub_ids(qtbot, tiny_path, tmp_path):
    from app.ui.panels.model_picker import ModelPicker
    from tests.backends.test_model_files import place_in_hf_cache

    cache = tmp_path / "hub"
    place_in_hf_cache(cache, "someone/tiny-llama", tiny_path)
    picker = ModelPicker(["/some/recent"], cache_dir=str(cache))
    qtbot.addWidget(picker)
    sources = [e.source for e in picker.entries]
    assert sources == ["builtin", "builtin-thinking", "someone/tiny-llama", "/some/recent"]
    assert picker.table.item(2, 3).text() == ", ".join(LOCAL_BACKENDS)
    picker.table.selectRow(2)
    assert picker.choice == "someone/tiny-llama"
    picker.hub.setText("not a hub id")
    assert not picker.buttons.button(picker.buttons.StandardButton.Ok).isEnabled()
    picker.hub.setText("Qwen/Qwen2.5-0.5B-Instruct")
    assert picker.buttons.button(picker.buttons.StandardButton.Ok).isEnabled()
    assert picker.choice == "Qwen/Qwen2.5-0.5B-Instruct"


@needs_torch  # transformers runs a repository's code; mlx-lm has no such loader
def test_remote_code_is_refused_then_allowed_per_model_and_remembered(qtbot, window, tiny_path, tmp_path, store):
    from tests.tiny import make_remote_code_model

    path = str(make_remote_code_model(tiny_path, tmp_path / "remote"))
    window.model_bar.set_source(path)
    with qtbot.waitSignal(window.playground.opt_in_needed, timeout=RUN_TIMEOUT):
        window.load(window.model_bar.spec())
    assert window.banner.isVisible() and "needs code from its repository" in window.banner.label.text()
    assert window.banner.action.isVisible() and path in window.banner.action.text()
    with qtbot.waitSignal(window.playground.loaded, timeout=RUN_TIMEOUT) as loaded:
        window.banner.action.click()
    assert loaded.args[0].architecture == "TinyRemoteForCausalLM"
    assert path in store.value("opt_ins")
    assert window.model_bar.spec().options.trust_remote_code
    window.model_bar.set_source(str(tiny_path))
    assert not window.model_bar.spec().options.trust_remote_code  # only for that model


def test_download_progress_shows_bytes_speed_and_time_left(qtbot, window):
    bar = window.model_bar
    bar.load_status.show_progress("Downloading someone/model…", 0, 100 * 2**20)
    qtbot.wait(50)
    bar.load_status.show_progress("Downloading someone/model…", 50 * 2**20, 100 * 2**20)
    assert bar.progress.isVisible() and bar.progress.value() == 500
    assert bar.progress.format() == "50 / 100 MiB"
    assert "MiB/s" in bar.status.text() and "s left" in bar.status.text()
    bar.load_status.show_status("loaded")
    assert not bar.progress.isVisible()


def test_every_run_keeps_its_own_steps_in_the_session(qtbot, window):
    """Events are routed by run id: the sample not shown, and an earlier run, keep every step they drew."""
    pg = window.playground
    window.prompt.set_prompt("Hello")
    window.sampler.editors["max_tokens"].setValue(8)
    first = replace(window.playground.make_request(), ignore_eos=True)
    with qtbot.waitSignal(pg.finished, timeout=RUN_TIMEOUT):
        assert pg.generate(first)
    pair = replace(window.playground.make_request(), ignore_eos=True, n=2)
    qtbot.waitUntil(lambda: not pg.busy, timeout=RUN_TIMEOUT)
    with qtbot.waitSignal(pg.finished, timeout=RUN_TIMEOUT):
        assert pg.generate(pair)
    qtbot.waitUntil(lambda: not pg.busy, timeout=RUN_TIMEOUT)
    runs = pg.session.runs
    assert list(runs) == [first.id, *pair.run_ids] and pg.shown is runs[pair.run_ids[0]]
    for run in runs.values():
        assert not run.running and len(run.steps) == 8 and run.trace.token_ids == [s.token_id for s in run.steps]
    hidden = runs[pair.run_ids[1]]
    assert hidden.trace.seed == runs[pair.run_ids[0]].trace.seed + 1  # the second sample, never shown, complete
