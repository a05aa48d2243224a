"""Speculative decoding (Leviathan et al. 2023; Chen et al. 2023): a small draft model with the target's tokenizer
proposes k tokens, the target scores them all in one forward over every position, and the rejection rule keeps
a prefix of them: draft token x is accepted with probability min(1, p(x) / q(x)); at the first rejection a token
is drawn from the normalized residual max(0, p - q) instead; after k acceptances the target draws one more. The
output is then distributed exactly as the target's own sampling (greedy: the very same tokens).

`speculate` is the token-level loop (rounds of `Turn`s, no text). p and q are the final distributions of the
sampler pipeline (`pipeline.py`, on numpy) under the user's settings, penalties included; every uniform number
comes from the run's one seeded generator. Both caches are trimmed to the tokens kept after each round. The
request's events (text, steps, metrics) are `speculative_run.py`'s; loading the two models is `model_thread`'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from app.core.decoding.generation import common_prefix
from app.core.decoding.loop import Row, decode, token_of
from app.core.decoding.prefill import ChunkedForward
from app.core.decoding.speculative.pace import Pace
from app.core.record.record import Sample
from app.core.record.spec_record import DraftToken, SpecRound
from app.core.sampler.constraint import GrammarEnded, Matcher
from app.core.sampler.forcing import forced
from app.core.sampler.pipeline import Dist, History, make_stages, run_stages, sanitize
from app.core.sampler.sampling import U_MAX, NoValidTokenError, sample
from app.core.settings import SamplerSettings, SettingsError
from backends.base import LoadedModel, ModelLoadError
from backends.ops import NUMPY, ArrayOps

ADAPTIVE = 0  # draft_k 0: the draft length follows what drafting is measured to save (`pace.Pace`)
NO_UNIFORMS = NUMPY.f32([0.0, 0.0])  # the pipeline's per-step uniforms: no stage reads them once XTC is refused
PROBES = ("def main(argv):\n    return 0\n", "Hello, world! naïve café 🙂 こんにちは", "  \t\n\n0123 x=y+1;")


def final_probs(logits: np.ndarray, settings: SamplerSettings, history: History | None = None,
                mask: np.ndarray | None = None) -> np.ndarray:
    """(V,) float32: the distribution the sampler pipeline draws from, for one position's logits (`mask`: what a
    constraint's grammar allows there)."""
    s, stages = _stages(settings, logits.shape[-1])
    with np.errstate(all="ignore"):
        raw = sanitize(NUMPY, logits)
        if stages[0][0] == "greedy" and history is None and mask is None:  # (what follows greedy keeps its token)
            return _one_hot(raw)
        hist = (history.context, history.generated) if history is not None else ()
        cuts = run_stages(NUMPY, stages, s, raw, NO_UNIFORMS, *hist, mask=None if mask is None else NUMPY.f32(mask))
        p = Dist(NUMPY, cuts[-1].x).p
    if not np.isfinite(p).all():
        raise NoValidTokenError("the model produced no finite logits (NaN or infinity): try float32")
    return p


def _one_hot(raw: np.ndarray) -> np.ndarray:
    """Greedy's distribution without running the stages: all of it on the first of the largest logits (the top-1
    cut's tie rule)."""
    top = int(np.argmax(raw))
    if not np.isfinite(raw[top]):
        raise NoValidTokenError("the model produced no finite logits (NaN or infinity): try float32")
    p = np.zeros(raw.shape[-1], dtype=np.float32)
    p[top] = 1.0
    return p


@lru_cache(maxsize=16)
def _stages(settings: SamplerSettings, vocab: int) -> tuple[SamplerSettings, list]:
    """The settings' pipeline and its stages, made once per run rather than at every position."""
    s = settings.pipeline()
    return s, make_stages(s, vocab)


