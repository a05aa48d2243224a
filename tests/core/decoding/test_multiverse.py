"""The multiverse on real tiny models: every node's path probability is the product of its step probabilities from a
direct forward of that path (the model's softmax, and the sampler's own step on that forward's logits), the budget
and the depth hold, each column sums to 1 with its remainder, rows forwarded together grow the tree one at a time
would, MLX grows torch's, and a cancel ends it."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from app.core.decoding.multiverse import Explorer, LookAhead, U
from app.core.decoding.prefill import prefill
from app.core.record.multiverse import ROOT, Multiverse
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import sample
from app.core.settings import SamplerSettings, SettingsError

PROMPT = "def add(a, b):"
CHAIN = SamplerSettings(temperature=0.8, top_k=6, top_p=0.9, repetition_penalty=1.3)  # cuts, and a history


def grow(model, look: LookAhead, settings: SamplerSettings = CHAIN, prompt: str = PROMPT,
         cancel: threading.Event | None = None) -> Multiverse:
    ids = model.tokenizer.encode(prompt)
    cache = model.new_cache()
    logits = prefill(model, cache, ids, None)
    *_, tree = Explorer(model, cache, logits, ids, (), settings, look).grow(cancel)
    return tree


@pytest.fixture(scope="module")
def trees(torch_model) -> dict[str, Multiverse]:
    """One tree per space on the tiny torch model (module-scoped: every test below reads them)."""
    return {space: grow(torch_model, LookAhead(budget=24, depth=3, width=8, space=space, rows=8))
            for space in ("model", "sampled")}


def direct(model, ids: list[int], path: tuple[int, ...], settings: SamplerSettings, width: int) -> tuple[float, float]:
    """The path's probability in each space from one forward of prompt + path on a fresh cache: the product of the
    softmax of each position's logits at the next token, and of the sampler's final row there."""
    logits = model.ops.numpy(model.forward([ids + list(path[:-1])], model.new_cache(), "all"))[0]  # (T, V)
    rows = logits[len(ids) - 1:]
    p_model = p_sampled = 1.0
    for i, token in enumerate(path):
        x = rows[i].astype(np.float64)
        p_model *= float(np.exp(x[token] - x.max()) / np.exp(x - x.max()).sum())
        hist = History.start(model.ops, x.size, ids, path[:i])
        s = sample(model.ops, model.ops.f32(rows[i]), settings, U, history=hist, top_n=width)
        at = np.flatnonzero(s.top_ids[: s.top_n] == token)
        p_sampled *= float(s.probs[-1][at[0]]) if at.size else math.nan
    return p_model, p_sampled


@pytest.mark.parametrize("space", ["model", "sampled"])
def test_every_path_probability_is_the_product_of_a_direct_forwards_steps(torch_model, trees, space) -> None:
    tree = trees[space]
    ids = torch_model.tokenizer.encode(PROMPT)
    assert len(tree.nodes) > 10
    for n in tree.nodes[1:]:
        want_model, want_sampled = direct(torch_model, ids, tree.path_ids(n.id), CHAIN, tree.width)
        assert n.path == pytest.approx(want_model, rel=1e-4)
        assert n.sampled_path == pytest.approx(want_sampled, rel=1e-4, abs=1e-9)
        parent = tree.node(n.parent)
        assert n.path == pytest.approx(parent.path * n.prob, rel=1e-6)


def test_a_child_a_stage_cut_is_kept_with_the_stage_and_nothing_in_the_sampled_space(trees) -> None:
    tree = trees["sampled"]
    cut = [n for n in tree.nodes[1:] if n.cut_by is not None]
    assert cut and {n.cut_by for n in cut} <= {"top_k", "top_p"}
    assert all(n.sampled == 0 and n.prob > 0 for n in cut)
    assert all(not tree.children(n.id) for n in cut)  # ranked by the sampler: a cut child is never expanded
    kept = [n for n in tree.nodes[1:] if n.cut_by is None]
    assert all(n.sampled > 0 for n in kept)


@pytest.mark.parametrize("space", ["model", "sampled"])
def test_the_budget_and_the_depth_hold(trees, space) -> None:
    tree = trees[space]
    assert tree.reason == "budget" and tree.ranked == 24
    assert max(n.depth for n in tree.nodes) <= 3
    for n in tree.nodes[1:]:  # a child is never likelier than its parent: the tree is best-first's
        assert n.path_prob(space) <= tree.node(n.parent).path_prob(space) + 1e-12


def test_a_small_tree_ends_when_nothing_is_left_within_the_depth(torch_model) -> None:
    tree = grow(torch_model, LookAhead(budget=100, depth=1, width=3))
    assert tree.reason == "done" and tree.ranked == 3 and {n.depth for n in tree.nodes[1:]} == {1}


@pytest.mark.parametrize("space", ["model", "sampled"])
def test_each_column_sums_to_one_with_its_remainder(trees, space) -> None:
    for tree in trees.values():  # either space's columns, whichever space ranked the tree
        cols = tree.columns(space)
        assert [c.depth for c in cols] == [1, 2, 3]
        for c in cols:
            at_depth = sum(n.path_prob(space) for n in tree.nodes[1:] if n.depth == c.depth)
            assert c.explored == pytest.approx(at_depth, abs=1e-9)
            assert c.explored + c.remainder == pytest.approx(1.0, abs=1e-9)
        focus = next(n.id for n in tree.nodes[1:] if n.depth == 1 and tree.children(n.id, space))
        for c in tree.columns(space, focus):  # zoomed: shares of the node's own probability
            assert c.explored + c.remainder == pytest.approx(1.0, abs=1e-9)


def test_blocks_nest_inside_their_parents_span(trees) -> None:
    tree = trees["model"]
    blocks = {b.node: b for b in tree.blocks("model")}
    assert blocks[ROOT].height == 1.0
    for node, b in blocks.items():
        if node != ROOT:
            p = blocks[tree.node(node).parent]
            assert p.top - 1e-12 <= b.top and b.top + b.height <= p.top + p.height + 1e-12
            assert b.height == pytest.approx(tree.node(node).path)


def same_tree(a: Multiverse, b: Multiverse, rel: float) -> None:
    """The same paths with the same probabilities, but for a path at the budget's edge that a float tie may swap."""
    pa = {a.path_ids(n.id): n for n in a.nodes[1:]}
    pb = {b.path_ids(n.id): n for n in b.nodes[1:]}
    edge = min(n.path_prob(a.space) for n in pa.values() if n.path_prob(a.space) > 0) * (1 + 1e-3)
    assert all(n.path_prob(a.space) <= edge for k, n in {**pa, **pb}.items() if (k in pa) != (k in pb))
    for k in pa.keys() & pb.keys():
        assert pa[k].path == pytest.approx(pb[k].path, rel=rel)
        assert pa[k].sampled_path == pytest.approx(pb[k].sampled_path, rel=rel, abs=1e-9)
        assert pa[k].cut_by == pb[k].cut_by


