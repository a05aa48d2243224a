"""Speculative decoding on both real backends: a tiny target and a noisy copy of it as the draft.

Greedy speculative output is the target's greedy output token for token; sampled output is distributed as the
target's own sampling (many seeded runs: the bound is deterministic); both caches hold exactly the tokens kept;
a draft with another tokenizer is refused with one line.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from app.core.decoding.generation import generate
from app.core.decoding.speculative.pace import K_START, Pace
from app.core.decoding.speculative.rounds import Speculation, final_probs, prefill, speculate
from app.core.events import Drafted, Failed, Finished, Request, Speculated, Step
from app.core.models.sources import BUILTIN_NAME, BUILTIN_PATH, ModelSpec
from app.core.runs.model_thread import ModelThread
from app.core.runs.speculative_run import run_speculative
from app.core.sampler.step_view import resample_step
from app.core.settings import SamplerSettings
from backends import get_backend
from backends.base import LoadOptions, ModelLoadError

PROMPT = "def add(a, b):\n    return a + b\n\nfor i in range(10):"
OPTIONS = LoadOptions(device="cpu", dtype="float32")


def make_draft(target: Path, out: Path, noise: float = 0.05, seed: int = 1) -> Path:
    """A draft for `target`: its folder (tokenizer included) with seeded noise on every weight matrix, so that
    the two models agree often but not always (their top-4 two-token distributions are far apart)."""
    shutil.copytree(target, out)
    rng = np.random.default_rng(seed)
    weights = load_file(str(target / "model.safetensors"))
    save_file({k: v + rng.normal(0, noise, v.shape).astype(np.float32) if v.ndim == 2 else v
               for k, v in weights.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


@pytest.fixture(scope="module")
def draft_path(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_draft(tiny_path, tmp_path_factory.mktemp("models") / "tiny-draft")


@pytest.fixture(scope="module", params=["torch", "mlx"])
def pair(request: pytest.FixtureRequest, tiny_path: Path, draft_path: Path):
    """(target, draft) on one backend: the session's tiny model, and a smaller one of other random weights."""
    target = request.getfixturevalue(f"{request.param}_model")
    return target, get_backend(request.param).load(draft_path, OPTIONS)


def tokens_of(events) -> list[int]:
    return [e.token_id for e in events if isinstance(e, Step)]


def speculative(target, draft, settings: SamplerSettings, k: int = 3, **kw) -> list:
    return list(run_speculative(target, draft, Request(prompt=PROMPT, settings=settings, draft_k=k, **kw),
                                threading.Event()))


# (Fixed k only: the adaptive pace (k 0) picks its k from measured times, so its forwards' shapes follow the
# machine's load, and a near tie on a random model may then fall either way; its scripted pace is tested below.)
@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_speculative_output_is_the_targets_greedy_output(pair, k):
    target, draft = pair
    greedy = SamplerSettings(temperature=0, max_tokens=24)
    want = tokens_of(generate(target, Request(prompt=PROMPT, settings=greedy, ignore_eos=True), threading.Event()))
    events = speculative(target, draft, greedy, k, ignore_eos=True)
    assert tokens_of(events) == want
    rounds = [e.round for e in events if isinstance(e, Drafted)]
    assert sum(r.kept for r in rounds) == len(want) == 24
    assert any(r.rejected is not None for r in rounds)  # the draft is another model: it is wrong sometimes
    for r in rounds:  # greedy: the target's probability of a draft is 1 (kept) or 0 (rejected)
        assert all(d.p_target == float(d.accepted) and d.p_draft == 1.0 for d in r.drafts[: r.accepted + 1])


def test_greedy_with_penalties_is_the_targets_greedy_output_with_them(pair):
    target, draft = pair
    greedy = SamplerSettings(temperature=0, repetition_penalty=1.4, frequency_penalty=0.3, max_tokens=20)
    want = tokens_of(generate(target, Request(prompt=PROMPT, settings=greedy, ignore_eos=True), threading.Event()))
    assert tokens_of(speculative(target, draft, greedy, 4, ignore_eos=True)) == want