def draw(probs: np.ndarray, u: float) -> int:
    """The token whose CDF interval holds u (inverse CDF, in float32 as the pipeline's own draw)."""
    cdf = np.cumsum(probs, dtype=np.float32)
    return int(min(np.sum(cdf <= np.float32(min(u, U_MAX)) * cdf[-1]), probs.shape[0] - 1))


def u_for(probs: np.ndarray, token: int) -> float:
    """A uniform number that draws `token` from `probs` (the middle of its CDF interval): the step's record
    then re-draws the token the rejection rule chose, under the same settings."""
    cdf = np.cumsum(probs, dtype=np.float32)
    lo = float(cdf[token - 1]) if token > 0 else 0.0
    return (lo + float(cdf[token])) / 2 / float(cdf[-1])


@dataclass(frozen=True)
class Verdict:
    """The rejection rule's outcome for one round."""

    judged: tuple[bool, ...]  # accepted flags of the drafts judged: all True, or ending at the one False
    token: int  # the target's own draw after the kept drafts
    p_token: float  # its probability in what it was drawn from
    residual: bool  # drawn from the residual (a rejection), else from the target's next distribution

    @property
    def kept(self) -> int:
        return len(self.judged) - (not self.judged[-1] if self.judged else 0)


def verify(p_rows: np.ndarray, q_rows: np.ndarray, drafts: Sequence[int], rng: np.random.Generator) -> Verdict:
    """Judge `drafts` (k) with the target's distributions `p_rows` (k+1, V) and the draft's `q_rows` (k, V):
    one uniform per judged draft, then one for the token drawn."""
    judged: list[bool] = []
    for i, x in enumerate(drafts):
        p, q = float(p_rows[i, x]), float(q_rows[i, x])
        if rng.random() * q < p:  # u < p / q
            judged.append(True)
            continue
        judged.append(False)
        res = np.maximum(p_rows[i].astype(np.float64) - q_rows[i], 0.0)
        res = res / res.sum() if res.sum() > 0 else p_rows[i].astype(np.float64)  # (p == q up to rounding)
        token = draw(res, rng.random())
        return Verdict(tuple(judged), token, float(res[token]), True)
    p = p_rows[len(drafts)]
    token = draw(p, rng.random())
    return Verdict(tuple(judged), token, float(p[token]), False)


class Lane:
    """One model's KV cache and the token ids it holds (always a prefix of the run's tokens between rounds)."""

    def __init__(self, model: LoadedModel) -> None:
        self.model, self.cache, self.held = model, model.new_cache(), []  # type: list[int]

    def feed(self, tokens: Sequence[int], positions: str = "last") -> np.ndarray:
        """Append `tokens`; their logits on the host: (V,) for "last", (T, V) for "all"."""
        logits = self.model.forward([list(tokens)], self.cache, positions)
        self.held.extend(tokens)
        return np.asarray(self.model.ops.numpy(logits), dtype=np.float32)[0]

    def fill(self, tokens: Sequence[int], cancel: threading.Event | None = None) -> bool:
        """Append `tokens`, computed now in chunks (a prefill: their logits are not read); False if cancelled
        between chunks (the lane is then dropped)."""
        forward = ChunkedForward(self.model, self.cache, tokens, cancel)
        forward.last()
        if forward.cancelled:
            return False
        self.held.extend(tokens)
        return True

    def keep(self, ids: Sequence[int]) -> None:
        """Trim the cache to its longest prefix shared with `ids`."""
        n = common_prefix(self.held, ids)
        if n < len(self.held):
            self.model.trim(self.cache, len(self.held) - n)
            del self.held[n:]

    @property
    def length(self) -> int:
        return self.model.cache_len(self.cache)


def prefill(target: LoadedModel, draft: LoadedModel, ids: Sequence[int],
            cancel: threading.Event | None = None) -> tuple[Lane, Lane] | None:
    """Both models' caches holding all of `ids` but the last (which each round feeds); None if cancelled."""
    lanes = Lane(target), Lane(draft)
    if not all(lane.fill(ids[:-1], cancel) for lane in lanes):
        return None
    return lanes