def test_rows_forwarded_together_grow_the_tree_one_at_a_time_would(torch_model, trees) -> None:
    alone = grow(torch_model, LookAhead(budget=24, depth=3, width=8, space="sampled", rows=1))
    same_tree(trees["sampled"], alone, 1e-4)
    assert alone.expanded <= trees["sampled"].expanded  # the batch may look ahead past the budget, never less


def test_mlx_grows_the_tree_torch_grows(torch_model, mlx_model, trees) -> None:
    same_tree(trees["model"], grow(mlx_model, LookAhead(budget=24, depth=3, width=8, space="model", rows=8)), 1e-3)


def test_a_cancel_ends_it_after_the_round_in_progress(torch_model) -> None:
    cancel = threading.Event()
    cancel.set()
    tree = grow(torch_model, LookAhead(budget=200, depth=4), cancel=cancel)
    assert tree.reason == "cancelled" and tree.ranked < 200


def test_the_record_reads_back_as_written(trees) -> None:
    tree = trees["sampled"]
    back = Multiverse.from_dict(tree.to_dict())
    assert back == tree and back.columns("sampled") == tree.columns("sampled")
    bad = tree.to_dict()
    bad["nodes"][3]["parent"] = 7
    with pytest.raises(ValueError, match=r"multiverse.nodes\[3\]"):
        Multiverse.from_dict(bad)


@pytest.mark.parametrize(("field", "value"), [("budget", 0), ("depth", 65), ("width", 0), ("rows", 0)])
def test_a_look_ahead_out_of_range_is_one_line_naming_it(field, value) -> None:
    with pytest.raises(SettingsError, match=f"multiverse {field} must be 1 to"):
        LookAhead(**{field: value})
