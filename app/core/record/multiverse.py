"""A multiverse: where one prefix could go, as a tree of plain `Node`s, each with its step and path probability in
two spaces: the model's own (the softmax of its raw logits) and the run's sampler's (after the chain; a child a stage
cut has 0 there and names the stage). `columns` and `blocks` read it for an icicle: each depth's explored mass and
the unexplored remainder, each node's span inside its parent's, in the frame of a node zoomed into. JSON through
`to_dict` / `from_dict`. Made by `decoding.multiverse`; no model, no stage runs here, no Qt.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from app.core.plain_json import from_json, to_json
from app.core.settings import SamplerSettings

Space = Literal["model", "sampled"]
Reason = Literal["running", "done", "budget", "cancelled"]  # done: nothing left to explore within the depth
SPACES: tuple[Space, ...] = ("model", "sampled")
ROOT = 0  # the root's id: the prefix itself (depth 0, path probability 1)


@dataclass(frozen=True, slots=True)
class Node:
    """One continuation: `token` after its parent's path. The root (id 0) is the prefix: no token (-1)."""

    id: int
    parent: int  # -1 for the root
    token: int
    text: str  # the token for display (the tokenizer's `token_text`)
    depth: int  # tokens after the prefix
    prob: float  # the model's p(token | parent's path)
    path: float  # the product of `prob` from the root: the model's probability of the whole path
    sampled: float  # p(token | parent's path) after the sampler chain (0: a stage cut it)
    sampled_path: float  # the product of `sampled` from the root
    cut_by: str | None = None  # the first stage of the chain that cut it (then `sampled` is 0)
    end: bool = False  # an end-of-text token: nothing follows it

    def step_prob(self, space: Space) -> float:
        return self.prob if space == "model" else self.sampled

    def path_prob(self, space: Space) -> float:
        return self.path if space == "model" else self.sampled_path


@dataclass(frozen=True, slots=True)
class Column:
    """One depth (relative to the node zoomed into): the share of its parent's mass its nodes hold, and the rest."""

    depth: int
    explored: float
    remainder: float  # 1 - explored: what no node of this depth holds (unexplored, cut, ended; float32 rounding
    # may leave it a hair below 0 where the nodes hold it all)


@dataclass(frozen=True, slots=True)
class Block:
    """A node's span in the icicle of a frame: `column` 0 is the frame's node, `top` and `height` are shares of
    its path probability (the frame's node spans 0 to 1)."""

    node: int
    column: int
    top: float
    height: float


@dataclass(frozen=True)
class Multiverse:
    """The tree (root first, every parent before its children) and what it was grown under."""

    prompt_ids: tuple[int, ...]
    start: tuple[int, ...]  # tokens between the prompt and the root (a run's first steps): part of the prefix
    prefix_text: str  # the prefix as text (the prompt's and the start's)
    space: Space  # the probability the best-first order ranked by
    budget: int  # at most this many nodes ranked (a child a stage cut, 0 in the sampled space, rides along)
    depth: int  # at most this many tokens after the prefix
    width: int  # children considered per node: its top candidates by the model's probability
    settings: SamplerSettings  # the chain of the sampled space
    nodes: tuple[Node, ...] = ()
    expanded: int = 0  # nodes whose children were computed (rows forwarded; a few may not have joined the tree)
    reason: Reason = "running"
    origin: tuple[int, int] | None = None  # (run id, step) it looks ahead from; None: the prompt's end

    @property
    def ranked(self) -> int:
        """Nodes the best-first order took (the root and cut riders not counted): what the budget bounds."""
        return sum(1 for n in self.nodes[1:] if n.path_prob(self.space) > 0)

    def node(self, i: int) -> Node:
        return self.nodes[i]

    def children(self, i: int, space: Space = "model") -> list[int]:
        """Node i's children, most likely first in `space` (ties: by the model, then by id)."""
        return self._kids[space].get(i, [])

    @cached_property
    def _kids(self) -> dict[Space, dict[int, list[int]]]:
        """Each node's children, in each space's order (made once: a record is never changed)."""
        kids: dict[int, list[int]] = {}
        for n in self.nodes[1:]:
            kids.setdefault(n.parent, []).append(n.id)
        nodes = self.nodes
        return {space: {p: sorted(ks, key=lambda k: (-nodes[k].path_prob(space), -nodes[k].path, k))
                        for p, ks in kids.items()} for space in SPACES}

    def path_ids(self, i: int) -> tuple[int, ...]:
        """The tokens from the root to node i (none for the root)."""
        out = []
        while i > ROOT:
            out.append(self.nodes[i].token)
            i = self.nodes[i].parent
        return tuple(reversed(out))

    def lineage(self, i: int) -> list[int]:
        """The ids from the root to node i, both included."""
        out = [i]
        while out[-1] > ROOT:
            out.append(self.nodes[out[-1]].parent)
        return out[::-1]

    def path_text(self, i: int) -> str:
        """Node i's path as its tokens' display texts."""
        return "".join(self.nodes[j].text for j in self.lineage(i)[1:])

    def columns(self, space: Space, focus: int = ROOT) -> list[Column]:
        """Each depth below `focus` up to the depth limit: its nodes' share of `focus`'s path probability, and the
        remainder (the two sum to 1)."""
        base = self.nodes[focus].path_prob(space)
        sums = [0.0] * (self.depth - self.nodes[focus].depth)
        for b in self.blocks(space, focus)[1:]:
            sums[b.column - 1] += b.height
        if base <= 0:
            return [Column(d + 1, 0.0, 1.0) for d in range(len(sums))]
        return [Column(d + 1, s, 1.0 - s) for d, s in enumerate(sums)]

    def blocks(self, space: Space, focus: int = ROOT) -> list[Block]:
        """`focus` and every node below it with a height in `space`, each inside its parent's span (children most
        likely first, from the top), as shares of `focus`'s path probability: its block first."""
        base = self.nodes[focus].path_prob(space)
        out = [Block(focus, 0, 0.0, 1.0)]
        if base <= 0:
            return out
        todo = [(focus, 0.0)]
        while todo:
            parent, top = todo.pop()
            for k in self.children(parent, space):
                n = self.nodes[k]
                h = n.path_prob(space) / base
                if h > 0:
                    out.append(Block(k, n.depth - self.nodes[focus].depth, top, h))
                    todo.append((k, top))
                    top += h
        return out

    def cut_blocks(self, focus: int = ROOT) -> list[Block]:
        """The sampled space's missing children: each child a stage cut (0 there), under a parent with a block, as
        its parent's span times the model's probability of it (the share the chain took away), stacked from the
        parent's top in the model's order."""
        spans = {b.node: b for b in self.blocks("sampled", focus)}
        out = []
        for node, span in spans.items():
            top = span.top
            for k in self.children(node):
                n = self.nodes[k]
                if n.cut_by is not None and n.sampled == 0:
                    out.append(Block(k, span.column + 1, top, span.height * n.prob))
                    top += span.height * n.prob
        return out

    def to_dict(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_dict(cls, obj: Any, where: str = "multiverse") -> Multiverse:
        """What `to_dict` wrote; a ValueError naming the field where it is not one."""
        mv = from_json(cls, obj, where)
        for i, n in enumerate(mv.nodes):
            if n.id != i or (i and not 0 <= n.parent < i):
                raise ValueError(f"{where}.nodes[{i}]: ids must count up from 0, each parent before its children")
        return mv
