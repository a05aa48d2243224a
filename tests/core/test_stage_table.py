"""The stage table is complete: every stage an order can name, and every name a record can hold, is one row; each
row's settings are settings, its function is the sampler's, and an engine has a stage exactly when its row names it."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.sampler.sampling import sample
from app.core.sampler.stages import BUILDERS
from app.core.settings import FIELDS, SETTING_FIELDS, SamplerSettings, parse_order
from app.core.stage_table import (
    ENGINE_CHAINS,
    ENGINES,
    ORDER_CHAINS,
    ORDER_LABELS,
    RECORD_NAMES,
    ROWS,
    STAGE,
    STAGES,
    label,
    record_name,
)
from backends.ops import NUMPY

EVERY_STAGE_ON = SamplerSettings(temperature=0.9, top_k=40, top_p=0.95, min_p=0.01, typical_p=0.99, top_n_sigma=3.0,
                                 epsilon_cutoff=0.0001, eta_cutoff=0.0001, xtc_probability=0.5, xtc_threshold=0.3,
                                 dynatemp_range=0.2, dry_multiplier=0.5, mirostat_tau=8.0, logit_bias=((3, 1.0),),
                                 repetition_penalty=1.1, think_budget=64, think_soft=True)


def test_every_stage_an_order_can_name_is_one_row_with_its_function():
    assert len(RECORD_NAMES) == len(ROWS) and tuple(r.name for r in ROWS if r.chain) == STAGES
    for chain in (*ORDER_CHAINS.values(), *ENGINE_CHAINS.values()):
        assert set(chain) <= set(STAGES) and len(set(chain)) == len(chain)
    assert sorted(ORDER_CHAINS["temperature-last"]) == sorted(STAGES)
    # the sampler builds each stage of the table, under its name (and those placed by their settings, not the order:
    # a constraint's grammar, a soft think budget)
    assert set(STAGES) <= set(BUILDERS) <= set(RECORD_NAMES)
    assert set(ORDER_LABELS) == {*ORDER_CHAINS, *ENGINES} and all(parse_order(v) for v in ORDER_LABELS)


def test_each_row_reads_settings_and_every_setting_but_the_length_belongs_to_a_stage():
    read = {f for row in ROWS for f in row.fields}
    assert read <= SETTING_FIELDS
    assert {f.name for f in FIELDS} - read == {"max_tokens"}
    assert all(row.label and row.label == label(row.name) for row in ROWS)
    assert len({row.label for row in ROWS}) == len(ROWS)  # no two stages read alike
    assert [row.name for row in ROWS if row.main] == ["temperature", "top_k", "top_p", "min_p"]
    assert all(row.says is not None for row in ROWS if row.chain)  # `describe` names every stage that is on


def test_at_their_defaults_only_temperature_runs_and_each_stage_turns_on_by_its_own_setting():
    assert SamplerSettings().enabled_stages() == ("temperature",)
    on = EVERY_STAGE_ON.enabled_stages()
    assert set(on) == set(STAGES)
    for name in STAGES:
        assert STAGE[name].is_on(EVERY_STAGE_ON) and (name == "temperature") == STAGE[name].is_on(SamplerSettings())


def test_every_name_a_record_holds_has_a_row():
    x = np.random.default_rng(0).normal(size=300).astype(np.float32) * 3
    for s in (EVERY_STAGE_ON, EVERY_STAGE_ON.with_(temperature=0.0), EVERY_STAGE_ON.with_(dynatemp_range=0.0)):
        names = sample(NUMPY, x, s, 0.5).stage_names
        assert set(names) <= set(RECORD_NAMES)
        assert record_name(s, "temperature") in names  # the temperature stage records itself under that name
    assert {record_name(EVERY_STAGE_ON.with_(temperature=t), "temperature") for t in (0.0, 0.9)} == {"greedy",
                                                                                                      "dynatemp"}


@pytest.mark.parametrize("engine", list(ENGINES))
def test_an_engine_has_a_stage_exactly_when_the_stage_s_row_names_it(engine: str):
    named = {row.name for row in ROWS if row.chain and engine in row.engines}
    assert named == set(ENGINE_CHAINS[engine])
    for row in ROWS:
        assert set(row.engines) <= set(ENGINES) and set(row.off) <= set(row.engines), row.name
