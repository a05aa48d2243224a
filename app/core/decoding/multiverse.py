"""Look ahead from a prefilled prefix: the likely continuations, best first by path probability, as a `Multiverse`.

`Explorer.grow` yields the tree after each round; a round feeds the best `rows` unexpanded paths in rows of a cache
forked once from the prefix's (trimmed back after: the prompt is never prefilled again), one forward per depth, and
runs the real sampler chain on each row's logits (`start_samples`), which gives each child both probabilities and
the stage that cut it. Nodes join strictly best first, whatever `rows` is. No threads, no events."""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.core.record.multiverse import ROOT, Multiverse, Node, Space
from app.core.record.record import Sample
from app.core.sampler.batch_sampling import start_samples
from app.core.sampler.pipeline import History
from app.core.sampler.stages import dry_breaker_ids
from app.core.settings import SamplerSettings, SettingsError
from backends.base import LoadedModel

MAX_BUDGET, MAX_DEPTH, MAX_WIDTH, MAX_ROWS = 5000, 64, 64, 256
# The uniform each row's sampler step draws with. Nothing is drawn from it here; XTC's coin is made from it
# (`stages.xtc_uniform`: 0 for 0.5), so XTC shows the step where its coin comes up.
U = 0.5
LADDER = tuple(2**i for i in range(9))  # the row counts of the caches a round forwards into (up to MAX_ROWS)


@dataclass(frozen=True)
class LookAhead:
    """How far to look: at most `budget` nodes, `depth` tokens deep, the `width` likeliest children of each node
    (by the model), ranked by the path probability of `space`; `rows` nodes forwarded together (1: one at a time)."""

    budget: int = 200
    depth: int = 6
    width: int = 10
    space: Space = "model"
    rows: int = 32

    def __post_init__(self) -> None:
        for name, hi in (("budget", MAX_BUDGET), ("depth", MAX_DEPTH), ("width", MAX_WIDTH), ("rows", MAX_ROWS)):
            value = getattr(self, name)
            if not 1 <= value <= hi:
                raise SettingsError(f"multiverse {name} must be 1 to {hi}, got {value}")
        if self.space not in ("model", "sampled"):
            raise SettingsError(f'multiverse space must be "model" or "sampled", got {self.space!r}')


@dataclass(frozen=True, slots=True)
class Child:
    """A candidate continuation of a node, from its row's sampler record."""

    token: int
    prob: float  # the model's
    sampled: float  # after the chain
    cut_by: str | None


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A child waiting to join the tree (its parent is in it): `path` is its tokens after the prefix."""

    parent: int
    path: tuple[int, ...]
    child: Child
    model_path: float
    sampled_path: float
    end: bool


@dataclass(frozen=True, slots=True)
class _Path:
    """A path whose children are still to compute; its parent's are known (the parent need not be in the tree)."""

    tokens: tuple[int, ...]
    model_path: float
    sampled_path: float