def test_a_draft_that_is_the_target_is_always_accepted(pair):
    target, _ = pair
    events = speculative(target, target, SamplerSettings(temperature=0.8, top_k=40, seed=3, max_tokens=20), 4,
                         ignore_eos=True)
    [summary] = [e.summary for e in events if isinstance(e, Speculated)]
    assert summary.stats.acceptance_rate == 1.0
    assert summary.stats.tokens == 20 and summary.stats.tokens_per_target_forward == 20 / summary.stats.rounds


def test_the_same_seed_gives_the_same_run_and_rounds(pair):
    target, draft = pair
    settings = SamplerSettings(temperature=1.0, top_p=0.9, repetition_penalty=1.2, seed=7, max_tokens=16)
    a, b = speculative(target, draft, settings), speculative(target, draft, settings)
    assert tokens_of(a) == tokens_of(b)
    assert [e.round for e in a if isinstance(e, Drafted)] == [e.round for e in b if isinstance(e, Drafted)]
    [fin] = [e for e in a if isinstance(e, Finished)]
    assert fin.trace.token_ids == tokens_of(a) and fin.metrics.generated_tokens == 16


def test_each_steps_record_redraws_its_token_under_the_runs_settings(pair):
    target, draft = pair
    settings = SamplerSettings(temperature=0.9, top_k=30, seed=5, max_tokens=12)
    [fin] = [e for e in speculative(target, draft, settings, ignore_eos=True) if isinstance(e, Finished)]
    for i, st in enumerate(fin.trace.steps):
        assert resample_step(fin.trace, i, settings).token == st.token_id


def test_both_caches_hold_exactly_the_tokens_kept_after_every_round(pair):
    target, draft = pair
    ids = target.tokenizer.encode(PROMPT)
    settings = SamplerSettings(temperature=1.0, top_k=20)
    spec = Speculation(*prefill(target, draft, ids), settings, np.random.default_rng(0), list(ids), len(ids), k=5)
    for turn in speculate(spec, steps=30, eos=frozenset()):
        kept = spec.ids[:-1]  # the last token kept is fed by the next round
        assert spec.target.length == len(spec.target.held) == len(kept) and spec.target.held == kept
        assert spec.draft.length == len(spec.draft.held) <= len(kept) and spec.draft.held == kept[: spec.draft.length]
        assert len(turn.tokens) == turn.round.accepted + 1
    assert len(spec.ids) == len(ids) + 30


def exact_two_token_joint(target, ids: list[int], settings: SamplerSettings) -> dict[tuple[int, int], float]:
    """P(x1, x2) of the target's own sampling, from its logits (one forward per first token)."""
    first = final_probs(np.asarray(target.ops.numpy(target.forward([ids], target.new_cache())))[0], settings)
    joint = {}
    for x1 in np.flatnonzero(first):
        second = final_probs(np.asarray(target.ops.numpy(target.forward([[*ids, int(x1)]], target.new_cache())))[0],
                             settings)
        joint.update({(int(x1), int(x2)): float(first[x1] * second[x2]) for x2 in np.flatnonzero(second)})
    return joint


