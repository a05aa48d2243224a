"""The sampler panel builds its settings once per edit: a slider's tick is read from the editors once and written to
the editing state, and the state's echo of that edit (`settings_changed`) is not read from them again; settings set
from outside are still shown."""

from __future__ import annotations

import pytest

from app.core.settings import SamplerSettings
from app.ui.panels.sampler_panel import SamplerPanel


@pytest.fixture
def panel(qtbot) -> SamplerPanel:
    p = SamplerPanel()
    qtbot.addWidget(p)
    return p


@pytest.fixture
def builds(panel: SamplerPanel, monkeypatch: pytest.MonkeyPatch) -> list[SamplerSettings]:
    """Every time the panel builds its settings from its editors."""
    built: list[SamplerSettings] = []
    build = SamplerPanel.settings

    def counted(self: SamplerPanel) -> SamplerSettings:
        built.append(build(self))
        return built[-1]

    monkeypatch.setattr(SamplerPanel, "settings", counted)
    return built


def test_a_slider_tick_builds_the_settings_once(panel, builds):
    ticks = [0.9, 1.0, 1.1]
    for t in ticks:
        panel.editors["temperature"].slider.setValue(round(t * 100))  # as a drag moves it, one step at a time
    assert len(builds) == len(ticks)
    assert [b.temperature for b in builds] == ticks and panel.state.settings.temperature == 1.1


def test_a_typed_value_and_a_seed_are_built_once_each(panel, builds):
    panel.editors["top_k"].setValue(40)
    panel.seed.setValue(7)
    assert len(builds) == 2 and (panel.state.settings.top_k, panel.state.settings.seed) == (40, 7)


def test_settings_set_from_outside_are_shown(panel, builds):
    panel.state.set_settings(SamplerSettings(temperature=0.3, top_p=0.9, seed=5))
    assert panel.editors["temperature"].value() == 0.3 and panel.editors["top_p"].value() == 0.9
    assert panel.seed.value() == 5 and panel.state.settings.temperature == 0.3