class Explorer:
    """Grows one multiverse from `prefix_logits` (1, V), the last position's, and `prefix_cache`, a one-row cache
    holding the prompt and `start` (forked, never written). `settings` is the chain the sampled space runs.

    Two queues, both best first: the candidates waiting to join the tree (children of nodes in it), and the paths
    whose children are to compute, which the rounds take from in batches of `rows` — children of paths computed
    but not yet in the tree included, so that a round looks several tokens ahead along the likeliest paths."""

    def __init__(self, model: LoadedModel, prefix_cache: Any, prefix_logits: Any, prompt_ids: Sequence[int],
                 start: Sequence[int], settings: SamplerSettings, look: LookAhead, *, prefix_text: str = "",
                 origin: tuple[int, int] | None = None) -> None:
        self.model, self.cache, self.look, self.settings = model, prefix_cache, look, settings
        self.prompt, self.start = list(prompt_ids), list(start)
        self.eos = model.tokenizer.eos_ids
        ctx = model.info.context_length
        self.depth = max(0, min(look.depth, ctx - len(self.prompt) - len(self.start)) if ctx else look.depth)
        self._logits = prefix_logits
        self._waiting: list[tuple[float, int, _Candidate]] = []
        self._todo: list[tuple[float, int, _Path]] = []
        self._order = itertools.count()  # ties are taken in the order they were found
        self._children_of: dict[tuple[int, ...], list[Child]] = {}  # computed, for paths not yet in the tree
        self._breakers: frozenset[int] | None = None
        self._pool: dict[int, Any] = {}  # rows -> a cache of that many rows holding the prefix (`_rows_cache`)
        root = Node(ROOT, -1, -1, "", 0, 1.0, 1.0, 1.0, 1.0)
        self.tree = Multiverse(tuple(self.prompt), tuple(self.start), prefix_text, look.space, look.budget,
                               self.depth, look.width, settings, (root,), origin=origin)
        self._nodes: list[Node] = [root]
        self._ranked = 0
        self._rows = 0

    def grow(self, cancel: threading.Event | None = None) -> Iterator[Multiverse]:
        """The tree after each round (`reason` "running"), then as it ends: "budget" (full), "done" (nothing left
        within the depth) or "cancelled"."""
        if self.depth < 1:
            yield self._snapshot("done")
            return
        root = _Path((), 1.0, 1.0)
        self._found(root, self._children(self._logits, [root])[0])
        self._join(self._nodes[ROOT], ())
        while True:
            self._settle()
            if self._ranked >= self.look.budget or not self._waiting:
                yield self._snapshot("budget" if self._ranked >= self.look.budget else "done")
                return
            if cancel is not None and cancel.is_set():
                yield self._snapshot("cancelled")
                return
            self._expand(self._next_rows())
            yield self._snapshot("running")

    def _snapshot(self, reason: str) -> Multiverse:
        return replace(self.tree, nodes=tuple(self._nodes), expanded=self._rows, reason=reason)  # type: ignore[arg-type]

    def _rank(self, model_path: float, sampled_path: float) -> float:
        return model_path if self.look.space == "model" else sampled_path

    def _needs_children(self, depth: int, end: bool) -> bool:
        return depth < self.depth and not end

    def _settle(self) -> None:
        """Let into the tree, best first, every waiting candidate whose children are known (or that needs none): the
        best waiting one is the next best path overall, as every node in the tree has its children waiting."""
        while self._waiting and self._ranked < self.look.budget:
            c = self._waiting[0][2]
            needs = self._needs_children(len(c.path), c.end)
            if needs and c.path not in self._children_of:
                return
            heapq.heappop(self._waiting)
            node = self._add(c, ranked=True)
            if needs:
                self._join(node, c.path)

    def _join(self, node: Node, path: tuple[int, ...]) -> None:
        """`node` is in the tree: its children wait for their turn; in the sampled space, those a stage cut (0 there)
        join at once, marked with the stage, outside the budget."""
        for child in self._children_of.pop(path):
            c = _Candidate(node.id, (*path, child.token), child, node.path * child.prob,
                           node.sampled_path * child.sampled, child.token in self.eos)
            if (rank := self._rank(c.model_path, c.sampled_path)) > 0:
                heapq.heappush(self._waiting, (-rank, next(self._order), c))
            elif child.cut_by is not None and child.prob > 0:
                self._add(c, ranked=False)

    def _add(self, c: _Candidate, ranked: bool) -> Node:
        ch = c.child
        node = Node(len(self._nodes), c.parent, ch.token, self.model.tokenizer.token_text(ch.token), len(c.path),
                    ch.prob, c.model_path, ch.sampled, c.sampled_path, ch.cut_by, c.end)
        self._nodes.append(node)
        self._ranked += ranked
        return node

    def _found(self, path: _Path, children: list[Child]) -> None:
        """`path`'s children are known: kept until it joins the tree, and those that need children of their own
        queued for a round."""
        self._children_of[path.tokens] = children
        for ch in children:
            tokens = (*path.tokens, ch.token)
            p = _Path(tokens, path.model_path * ch.prob, path.sampled_path * ch.sampled)
            rank = self._rank(p.model_path, p.sampled_path)
            if rank > 0 and self._needs_children(len(tokens), ch.token in self.eos):
                heapq.heappush(self._todo, (-rank, next(self._order), p))

    def _next_rows(self) -> list[_Path]:
        """The best `rows` paths whose children are to compute, none ranked below the remaining budget's worth of
        waiting candidates (so sure to stay out of the tree); the best waiting candidate, where `_settle` stopped,
        is among them or follows them."""
        left = self.look.budget - self._ranked
        bar = -heapq.nsmallest(left, self._waiting)[-1][0] if len(self._waiting) >= left else 0.0
        out: list[_Path] = []
        while self._todo and len(out) < self.look.rows and -self._todo[0][0] >= bar:
            out.append(heapq.heappop(self._todo)[2])
        return out

    def _expand(self, paths: list[_Path]) -> None:
        """Each path's children: one forward per depth, each path fed whole after the prefix into a row of a cache
        that holds the prefix in every row (trimmed back after). Going on from a parent's row instead would save
        feeding the path but copy whole cache rows each round: slower on the built-in model, no faster on a 0.1B
        one (docs/multiverse.md)."""
        by_depth: dict[int, list[_Path]] = {}
        for p in paths:
            by_depth.setdefault(len(p.tokens), []).append(p)
        for depth, group in sorted(by_depth.items()):
            cache, size = self._rows_cache(len(group))
            tokens = [list(p.tokens) for p in group]
            logits = self.model.forward(tokens + tokens[:1] * (size - len(group)), cache)  # (size, V)
            self.model.trim(cache, depth)  # back to the prefix, for the next round
            for p, children in zip(group, self._children(logits[: len(group)], group), strict=True):
                self._found(p, children)
            self._rows += len(group)

    def _rows_cache(self, n: int) -> tuple[Any, int]:
        """A cache of at least `n` rows, each holding the prefix: forked once per size of `LADDER` (the padding
        rows repeat the first path, their logits unread), so a round copies no cache."""
        size = min(next(s for s in LADDER if s >= n), self.look.rows)
        if size not in self._pool:
            self._pool[size] = self.model.fork(self.cache, size)
        return self._pool[size], size

    def _children(self, logits: Any, paths: list[_Path]) -> list[list[Child]]:
        """Each row's `width` likeliest tokens under the model, with their probabilities after the chain and the
        stage that cut each: the sampler's own record of the row (`start_samples`, as a run's step makes it)."""
        s, vocab = self.settings, int(logits.shape[-1])
        histories = [self._history(p, vocab) for p in paths] if s.needs_history else None
        pending = start_samples(self.model.ops, logits, s, [U] * len(paths), histories=histories,
                                top_n=self.look.width)
        return [children_of(r) for r in pending.results()]  # type: ignore[arg-type]  # (records: `record` is on)

    def _history(self, path: _Path, vocab: int) -> History:
        """The penalties' counts (and DRY's tokens) of a run that drew `start` then `path` after the prompt;
        mirostat starts from its initial μ at every node."""
        if self._breakers is None:
            s = self.settings
            self._breakers = (dry_breaker_ids(self.model.tokenizer.token_text, vocab, s.dry_breakers)
                              if s.dry_multiplier else frozenset())
        return History.start(self.model.ops, vocab, self.prompt, [*self.start, *path.tokens], self._breakers)


def children_of(s: Sample) -> list[Child]:
    """A step record's candidates as children: the model's probability (row 0), the chain's (the last row), and
    the first stage that cut each."""
    raw, final, ids = s.probs[0], s.probs[-1], s.top_ids
    return [Child(int(ids[j]), float(raw[j]), float(final[j]), s.cut_by(j)) for j in range(s.top_n)]
