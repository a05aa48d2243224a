"""The one-line settings summary (exports, the copied output) names the stages that are on and the order they run
in: an old order by its name, an engine's chain by the engine, a custom chain stage by stage."""

from __future__ import annotations

import pytest

from app.core.record.export import describe, order_text
from app.core.settings import ENGINE_CHAINS, SamplerSettings, StageOrder, parse_order


def with_order(text: str, **changes: object) -> SamplerSettings:
    order, chain = parse_order(text)
    return SamplerSettings(order=order, chain=chain, **changes)


def test_the_old_orders_read_as_before():
    assert describe(SamplerSettings(top_k=40)).endswith(" · temperature-first")
    assert describe(SamplerSettings(order=StageOrder.TEMPERATURE_LAST)).endswith(" · temperature-last")


@pytest.mark.parametrize("engine", list(ENGINE_CHAINS))
def test_an_engines_chain_is_named_by_the_engine(engine: str):
    s = with_order(engine, top_k=5, top_p=0.9)
    assert s.chain and order_text(s) == engine
    assert describe(s).endswith(f" · order: {engine}")


def test_a_custom_chain_lists_the_stages_it_turns_on_in_their_order():
    s = with_order("top_k,temperature,top_p", top_k=5, top_p=0.9, min_p=0.05)
    assert s.enabled_stages() == ("top_k", "temperature", "top_p", "min_p")
    assert order_text(s) == "top-k → temperature → top-p → min-p"
    assert describe(s).endswith(" · order: top-k → temperature → top-p → min-p")
    assert order_text(with_order("min_p,top_k", top_k=5, min_p=0.05)) == "min-p → top-k → temperature"


def test_the_stages_beyond_the_main_four_are_named_with_their_values_when_on():
    s = with_order("dry,xtc,temperature", dry_multiplier=0.8, xtc_probability=0.5, xtc_threshold=0.2,
                   mirostat_tau=5.0, typical_p=0.9, dynatemp_range=0.3, logit_bias=((7, -2.0), (9, 1.5)))
    line = describe(s)
    for part in ("DRY ×0.8, base 1.75, allowed 2", "XTC threshold 0.2, probability 0.5", "mirostat τ 5, η 0.1",
                 "typical-p 0.9", "dynamic temperature ±0.3, exponent 1", "logit bias on 2 token(s)"):
        assert part in line
    assert "epsilon" not in line and "top-n-sigma" not in line  # off: not named
    assert line.endswith("order: logit-bias → dry → xtc → temperature → typical-p → mirostat")
