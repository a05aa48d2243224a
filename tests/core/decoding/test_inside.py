"""Inside the model as plain data, no model: the lens grid (where the drawn token first leads, its JSON), the attention
map (head means, which heads share a KV head, its JSON), the live lens of a step (shares among its candidates; saved
in the trace file and read back equal; a damaged one refused in one line naming the field), the request's checks, and
a server's model refused in one line before anything connects to it."""

from __future__ import annotations

import json
import math
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from app.core.decoding.generation import Prefix
from app.core.decoding.inside import (
    AttentionMap,
    InsideRefusedError,
    InsideRequest,
    LensGrid,
    layered,
    look,
    refuse_remote,
    watching,
)
from app.core.events import Failed
from app.core.models.sources import ModelSpec
from app.core.record.live_lens import LiveLens, read_live_lens
from app.core.record.trace import RunTrace, StepTrace
from app.core.record.trace_file import TraceFormatError
from app.core.runs.jobs import Job, stream
from app.core.runs.model_thread import ModelThread
from app.core.sampler.sampling import sample
from app.core.settings import SamplerSettings
from backends.base import SERVER, ModelInfo
from backends.ops import NUMPY


def grid(ranks: list[int], probs: list[float] | None = None) -> LensGrid:
    """A 4-row lens (embeddings and 3 layers) of 2 tokens a row, the drawn token 7 at these ranks."""
    n = len(ranks)
    return LensGrid(step=2, position=5, top_ids=np.array([[7, 3]] * n, dtype=np.int32),
                    top_probs=np.array([[0.6, 0.3]] * n, dtype=np.float32), top_texts=(("a", "b"),) * n,
                    token_id=7, token_text="a", token_probs=np.array(probs or [0.1] * n, dtype=np.float32),
                    token_ranks=np.array(ranks), lse=np.zeros(n, dtype=np.float32))


def test_the_drawn_token_first_leads_at_the_first_row_it_ranks_first() -> None:
    assert grid([40, 3, 0, 0]).appears == 2
    assert grid([40, 0, 1, 0]).appears == 1  # the first time, even if it falls back after
    assert grid([9, 8, 7, 1]).appears is None
    g = grid([5, 0, 0, 0])
    assert g.layers == 4 and g.layer_names == ("embeddings", "1", "2", "3")
    out = g.to_json()
    assert out["appears"] == 1 and "approximation" in out
    assert [r["layer"] for r in out["layers"]] == ["embeddings", "1", "2", "3"]
    assert out["layers"][1]["top"][0] == {"token_id": 7, "text": "a", "prob": pytest.approx(0.6)}
    no_token = replace(g, token_id=None, token_probs=np.full(4, np.nan, dtype=np.float32), token_ranks=np.full(4, -1))
    assert no_token.appears is None and no_token.to_json()["layers"][0]["token_prob"] is None