@dataclass(frozen=True)
class Turn:
    """What one round adds: its record, the tokens kept, and per token the target's step record (None when not
    recording), and how many draft forwards it took."""

    round: SpecRound
    tokens: tuple[int, ...]
    samples: tuple[Sample | None, ...]
    draft_forwards: int


@dataclass
class Speculation:
    """A speculative run's state between rounds."""

    target: Lane
    draft: Lane
    settings: SamplerSettings
    rng: np.random.Generator
    ids: list[int]  # the prompt and every token kept so far
    prompt_len: int
    k: int = 4  # the draft length of every round (a fixed k), unless `pace` chooses it round by round
    pace: Pace | None = None
    rounds: int = 0
    grammar: Matcher | None = None  # a constraint's: drafts and the target's draws alike keep to what it allows
    ended: GrammarEnded | None = None  # why the grammar ended the run (then no round follows)

    def history(self, extra: Sequence[int] = (), ops: ArrayOps = NUMPY) -> History | None:
        """Penalty counts at the position after the kept tokens and `extra` (None: no penalties), on `ops`."""
        if not self.settings.uses_penalties:
            return None
        return History.start(ops, self.vocab, self.ids[: self.prompt_len], [*self.ids[self.prompt_len:], *extra])

    def mask(self, extra: Sequence[int] = ()) -> np.ndarray | None:
        """What the grammar allows at the position after the kept tokens and `extra` (None: no constraint)."""
        return None if self.grammar is None else self.grammar.mask([*self.ids, *extra])

    def recording(self, extra: Sequence[int], ops: ArrayOps = NUMPY) -> History | None:
        """The history a step's record is made with there: the penalties' counts, and the grammar."""
        if self.grammar is None:
            return self.history(extra, ops)
        history = self.history(extra, ops) or History.start(ops, self.vocab, self.ids, extra)
        history.grammar = self.grammar
        return history

    @property
    def vocab(self) -> int:
        return self.target.model.info.vocab_size


def speculate(spec: Speculation, *, steps: int, eos: frozenset[int], top_n: int = 20, record: bool = True,
              cancel: threading.Event | None = None) -> Iterator[Turn]:
    """Rounds until `steps` tokens are kept, an EOS token is, or `cancel` is set."""
    added = 0
    while added < steps and not (cancel is not None and cancel.is_set()):
        if spec.grammar is not None and (ended := spec.grammar.end(spec.ids)) is not None:
            spec.ended = ended  # complete (as with EOS), or allowing no token
            return
        k = spec.k if spec.pace is None else spec.pace.k
        paused = k == 0 and spec.pace is not None and spec.pace.note != ""
        turns = plain_steps(spec, steps - added, eos, top_n, record, added, cancel) if paused else iter(
            [one_round(spec, min(k, steps - added - 1), eos, top_n, record, added)])
        for turn in turns:
            added += len(turn.tokens)
            yield turn
            if turn.tokens[-1] in eos:
                return


def plain_steps(spec: Speculation, steps: int, eos: frozenset[int], top_n: int, record: bool, step: int,
                cancel: threading.Event | None) -> Iterator[Turn]:
    """While an adaptive run's drafting is paused: plain steps on plain decoding's own loop (`decoding.decode`, the
    same seeded draws), a `Turn` each, until the pace asks for a probe round or the run ends. Each step's seconds
    (this thread's, as `one_round` counts) go to the pace."""
    assert spec.pace is not None
    lane, text = spec.target, spec.target.model.tokenizer.token_text
    row = Row(spec.rng, history=spec.recording((), lane.model.ops))
    t = time.thread_time()  # (a step: the forward that makes its logits, then its draw)
    logits = lane.model.forward([[spec.ids[-1]]], lane.cache)
    try:
        for outs in decode(lane.model, logits, lane.cache, spec.settings, [row], steps=steps, top_n=top_n,
                           record=record, cancel=cancel):
            out = outs[0]
            assert out is not None
            token, note = token_of(out), spec.pace.note
            spec.ids.append(token)
            spec.pace.measured(0, 0, 0.0, time.thread_time() - t)
            row.done = token in eos or spec.pace.k > 0  # (done: `decode` feeds it no further token)
            p = out.prob if isinstance(out, Sample) else float("nan")  # (NaN: not recorded)
            rnd = SpecRound(spec.rounds, step, (), token, text(token), p, False, 1, note)
            spec.rounds, step = spec.rounds + 1, step + 1
            lane.held = spec.ids[: lane.length]  # (what `decode` has fed it so far)
            yield Turn(rnd, (token,), (out if isinstance(out, Sample) else None,), 0)
            t = time.thread_time()
    finally:  # what `decode` fed it (the last token too where it ran ahead, as on MLX), then as after a round: the
        lane.held = spec.ids[: lane.length]  # tokens kept but the last
        lane.keep(spec.ids[:-1])


