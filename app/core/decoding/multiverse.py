"""Look ahead from a prefilled prefix: the likely continuations, best first by path probability, as a `Multiverse`.

`Explorer.grow` yields the tree after each round; a round feeds the best `rows` unexpanded paths in rows of a cache
forked once from the prefix's (trimmed back after: the prompt is never prefilled again), in one forward where their
lengths allow, and runs the real sampler chain once over all the rows' logits (`start_samples`), which gives each
child both probabilities and the stage that cut it. Nodes join strictly best first, whatever `rows` is. No threads,
no events."""

from __future__ import annotations

import heapq
import itertools
import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from app.core.record.multiverse import ROOT, Multiverse, Node, Space
from app.core.record.record import Sample
from app.core.sampler.batch_sampling import PendingRows, start_samples
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import PendingSample, finish
from app.core.sampler.stages import dry_breaker_ids
from app.core.sampler.step_output import Recorded, StepScalars
from app.core.settings import SamplerSettings, SettingsError
from backends.base import LoadedModel

MAX_BUDGET, MAX_DEPTH, MAX_WIDTH, MAX_ROWS = 5000, 64, 64, 256
# The uniform each row's sampler step draws with. Nothing is drawn from it here; XTC's coin is made from it
# (`stages.xtc_uniform`: 0 for 0.5), so XTC shows the step where its coin comes up.
U = 0.5
LADDER = tuple(2**i for i in range(9))  # the row counts of the caches a round forwards into (up to MAX_ROWS)
FINAL_LSE = StepScalars._fields.index("final_lse")  # (in a record's scalars: not finite where no logit was)
PAD = 0.25  # the share of a forward's tokens that may pad shorter paths to the longest's length (`_batches`)


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


class Child(NamedTuple):
    """A candidate continuation of a node, from its row's sampler record."""

    token: int
    prob: float  # the model's
    sampled: float  # after the chain
    cut_by: str | None


class _Candidate(NamedTuple):
    """A child waiting to join the tree (its parent is in it): `path` is its tokens after the prefix."""

    parent: int
    path: tuple[int, ...]
    child: Child
    model_path: float
    sampled_path: float
    end: bool


class _Path(NamedTuple):
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
        # The bar: the `budget` best ranks of every path ever known (a child of a computed path). Nodes join best
        # first, so the tree's nodes are the best of them and the rest can only be filled from the others: a path
        # ranked below the budget-th best known can never join, and is never expanded (its rows would be wasted).
        self._best: list[float] = []  # a min-heap
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
        by_model, eos, waiting, order = self.look.space == "model", self.eos, self._waiting, self._order
        for child in self._children_of.pop(path):
            c = _Candidate(node.id, (*path, child.token), child, node.path * child.prob,
                           node.sampled_path * child.sampled, child.token in eos)
            if (rank := c.model_path if by_model else c.sampled_path) > 0:
                heapq.heappush(waiting, (-rank, next(order), c))
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
        """`path`'s children are known: kept until it joins the tree, their ranks counted (`_best`, the bar), and
        those that need children of their own queued for a round."""
        self._children_of[path.tokens] = children
        by_model, eos, todo, order, best = self.look.space == "model", self.eos, self._todo, self._order, self._best
        tokens, model_path, sampled_path = path
        needs, full = self._needs_children(len(tokens) + 1, False), len(best) >= self.look.budget
        for ch in children:
            p = (model_path * ch.prob, sampled_path * ch.sampled)
            if (rank := p[0] if by_model else p[1]) <= 0:
                continue
            if not full:
                heapq.heappush(best, rank)
                full = len(best) >= self.look.budget
            elif rank > best[0]:
                heapq.heapreplace(best, rank)
            if needs and ch.token not in eos:
                heapq.heappush(todo, (-rank, next(order), _Path((*tokens, ch.token), *p)))

    def _next_rows(self) -> list[_Path]:
        """The best `rows` paths whose children are to compute, none ranked below the bar (`_best`: sure to stay out
        of the tree); the best waiting candidate, where `_settle` stopped, is among them or follows them."""
        bar = self._best[0] if len(self._best) >= self.look.budget else 0.0
        out: list[_Path] = []
        while self._todo and len(out) < self.look.rows and -self._todo[0][0] >= bar:
            out.append(heapq.heappop(self._todo)[2])
        return out

    def _expand(self, paths: list[_Path]) -> None:
        """Each path's children: each path fed whole after the prefix into a row of a cache that holds the prefix in
        every row (trimmed back after), one forward per `_batches` batch, then the sampler once over all the rows.
        Going on from a parent's row instead would save feeding the path but copy whole cache rows each round:
        slower on the built-in model, no faster on a 0.1B one (docs/multiverse.md)."""
        batches = self._batches(paths)
        outs = [self._forward(batch) for batch in batches]
        done = [p for batch in batches for p in batch]
        logits = outs[0] if len(outs) == 1 else self.model.ops.stack([row for out in outs for row in out])  # (n, V)
        for p, children in zip(done, self._children(logits, done), strict=True):
            self._found(p, children)
        self._rows += len(done)

    def _batches(self, paths: list[_Path]) -> list[list[_Path]]:
        """The round's paths by length, shorter ones joining the longest ones' forward (padded after their end)
        while the padding stays within `PAD` of that forward's tokens: on a small model a forward's own cost
        outweighs a few more tokens, on a large one the tokens cost and a shorter group goes alone."""
        by_depth: dict[int, list[_Path]] = {}
        for p in paths:
            by_depth.setdefault(len(p.tokens), []).append(p)
        out: list[list[_Path]] = []
        for _, group in sorted(by_depth.items(), reverse=True):
            merged = out[-1] + group if out else group
            if out and _pad(merged) <= PAD * len(merged) * len(merged[0].tokens):
                out[-1] = merged
            else:
                out.append(group)
        return out[::-1]

    def _forward(self, batch: list[_Path]) -> Any:
        """Each path's logits at its last token (n, V), from one forward of the batch (trimmed back after). A path
        shorter than the longest is padded after its end, which its last token does not attend to (causal)."""
        depth = max(len(p.tokens) for p in batch)
        cache, size = self._rows_cache(len(batch))
        tokens = [[*p.tokens, *(p.tokens[-1:] * (depth - len(p.tokens)))] for p in batch]
        mixed = any(len(p.tokens) < depth for p in batch)
        logits = self.model.forward(tokens + tokens[:1] * (size - len(batch)), cache, "all" if mixed else "last")
        self.model.trim(cache, depth)  # back to the prefix, for the next round
        if not mixed:
            return logits[: len(batch)]  # (size, V)
        return self.model.ops.stack([logits[i, len(p.tokens) - 1] for i, p in enumerate(batch)])  # of (size, depth, V)

    def _rows_cache(self, n: int) -> tuple[Any, int]:
        """A cache of at least `n` rows, each holding the prefix: forked once per size of `LADDER` (the padding
        rows repeat the first path, their logits unread), so a round copies no cache."""
        size = min(next(s for s in LADDER if s >= n), self.look.rows)
        if size not in self._pool:
            self._pool[size] = self.model.fork(self.cache, size)
        return self._pool[size], size

    def _children(self, logits: Any, paths: list[_Path]) -> list[list[Child]]:
        """Each row's `width` likeliest tokens under the model, with their probabilities after the chain and the
        stage that cut each: the sampler's own record of the rows (`start_samples`, as a run's step makes it), read
        for all of them at once (`read_children`)."""
        s, vocab = self.settings, int(logits.shape[-1])
        histories = [self._history(p, vocab) for p in paths] if s.needs_history else None
        pending = start_samples(self.model.ops, logits, s, [U] * len(paths), histories=histories,
                                top_n=self.look.width)
        return read_children(pending)

    def _history(self, path: _Path, vocab: int) -> History:
        """The penalties' counts (and DRY's tokens) of a run that drew `start` then `path` after the prompt;
        mirostat starts from its initial μ at every node."""
        if self._breakers is None:
            s = self.settings
            self._breakers = (dry_breaker_ids(self.model.tokenizer.token_text, vocab, s.dry_breakers)
                              if s.dry_multiplier else frozenset())
        return History.start(self.model.ops, vocab, self.prompt, [*self.start, *path.tokens], self._breakers)