def test_sampled_output_is_distributed_as_the_targets_own_sampling(pair):
    """First two tokens of 600 seeded runs (k=2: both come from one round or two; about 60% of drafts kept): their
    frequencies are within total-variation 0.12 of the target's exact joint (0.08 measured), while the draft's own
    joint is 0.88 away. Seeded: the same draws every run, never flaky."""
    target, draft = pair
    settings = SamplerSettings(temperature=1.0, top_k=4, max_tokens=2)
    ids = target.tokenizer.encode(PROMPT)
    want = exact_two_token_joint(target, ids, settings)
    lanes = prefill(target, draft, ids)
    seen: Counter = Counter()
    accepted = drafted = 0
    for seed in range(600):
        spec = Speculation(*lanes, settings, np.random.default_rng(seed), list(ids), len(ids), k=2)
        turns = list(speculate(spec, steps=2, eos=frozenset()))
        seen[tuple(t for turn in turns for t in turn.tokens)] += 1
        accepted += sum(turn.round.accepted for turn in turns)
        drafted += sum(len(turn.round.drafts) for turn in turns)
        for lane in lanes:  # back to the prompt for the next seed
            lane.keep(ids[:-1])
    tv = 0.5 * sum(abs(seen[c] / 600 - want.get(c, 0.0)) for c in set(seen) | set(want))
    assert tv < 0.12
    draft_joint = exact_two_token_joint(draft, ids, settings)
    assert 0.5 * sum(abs(want.get(c, 0) - draft_joint.get(c, 0)) for c in set(want) | set(draft_joint)) > 0.5
    assert 0.4 < accepted / drafted < 0.8  # both the acceptance and the residual path were taken, often


class Scripted(Pace):
    """A pace that follows a script of draft lengths (0: a plain step, paused when the script says "paused"), then
    plain steps: what an adaptive run may do, whatever its clock measured, on demand."""

    def __init__(self, script: list[int | str]) -> None:
        super().__init__()
        self.script = iter(script)

    def _next(self, k: int) -> int:
        step = next(self.script, 0)
        self.note = "drafting paused: scripted" if step == "paused" else ""
        return 0 if step == "paused" else int(step)


SCRIPT = [3, 0, 2, "paused", "paused", "paused", 1, "paused", 4, 0, "paused", "paused", 2, 2]


def test_a_run_that_pauses_and_probes_keeps_the_targets_greedy_output(pair):
    """Drafting rounds, plain steps of a round, a paused stretch on plain decoding's own loop, probes: greedy output
    is the target's greedy output token for token, and both caches hold the tokens kept after every round."""
    target, draft = pair
    greedy = SamplerSettings(temperature=0, repetition_penalty=1.3, max_tokens=30)
    want = tokens_of(generate(target, Request(prompt=PROMPT, settings=greedy, ignore_eos=True), threading.Event()))
    ids = target.tokenizer.encode(PROMPT)
    spec = Speculation(*prefill(target, draft, ids), greedy, np.random.default_rng(0), list(ids), len(ids),
                       pace=Scripted(SCRIPT))
    turns = []
    for turn in speculate(spec, steps=30, eos=frozenset()):
        turns.append(turn)
        for lane in (spec.target, spec.draft):  # each cache holds what its lane says: the tokens kept, a prefix
            assert lane.length == len(lane.held) and lane.held == spec.ids[: lane.length]
        assert spec.target.length >= len(spec.ids) - 1  # (the last one is fed by the next step)
    assert spec.ids[len(ids):] == want
    paused = [t.round for t in turns if t.round.note]
    assert paused and all(r.plain and r.kept == 1 for r in paused) and all(t.samples[0] is not None for t in turns
                                                                            if t.round.note)
    assert any(t.round.drafts for t in turns) and any(t.round.plain and not t.round.note for t in turns)


def test_sampled_output_with_plain_steps_between_rounds_is_distributed_as_the_targets(torch_model, draft_path):
    """The first two tokens of 400 seeded runs whose pace drafts one token, then pauses (the second token, where the
    draft was rejected, is a plain step on plain decoding's loop): within total variation 0.12 of the target's exact
    joint. Seeded: the same draws every run."""
    target, draft = torch_model, get_backend("torch").load(draft_path, OPTIONS)
    settings = SamplerSettings(temperature=1.0, top_k=4, max_tokens=2)
    ids = target.tokenizer.encode(PROMPT)
    want = exact_two_token_joint(target, ids, settings)
    lanes = prefill(target, draft, ids)
    seen: Counter = Counter()
    paused = 0
    for seed in range(400):
        spec = Speculation(*lanes, settings, np.random.default_rng(seed), list(ids), len(ids),
                           pace=Scripted(["paused"]))
        spec.pace.k = 1  # (the first round drafts)
        turns = list(speculate(spec, steps=2, eos=frozenset()))
        seen[tuple(t for turn in turns for t in turn.tokens)] += 1
        paused += any(turn.round.note for turn in turns)
        for lane in lanes:
            lane.keep(ids[:-1])
    tv = 0.5 * sum(abs(seen[c] / 400 - want.get(c, 0.0)) for c in set(seen) | set(want))
    assert tv < 0.12 and 100 < paused < 300  # (the draft's token kept or not: both paths taken, often)