def one_round(spec: Speculation, k: int, eos: frozenset[int], top_n: int, record: bool, step: int) -> Turn:
    """Draft k tokens, verify them in one target forward, keep what the rule keeps, trim both caches (k 0: a plain
    step, the target's own draw). An adaptive run's pace is told what the round cost."""
    lag = spec.ids[len(spec.draft.held):-1]  # (after plain steps: caught up in one forward, not timed as drafting;
    if k and len(lag) > 2:  # a token or two the first draft step feeds with the last, as after a round)
        spec.draft.fill(lag)
    started = time.thread_time()  # (the CPU this thread spends: what another process's load does not move)
    drafts, q_rows = _propose(spec, k)
    drafted = time.thread_time()
    logits = spec.target.feed([spec.ids[-1], *drafts], "all")  # (k+1, V)
    if k == 0 and record:  # a plain step: drawn and recorded by the sampler in one pass, as plain decoding does
        p_rows, (verdict, samples) = logits[:0], _plain_step(spec, logits[0], top_n)
        tokens = _cut([verdict.token], eos)
    else:
        p_rows = np.stack([final_probs(logits[i], spec.settings, spec.history(drafts[:i]), spec.mask(drafts[:i]))
                           for i in range(k + 1)])
        verdict = verify(p_rows, np.stack(q_rows) if q_rows else p_rows[:0], drafts, spec.rng)
        tokens = _cut([*drafts[: verdict.kept], verdict.token], eos)
        samples = tuple(_record(spec, logits[j], p_rows[j], t, tokens[:j], top_n) if record else None
                        for j, t in enumerate(tokens))
    spec.ids.extend(tokens)
    spec.target.keep(spec.ids[:-1])
    spec.draft.keep(spec.ids[:-1])
    note = spec.pace.note if spec.pace is not None and k == 0 else ""  # (why it drafted nothing: paused)
    if spec.pace is not None:
        spec.pace.measured(k, min(verdict.kept, k), drafted - started, time.thread_time() - drafted)
    rnd = _round_record(spec, drafts, q_rows, p_rows, verdict, step, len(tokens), note)
    spec.rounds += 1
    return Turn(rnd, tuple(tokens), samples, k)


def _plain_step(spec: Speculation, logits: np.ndarray, top_n: int) -> tuple[Verdict, tuple[Sample]]:
    """The target's own step at the next position: its draw and record in one pass of the sampler."""
    s = sample(NUMPY, logits, spec.settings, spec.rng.random(), history=spec.recording(()), top_n=top_n)
    assert isinstance(s, Sample)
    return Verdict((), s.token, s.prob, False), (s,)


def _propose(spec: Speculation, k: int) -> tuple[list[int], list[np.ndarray]]:
    """k draft tokens, each drawn from the draft's final distribution (one draft forward per token)."""
    drafts: list[int] = []
    q_rows: list[np.ndarray] = []
    for i in range(k):
        feed = spec.ids[len(spec.draft.held):] if i == 0 else [drafts[-1]]  # what the draft's cache lacks
        q = final_probs(spec.draft.feed(feed), spec.settings, spec.history(drafts), spec.mask(drafts))
        drafts.append(draw(q, spec.rng.random()))
        q_rows.append(q)
    return drafts, q_rows