def _pad(batch: list[_Path]) -> int:
    """The tokens that pad `batch`'s shorter paths to the first (longest) one's length."""
    depth = len(batch[0].tokens)
    return sum(depth - len(p.tokens) for p in batch)


def read_children(pending: PendingSample | PendingRows) -> list[list[Child]]:
    """Each row's candidates as children, read from the step's arrays for all rows at once where the sampler recorded
    on the device (`Recorded`), else from each row's `Sample` (`children_of`)."""
    parts = pending.rows if isinstance(pending, PendingRows) else [pending]
    if any(p.checks or not isinstance(p.out, Recorded) for p in parts):
        return [children_of(r) for r in pending.results()]  # type: ignore[arg-type]  # (records: `record` is on)
    return [row for p in parts for row in _rows_children(p)]


def _rows_children(p: PendingSample) -> list[list[Child]]:
    """`children_of` each row of a recorded step, over its arrays read once: (B, ...) mapped rows, or one row's."""
    out: Recorded = p.out  # type: ignore[assignment]
    arrays = out.arrays()
    p.ops.sync(list(arrays))
    host = [p.ops.numpy(a) if p.rows else p.ops.numpy(a)[None] for a in arrays]  # each (B, ...)
    rec = Recorded.from_arrays(host)
    for i, lse in enumerate(rec.scalars[:, FINAL_LSE].tolist()):
        if not math.isfinite(lse):  # (raises the step's own error: no finite logit)
            finish(Recorded.from_arrays([a[i] for a in host]), p.stage_names, p.us[i], p.top_n)
    rows, _, n = rec.kept.shape  # (B, S, N)
    ids, raw, final = rec.top_ids[:, :n].tolist(), rec.probs[:, 0].tolist(), rec.probs[:, -1].tolist()
    cut = np.concatenate([~rec.kept, np.ones((rows, 1, n), dtype=bool)], axis=1)  # a last "stage" cuts everything
    first = cut.argmax(axis=1).tolist()  # (B, N): the first stage that cut each; S (None below): none did
    names = (*p.stage_names, None)
    return [[Child(t, raw_p, final_p, names[f]) for t, raw_p, final_p, f in zip(*row, strict=True)]
            for row in zip(ids, raw, final, first, strict=True)]


def children_of(s: Sample) -> list[Child]:
    """A step record's candidates as children: the model's probability (row 0), the chain's (the last row), and
    the first stage that cut each."""
    raw, final, ids = s.probs[0], s.probs[-1], s.top_ids
    return [Child(int(ids[j]), float(raw[j]), float(final[j]), s.cut_by(j)) for j in range(s.top_n)]