def test_an_attention_map_says_which_heads_share_a_kv_head() -> None:
    w = np.random.default_rng(0).random((2, 8, 5)).astype(np.float32)
    w /= w.sum(-1, keepdims=True)
    a = AttentionMap(step=1, position=4, weights=w, kv_heads=2, windows=(None, 3), context_texts=tuple("abcde"))
    assert (a.layers, a.heads, a.group) == (2, 8, 4)
    assert [a.kv_head_of(h) for h in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert list(a.sharing(5)) == [4, 5, 6, 7]
    np.testing.assert_allclose(a.head_mean(), w.mean(axis=1))
    one = a.to_json(layer=1)
    assert [x["layer"] for x in one["layers"]] == [2] and one["layers"][0]["window"] == 3
    assert len(a.to_json()["layers"]) == 2 and a.to_json()["context"] == list("abcde")
    mha = replace(a, kv_heads=8)
    assert mha.group == 1 and list(mha.sharing(3)) == [3]


def test_a_live_lens_shares_are_each_layers_softmax_over_its_candidates() -> None:
    lens = LiveLens(np.array([4, 9, 2], dtype=np.int32), np.array([[0, 0, 0], [2, 1, -np.inf]], dtype=np.float32))
    np.testing.assert_allclose(lens.shares()[0], [1 / 3] * 3, rtol=1e-6)
    e = math.exp(1)
    np.testing.assert_allclose(lens.shares()[1], [e / (e + 1), 1 / (e + 1), 0], rtol=1e-6)
    assert lens.leaders().tolist() == [0, 0] and lens.layers == 2
    assert read_live_lens(json.loads(json.dumps(lens.to_json()))) == lens  # -inf travels as its string
    with pytest.raises(ValueError, match="a row of 3 logits per layer"):
        LiveLens(np.array([1, 2, 3], dtype=np.int32), np.zeros((2, 2), dtype=np.float32))


def _run_with_lens() -> RunTrace:
    rng = np.random.default_rng(1)
    run = RunTrace(prompt_ids=[3, 1, 4], settings=SamplerSettings(seed=1), seed=1)
    for i in range(3):
        s = sample(NUMPY, (rng.normal(size=50) * 2).astype(np.float32), run.settings, float(rng.random()))
        s = replace(s, lens=LiveLens(s.top_ids[:4].copy(), rng.normal(size=(3, 4)).astype(np.float32)))
        run.steps.append(StepTrace(i, s, f"t{i}", tuple(f"c{t}" for t in s.top_ids[:20]), 0.01))
    return run


def test_the_live_lens_is_saved_in_the_trace_and_read_back_equal(tmp_path: Path) -> None:
    run = _run_with_lens()
    run.save(tmp_path / "run.jsonl")
    back = RunTrace.load(tmp_path / "run.jsonl")
    assert back == run
    assert all(b.sample.lens == a.sample.lens for a, b in zip(run.steps, back.steps, strict=True))
    assert run.steps[0].to_json()["lens"]["ids"] == run.steps[0].sample.lens.ids.tolist()


@pytest.mark.parametrize(("damage", "says"), [
    (lambda lens: lens.update(ids=[1, "x", 3, 4]), "lens.ids"),
    (lambda lens: lens.update(logits=[[1, 2]]), "lens.logits"),
    (lambda lens: lens.pop("ids"), "lens.ids"),
])
def test_a_damaged_live_lens_is_refused_in_one_line_naming_it(tmp_path: Path, damage, says: str) -> None:
    path = tmp_path / "run.jsonl"
    _run_with_lens().save(path)
    lines = path.read_text().splitlines()
    step = json.loads(lines[2])
    damage(step["lens"])
    lines[2] = json.dumps(step)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceFormatError) as e:
        RunTrace.load(path)
    assert says in str(e.value) and ":3:" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("step", "says"), [(-1, "not one of the run's steps"), (4, "not one of the run's steps")])
def test_a_step_outside_the_run_is_refused_in_one_line(step: int, says: str) -> None:
    with pytest.raises(ValueError, match=says) as e:
        InsideRequest(prompt_ids=(1, 2), tokens=(5, 6, 7), step=step).check()
    assert "\n" not in str(e.value)
    ok = InsideRequest(prompt_ids=(1, 2), tokens=(5, 6, 7), step=3)  # one past the last: no token known there
    assert ok.context == [1, 2, 5, 6, 7] and ok.target is None
    assert InsideRequest(prompt_ids=(1, 2), tokens=(5, 6, 7), step=1).target == 6


class ServerModel:  # what the core reads of a server's model: its capabilities and name
    capabilities = SERVER
    info = ModelInfo("m", "remote", "?", 0, 0, 0, 0, 0, 0, 0, 0, "?", "server", None, 0, 0)


def test_a_server_model_is_refused_in_one_line() -> None:
    spec = ModelSpec("some-model", "remote", base_url="http://127.0.0.1:9")
    for refuse in (lambda: refuse_remote(spec), lambda: layered(ServerModel()),
                   lambda: list(look(ServerModel(), InsideRequest(prompt_ids=(1,)), "lens", threading.Event(),
                                     Prefix()))):
        with pytest.raises(InsideRefusedError, match="a server's model exposes no layers") as e:
            refuse()
        assert "\n" not in str(e.value)
    with watching(ServerModel(), 8):  # a run on a server records no lens: nothing to watch, nothing refused
        pass


@pytest.mark.parametrize("kind", ["lens", "attention"])
def test_the_model_thread_refuses_a_servers_model_before_connecting(kind: str) -> None:
    spec = ModelSpec("some-model", "remote", base_url="http://127.0.0.1:9")  # (nothing listens there)
    worker = ModelThread()
    try:
        events = list(stream(worker.start(Job(kind, (InsideRequest(model=spec, prompt_ids=(1, 2)),)))))
    finally:
        worker.close()
    assert len(events) == 1 and isinstance(events[0], Failed)
    assert events[0].message.startswith("a server's model exposes no layers") and "\n" not in events[0].message
