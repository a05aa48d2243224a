"""A round of the multiverse whose paths differ in length goes in one forward, the shorter paths padded after their
end and each read at its own last token: every node is still the product of a direct forward's steps, the tree the
one one-at-a-time grows, and MLX's the same. A round's children, read from the sampler's arrays for all its rows at
once, are each row's own record's."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.decoding.multiverse import LookAhead, U, children_of, read_children
from app.core.sampler.batch_sampling import start_samples
from app.core.sampler.pipeline import History
from app.core.settings import SamplerSettings
from backends.numpy_rows import NUMPY_ROWS
from backends.ops import NUMPY
from tests.core.decoding.test_multiverse import CHAIN, PROMPT, direct, grow, same_tree

# On the tiny model this look-ahead's rounds mix paths of 2 and 3 tokens (a tree grown breadth-first in places).
MIXED = LookAhead(budget=30, depth=4, width=5, space="sampled", rows=8)


def grown_with_mixed_rounds(model, monkeypatch):
    """The tree, and the forwards that read every position (a mixed round's) among the forwards it made."""
    forward, mixed = model.forward, []

    def spy(tokens, cache, positions="last"):
        if positions == "all":
            mixed.append(sorted(len(row) for row in tokens))
        return forward(tokens, cache, positions)

    monkeypatch.setattr(model, "forward", spy)
    tree = grow(model, MIXED)
    monkeypatch.undo()
    return tree, mixed


def test_a_mixed_round_reads_each_path_at_its_own_end(torch_model, monkeypatch) -> None:
    tree, mixed = grown_with_mixed_rounds(torch_model, monkeypatch)
    assert mixed, "no round mixed path lengths: the look-ahead no longer exercises padding"
    ids = torch_model.tokenizer.encode(PROMPT)
    for n in tree.nodes[1:]:
        want_model, want_sampled = direct(torch_model, ids, tree.path_ids(n.id), CHAIN, tree.width)
        assert n.path == pytest.approx(want_model, rel=1e-4)
        assert n.sampled_path == pytest.approx(want_sampled, rel=1e-4, abs=1e-9)
    alone = grow(torch_model, LookAhead(budget=30, depth=4, width=5, space="sampled", rows=1))
    same_tree(tree, alone, 1e-4)
    assert alone.expanded <= tree.expanded


def test_mlx_mixed_rounds_grow_torch_s_tree(torch_model, mlx_model, monkeypatch) -> None:
    torch_tree, _ = grown_with_mixed_rounds(torch_model, monkeypatch)
    mlx_tree, mixed = grown_with_mixed_rounds(mlx_model, monkeypatch)
    assert mixed
    same_tree(torch_tree, mlx_tree, 1e-3)


CHAINS = {"penalties, top-k, top-p": CHAIN, "greedy": SamplerSettings(temperature=0),
          "min-p, xtc": SamplerSettings(min_p=0.2, xtc_probability=1), "mirostat": SamplerSettings(mirostat_tau=3.0)}


@pytest.mark.parametrize("ops", [NUMPY_ROWS, NUMPY], ids=["mapped rows", "row by row"])
@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("rows", [1, 5])
def test_children_read_at_once_are_each_row_s_record_s(ops, chain, rows) -> None:
    settings = CHAINS[chain]
    logits = np.random.default_rng(rows).normal(0, 3, (rows, 64)).astype(np.float32)  # (rows, V)

    def pending():
        hs = [History.start(ops, 64, [1, 2, 3], [4 + i] * i) for i in range(rows)] if settings.needs_history else None
        return start_samples(ops, logits, settings, [U] * rows, histories=hs, top_n=8)

    want = [children_of(s) for s in pending().results()]
    assert read_children(pending()) == want
    assert any(c.cut_by is not None for row in want for c in row)  # (what a stage cut is read too)
