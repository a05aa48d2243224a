"""Token healing: a prompt ending inside what the model writes as one longer token is found from its surprisal
record (hand-made records: the rule, not a model's luck); `heal` backs off the last token and constrains the text
to start with it; a healed run on the tiny model (both backends) allows at its first step exactly the tokens that
start with the backed-off text (the engine's recorded count is ours), draws one of them, and its text begins with it.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from app.core.decoding.generation import generate, prompt_tokens
from app.core.decoding.healing import Healed, boundary, first_tokens, heal, healed_request, prefix_regex, text_of
from app.core.decoding.surprisal import PromptScore
from app.core.events import Finished, Message, Request
from app.core.settings import SamplerSettings
from app.core.stage_inputs import Constraint

TEXTS = {1: "http", 2: ":", 3: "://", 4: ":/", 5: " the", 6: "x"}


def scored(ids: tuple[int, ...], last: float, alternatives: dict[int, float]) -> PromptScore:
    """A surprisal record whose last position gives the last token `last` and the alternatives their p."""
    t = len(ids)
    top = list(alternatives.items())[:5]
    top_ids = np.zeros((t, 5), dtype=np.int32)
    top_lp = np.full((t, 5), np.nan, dtype=np.float32)
    top_ids[-1, : len(top)] = [i for i, _ in top]
    top_lp[-1, : len(top)] = [math.log(p) for _, p in top]
    logprobs = np.full(t, np.nan, dtype=np.float32)
    logprobs[-1] = math.log(last)
    return PromptScore(ids, logprobs, top_ids, top_lp)


def test_a_last_token_the_model_would_rather_extend_is_a_rare_boundary():
    b = boundary(scored((1, 2), 0.05, {3: 0.6, 2: 0.05, 4: 0.1, 6: 0.2}), TEXTS.get)
    assert b is not None and b.rare and b.text == ":"
    assert [(t, text) for t, text, _ in b.extensions] == [(3, "://"), (4, ":/")]
    assert b.extension_mass == pytest.approx(0.7)


def test_a_token_the_model_expected_is_not():
    assert not boundary(scored((1, 2), 0.6, {2: 0.6, 3: 0.1}), TEXTS.get).rare
    assert boundary(scored((1,), 0.5, {}), TEXTS.get) is None  # nothing precedes a single token


def test_heal_backs_off_the_last_token_and_constrains_the_start():
    assert heal([1, 5, 2], TEXTS.get) == Healed((1, 5), ":", Constraint("regex", ":(?s:.*)"))
    assert prefix_regex("a.b (c)") == r"a\.b \(c\)(?s:.*)"
    with pytest.raises(ValueError, match="at least two"):
        heal([2], TEXTS.get)
    with pytest.raises(ValueError, match="no whole character"):
        heal([1, 7], {1: "a", 7: "\ufffd"}.get)


def test_healing_refuses_a_chat_and_a_constraint_in_one_line(torch_model):
    chat = Request(messages=(Message("user", "hi"),))
    with pytest.raises(ValueError, match="not a chat"):
        healed_request(chat, torch_model.tokenizer)
    with pytest.raises(ValueError, match="turn the constraint off"):
        healed_request(Request(prompt="a b", settings=SamplerSettings(constraint=Constraint("regex", "a"))),
                       torch_model.tokenizer)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_healed_run_starts_with_the_backed_off_text(model, seed):
    tok = model.tokenizer
    prompt = "The quick brown fox jumps over the lazy "  # ends in a lone space: the next word usually carries it
    request, healed = healed_request(Request(prompt=prompt, settings=SamplerSettings(max_tokens=6, seed=seed)), tok)
    ids, _ = prompt_tokens(tok, prompt, None)
    assert healed.text == " " and request.prompt_ids == tuple(ids[:-1]) and request.prompt == prompt[:-1]
    (end,) = [e for e in generate(model, request, threading.Event()) if isinstance(e, Finished)]
    first = end.trace.steps[0]
    allowed = first_tokens(" ", text_of(tok), model.info.vocab_size)
    assert first.sample.grammar.legal == len(allowed)  # the engine's mask is the set we name
    assert first.token_id in allowed and end.trace.text.startswith(" ")
    p = first.sample.final_probs
    kept = first.sample.top_ids[: len(p)][p > 0].tolist()  # the recorded candidates it could draw
    assert kept and all(text_of(tok)(t).startswith(" ") for t in kept)