def _cut(tokens: list[int], eos: frozenset[int]) -> list[int]:
    """`tokens` up to and including the first EOS."""
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1]
    return tokens


def _record(spec: Speculation, logits: np.ndarray, p: np.ndarray, token: int, before: Sequence[int],
            top_n: int) -> Sample:
    """The target's step record at this position, drawn with a uniform number that takes `token`."""
    s = sample(NUMPY, logits, spec.settings, u_for(p, token), history=spec.recording(before), top_n=top_n)
    if not isinstance(s, Sample) or s.token == token:
        return s
    return forced(s, token)  # (a token so unlikely that its CDF interval vanishes in float32)


def _round_record(spec: Speculation, drafts: list[int], q_rows: list[np.ndarray], p_rows: np.ndarray,
                  verdict: Verdict, step: int, kept: int, note: str) -> SpecRound:
    text = spec.target.model.tokenizer.token_text
    judged = verdict.judged
    records = tuple(DraftToken(x, text(x), float(q_rows[i][x]), float(p_rows[i, x]),
                               i < len(judged) and judged[i]) for i, x in enumerate(drafts))
    return SpecRound(spec.rounds, step, records, verdict.token, text(verdict.token), verdict.p_token,
                     verdict.residual, kept, note)


def check_settings(settings: SamplerSettings) -> None:
    """A `SettingsError` for settings whose distribution is itself random (XTC cuts on a coin flip per step) or
    carries run state this loop does not keep (mirostat's running μ, DRY's repeats): the rejection rule needs one
    fixed distribution per position, computed from the position's logits and token counts alone."""
    if settings.xtc_probability > 0:
        raise SettingsError("speculative decoding needs one distribution per position, and XTC flips a coin per "
                            "step: set XTC probability to 0")
    running = [(name, knob) for name, knob, on in (("mirostat", "mirostat τ", settings.mirostat_tau > 0),
                                                    ("DRY", "DRY multiplier", settings.dry_multiplier > 0)) if on]
    if settings.constraint is not None and settings.constraint.place == "on_reject":
        raise SettingsError("speculative decoding applies a constraint's grammar to the draft's and the target's "
                            "distributions alike: place the constraint first")
    if running:
        names, knobs = " or ".join(n for n, _ in running), " and ".join(k for _, k in running)
        raise SettingsError(f"speculative decoding does not carry {names}'s state from token to token: set {knobs} "
                            "to 0")


def check_pair(target: LoadedModel, draft: LoadedModel) -> None:
    """A `ModelLoadError` (one line) unless `draft` tokenizes exactly as `target` does."""
    why = tokenizer_mismatch(target, draft)
    if why:
        raise ModelLoadError(f"{draft.info.name} cannot draft for {target.info.name}: {why}; "
                             "a draft model must share its target's tokenizer")


def tokenizer_mismatch(target: Any, draft: Any) -> str | None:
    """Why two models' tokens differ (None: they agree on the vocabulary size, EOS, sample texts and names)."""
    a, b = target.tokenizer, draft.tokenizer
    if target.info.vocab_size != draft.info.vocab_size:
        return f"its vocabulary has {draft.info.vocab_size:,} tokens, the target's {target.info.vocab_size:,}"
    if a.eos_ids != b.eos_ids:
        return "their end-of-text tokens differ"
    if any(a.encode(t) != b.encode(t) for t in PROBES):
        return "its tokenizer splits text differently"
    stride = max(1, target.info.vocab_size // 2048)
    differ = next((i for i in range(0, target.info.vocab_size, stride) if a.token_text(i) != b.token_text(i)), None)
    return None if differ is None else f"its token {differ} is not the target's"