def test_plain_decoding_is_timed_in_the_same_request_when_asked(pair):
    target, draft = pair
    events = speculative(target, draft, SamplerSettings(temperature=0, max_tokens=10), 2, ignore_eos=True,
                         compare_plain=True)
    [summary] = [e.summary for e in events if isinstance(e, Speculated)]
    assert summary.plain_tokens == 10 and summary.plain_decode_s > 0 and summary.speedup is not None


def test_a_draft_with_another_tokenizer_is_refused_with_one_line(torch_model):
    builtin = get_backend("torch").load(BUILTIN_PATH, LoadOptions())
    with pytest.raises(ModelLoadError) as e:
        list(run_speculative(torch_model, builtin, Request(prompt=PROMPT, draft_k=K_START), threading.Event()))
    assert "\n" not in str(e.value) and "vocabulary has 4,096 tokens, the target's 384" in str(e.value)


def test_a_draft_whose_tokenizer_numbers_tokens_differently_is_refused(torch_model, tiny_path, tmp_path):
    other = shutil.copytree(tiny_path, tmp_path / "swapped")
    tok = json.loads((other / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[300:302]  # two ordinary pieces trade their ids: same size, same EOS
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(tok))
    draft = get_backend("torch").load(other, OPTIONS)
    with pytest.raises(ModelLoadError, match="must share its target's tokenizer"):
        list(run_speculative(torch_model, draft, Request(prompt=PROMPT), threading.Event()))


def test_stop_ends_the_run_after_the_round_in_progress(pair):
    target, draft = pair
    cancel = threading.Event()
    request = Request(prompt=PROMPT, settings=SamplerSettings(temperature=0, max_tokens=40), ignore_eos=True)
    events = []
    for e in run_speculative(target, draft, request, cancel):
        events.append(e)
        if isinstance(e, Drafted):
            cancel.set()
    [fin] = [e for e in events if isinstance(e, Finished)]
    [rnd] = [e.round for e in events if isinstance(e, Drafted)]
    assert fin.reason == "cancelled" and fin.trace.token_ids == tokens_of(events) and len(tokens_of(events)) == rnd.kept


@pytest.mark.needs("torch")
def test_the_model_thread_loads_the_draft_beside_the_target_and_refuses_a_mismatch(tiny_path, draft_path):
    worker = ModelThread()
    try:
        greedy = SamplerSettings(temperature=0, max_tokens=6)
        target = ModelSpec(str(tiny_path), "torch", OPTIONS)
        ok = Request(model=target, prompt=PROMPT, settings=greedy, draft=ModelSpec(str(draft_path), "torch", OPTIONS))
        bad = Request(model=target, prompt=PROMPT, settings=greedy, draft=ModelSpec(BUILTIN_NAME, "torch"))
        worker.submit(ok)
        worker.submit(bad)
        events = []
        while not any(isinstance(e, Failed) for e in events):
            events.append(worker.events.get(timeout=60))
        assert any(isinstance(e, Speculated) and e.request_id == ok.id for e in events)
        [failed] = [e for e in events if isinstance(e, Failed)]
        assert failed.request_id == bad.id and "must share its target's tokenizer" in failed.message
    finally:
        assert worker.close()
