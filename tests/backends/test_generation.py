"""The generation core on both real backends: prefix reuse, batched samples, runs, prompt surprisal."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from app.core.decoding.generation import Prefix, generate
from app.core.decoding.prefill import FIRST_CHUNK
from app.core.decoding.surprisal import log_softmax, score
from app.core.events import Finished, Prefilled, Request, Step
from app.core.settings import SamplerSettings

PROMPT = "def add(a, b):\n    return a + b\n\nfor i in range(10):"
SAMPLING = SamplerSettings(temperature=1.0, top_p=0.95, seed=11, max_tokens=12)


def run(model, request: Request, prefix: Prefix | None = None) -> tuple[list, dict[int, list[int]], list[Finished]]:
    events = list(generate(model, request, threading.Event(), prefix))
    tokens: dict[int, list[int]] = {}
    for e in events:
        if isinstance(e, Step):
            tokens.setdefault(e.sequence, []).append(e.token_id)
    return events, tokens, [e for e in events if isinstance(e, Finished)]


def test_a_rerun_reuses_the_cached_prefix_and_draws_the_same_tokens(model):
    prefix = Prefix()
    request = Request(prompt=PROMPT, settings=SAMPLING)
    first, want, [fin1] = run(model, request, prefix)
    again, got, [fin2] = run(model, request, prefix)
    n = len(first[0].prompt_ids)
    assert first[0].reused == fin1.metrics.reused_tokens == 0
    assert again[0].reused == fin2.metrics.reused_tokens == n - 1  # only the last prompt token is computed
    assert got == want


def test_a_prompt_that_continues_the_last_run_prefills_only_the_new_tokens(model):
    prefix = Prefix()
    greedy = SamplerSettings(temperature=0, max_tokens=8)
    events, tokens, _ = run(model, Request(prompt=PROMPT, settings=greedy), prefix)
    ids = list(events[0].prompt_ids)
    longer = (*ids, *tokens[0][:5])  # the prompt plus part of what was generated: all of it is in the cache
    cold, want, _ = run(model, Request(prompt_ids=longer, settings=greedy))
    warm, got, _ = run(model, Request(prompt_ids=longer, settings=greedy), prefix)
    assert warm[0].reused == len(longer) - 1 and cold[0].reused == 0
    assert got == want
    changed = (*ids[:-2], ids[-1])  # an edit near the end keeps what precedes it
    warm, got, _ = run(model, Request(prompt_ids=changed, settings=greedy), prefix)
    assert warm[0].reused == len(ids) - 2
    assert got == run(model, Request(prompt_ids=changed, settings=greedy))[1]


def test_n_samples_share_one_prefill_and_each_matches_its_seed_run_alone(model):
    events, tokens, fins = run(model, Request(prompt=PROMPT, settings=SAMPLING, n=3))
    assert sum(isinstance(e, Prefilled) for e in events) == 1
    assert [f.sequence for f in fins] == [0, 1, 2] and len({f.run_id for f in fins}) == 3
    for i in range(3):
        alone = run(model, Request(prompt=PROMPT, settings=SAMPLING.with_(seed=SAMPLING.seed + i)))[1][0]
        assert tokens[i] == alone, f"sample {i}"
        assert fins[i].trace.seed == SAMPLING.seed + i and fins[i].trace.token_ids == tokens[i]
    assert len({tuple(t) for t in tokens.values()}) > 1  # different seeds, different samples


def test_a_finished_trace_knows_its_run_parent_model_and_reason(model):
    request = Request(prompt=PROMPT, settings=SAMPLING, parent=(41, 3))
    _, _, [fin] = run(model, request)
    t = fin.trace
    assert t.run_id == fin.run_id == request.id and t.parent == (41, 3)
    assert t.model["backend"] == model.info.backend and t.finish_reason == fin.reason
    assert t.metrics == fin.metrics


def test_prompt_surprisal_equals_the_full_forward_at_every_position(model):
    ids = model.tokenizer.encode(PROMPT * 4)
    assert len(ids) > FIRST_CHUNK + 1  # several chunks through the cache
    got = score(model, ids)
    full = np.asarray(model.ops.numpy(model.forward([ids], model.new_cache(), positions="all"))[0], np.float64)
    lp = log_softmax(full)
    want = lp[np.arange(len(ids) - 1), ids[1:]]
    assert np.isnan(got.logprobs[0])
    np.testing.assert_allclose(got.logprobs[1:], want, atol=1e-4)
    assert (got.top_ids[1:, 0] == lp[:-1].argmax(axis=1)).all()
    assert (np.diff(got.top_logprobs[1:], axis=1) <= 0).all()


@pytest.mark.parametrize("cancel_after", [0, 3])
def test_cancel_ends_every_sample_and_keeps_the_prefix_consistent(model, cancel_after):
    cancel, prefix = threading.Event(), Prefix()
    request = Request(prompt=PROMPT, settings=SAMPLING.with_(max_tokens=200), n=2, ignore_eos=True)
    fins, seen = [], 0
    for e in generate(model, request, cancel, prefix):
        if isinstance(e, Step):
            seen += 1
            if seen > cancel_after:
                cancel.set()
        fins += [e] if isinstance(e, Finished) else []
    assert [f.reason for f in fins] == ["cancelled", "cancelled"]
    # what the cache holds is still exactly the prompt: the next run reuses it and matches a cold run
    greedy = Request(prompt=PROMPT, settings=SamplerSettings(temperature=0, max_tokens=6))
    assert run(model, greedy, prefix)[1] == run(model, greedy)[1]
