"""The sampler step: the pipeline (`pipeline.py`) on the device, then a draw, and the step's record.

The draw is an inverse CDF over the final distribution with one uniform number from the run's seeded
generator, so a seed gives the same tokens on every backend and a recorded step can be re-drawn under other
settings. `sample` also records what every stage received, left, kept and cut at, for the top-N raw
candidates (a `Sample`, defined in record.py): views draw that record and compute no stage themselves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from app.core.record.record import GrammarStep, Sample
from app.core.sampler.grammar_step import Check, rejected, replayed
from app.core.sampler.pipeline import U_MAX as U_MAX  # (the speculative rounds' draw reads it here)
from app.core.sampler.pipeline import Dist, History, Stage, bump, grammar_first, make_stages, run_stages, sanitize
from app.core.sampler.stages import dry_penalties, dry_vector, next_mu, xtc_uniform
from app.core.sampler.step_output import CutRows, Drawn, Mode, Recorded, StepOutput
from app.core.sampler.step_record import RECORD_K as RECORD_K  # (where the window and the command line read it)
from app.core.sampler.step_record import cut_rows, host_record, make_record, stage_rows
from app.core.sampler.think_budget import bias_vector
from app.core.settings import SamplerSettings
from backends.ops import NUMPY, Array, ArrayOps, vmap

NAN = float("nan")


class NoValidTokenError(RuntimeError):
    """The model gave no finite logit (NaN/inf everywhere): nothing can be sampled."""


def sample(
    ops: ArrayOps,
    logits: Array,
    settings: SamplerSettings,
    u: float,
    *,
    history: History | None = None,
    top_n: int = 20,
    record: bool = True,
) -> Sample | int:
    """Run the pipeline on one step's logits (V,) and draw with `u` in [0, 1).

    Returns a `Sample` (one host transfer per step), or just the token id when `record` is False. The device
    part is one pure function per (settings, vocabulary, top-N), which an executor may compile (MLX does).
    """
    return start_sample(ops, logits, settings, u, history=history, top_n=top_n, record=record).result()


@dataclass(slots=True)
class PendingSample:
    """Drawn tokens still on the device, from one step of the pipeline: one row's (`start_sample`), or B rows' mapped
    in one graph (`rows`, `batch_sampling.start_samples`). Feed `tokens` to the next forward, then read `results()`
    (each array read once, a batch's then cut into rows on the host), so the device computes step t+1 while the host
    turns step t into a trace (as mlx-lm's generate_step does)."""

    ops: ArrayOps
    out: StepOutput  # on the device; with `rows`, every array with a leading row axis (B, ...)
    stage_names: tuple[str, ...]
    us: tuple[float, ...]  # each row's uniform
    top_n: int
    rows: bool = False  # B rows mapped together, else one row
    checks: tuple[Check | None, ...] = ()  # each row's grammar at this step, where a constraint runs

    @property
    def tokens(self) -> Array:  # (1,) one row's, (B, 1) B rows'; int, on the device
        return self.out.token

    @property
    def outputs(self) -> tuple[Array, ...]:
        """Every array of the step (to queue them together)."""
        return self.out.arrays()

    def results(self) -> list[Sample | int]:
        """Each row's outcome (its token id, or its record), in row order."""
        return self.read()()

    def read(self) -> Callable[[], list[Sample | int]]:
        """Read the step's arrays to the host now; the call returned makes each row's outcome from them. Without a
        constraint's check (which may draw again on the device) that call is numpy only: any thread may run it."""
        arrays = self.outputs
        self.ops.sync(list(arrays))
        host = [self.ops.numpy(a) for a in arrays]  # one transfer per array, for every row
        by_row = [[a[i] for a in host] for i in range(len(self.us))] if self.rows else [host]
        kind, names, top_n = type(self.out), self.stage_names, self.top_n
        checks = self.checks or (None,) * len(self.us)
        return lambda: [finish(kind.from_arrays(r), names, u, top_n, c)
                        for r, u, c in zip(by_row, self.us, checks, strict=True)]

    @property
    def host_only(self) -> bool:
        """Whether `read()`'s call runs on numpy alone (no constraint's check: nothing drawn again on the device)."""
        return not self.checks

    def result(self) -> Sample | int:
        """The one row's outcome."""
        return self.results()[0]


def finish(host: StepOutput, stage_names: tuple[str, ...], u: float, top_n: int,
           check: Check | None = None) -> Sample | int:
    """A step's outcome from its arrays on the host: the token id (`Drawn`) or the trace's record; with a constraint's
    `check`, what its grammar did (a token it refused after the draw, "on_reject", drawn again with it first)."""
    if not math.isfinite(host.final_lse):
        raise NoValidTokenError("the model produced no finite logits (NaN or infinity): try float32")
    if check is not None and check.redraw is not None and not check.allowed.allows(int(host.token[0])):
        return check.redraw(int(host.token[0]))
    if isinstance(host, Drawn):
        return int(host.token[0])
    if isinstance(host, CutRows):
        host = host_record(host, stage_names, top_n)
    s = host.sample(stage_names, u)
    return s if check is None else check.allowed.record(s, host.removed)


def start_sample(
    ops: ArrayOps,
    logits: Array,
    settings: SamplerSettings,
    u: float,
    *,
    history: History | None = None,
    top_n: int = 20,
    record: bool = True,
) -> PendingSample:
    """`sample`, without waiting for the device: the history is updated, the host transfer is deferred.

    Where the executor says `host_record` (MLX on a CPU), the device runs the pipeline and draws, and the record
    is made on numpy from the stages' logits it hands over, once the token is read: numpy's vector maths is many
    times faster there, and the record's small ops would otherwise each queue behind the next forward.
    """
    vocab = int(logits.shape[0])
    key = step_key(ops, settings, vocab, top_n, record, history)
    step, names = _step_function(ops, *key)
    before = before_step(ops, history)
    # -inf arithmetic is intended (masks); a step with no finite logit is caught in `result`.
    with np.errstate(all="ignore"):
        out, bumped = step(logits, ops.f32(uniforms(u)), *step_state(ops, settings, history, vocab))
    keep_state(settings, history, bumped, out.token)
    check = grammar_check(ops, logits, settings, u, history, before, top_n, record)
    return PendingSample(ops, out, names, (u,), key[2], checks=(check,) if check is not None else ())


def before_step(ops: ArrayOps, history: History | None) -> History | None:
    """For a row with a matcher: its grammar's mask for this step, made before the draw, and the history as it is
    (a copy, for an "on_reject" redraw: its arrays are never written in place, only replaced); else None."""
    if history is None or history.grammar is None:
        return None
    history.grammar.mask(history.host_ids(ops))
    return replace(history)


def grammar_check(ops: ArrayOps, logits: Array, settings: SamplerSettings, u: float, history: History | None,
                  before: History | None, top_n: int, record: bool) -> Check | None:
    """The step's `Check` for a row with a matcher (None without one); "on_reject": its redraw puts the history back
    as it was `before` the step, then draws the same uniform with the grammar first."""
    if history is None or history.grammar is None or before is None or settings.constraint is None:
        return None
    allowed = history.grammar.allowed(ops, logits)
    if grammar_first(settings):
        return Check(allowed)
    first = settings.with_(constraint=replace(settings.constraint, place="first"))  # type: ignore[arg-type]

    def redraw(token: int) -> Sample | int:
        vars(history).update(vars(before))
        return rejected(start_sample(ops, logits, first, u, history=history, top_n=top_n, record=record).result(),
                        token)

    return Check(allowed, redraw)


StepKey = tuple[SamplerSettings, int, int, Mode, bool]  # settings (pipeline), vocabulary, top-N, mode, penalties


def step_key(ops: ArrayOps, settings: SamplerSettings, vocab: int, top_n: int, record: bool,
             history: History | None) -> StepKey:
    """What the device step is made for: the steps of one key are one function (compiled, or mapped over rows)."""
    mode: Mode = (CutRows if ops.host_record else Recorded) if record else Drawn
    return pipeline_of(settings), vocab, min(top_n, vocab), mode, history is not None and settings.uses_penalties


def uniforms(u: float) -> list[float]:
    """The step's two uniform numbers: the draw's, then XTC's (made from it)."""
    return [u, xtc_uniform(u)]


def step_state(ops: ArrayOps, settings: SamplerSettings, history: History | None, vocab: int) -> tuple[Array, ...]:
    """The history's arrays the step reads: the penalties' counts, mirostat's μ, DRY's penalties (where on)."""
    penalties = history is not None and settings.uses_penalties
    hist = (history.context, history.generated) if penalties else ()
    if settings.mirostat_tau > 0:  # μ rides with the counts: in as a state array, out updated
        mu = history.mu if history is not None and history.mu is not None else 2 * settings.mirostat_tau
        hist = (*hist, ops.f32(mu))
    if settings.dry_multiplier > 0:  # DRY's penalties, from the tokens on the host: in last, out unchanged
        hist = (*hist, ops.f32(_dry(ops, settings, history, vocab)))
    if settings.soft_budget:  # a soft think budget's raise, from the think span on the host: in last, out unchanged
        hist = (*hist, ops.f32(bias_vector(None if history is None else history.think, vocab)))
    if grammar_first(settings):  # the grammar's mask, from the row's matcher on the host: in last, out unchanged
        hist = (*hist, ops.f32(_mask(ops, history, vocab)))
    return hist


def keep_state(settings: SamplerSettings, history: History | None, bumped: Sequence[Array], token: Array) -> None:
    """The history after a step that drew `token` (1,) and handed back its state `bumped` (`step_state`'s order)."""
    if history is None:
        return
    if settings.uses_penalties:
        history.context, history.generated = bumped[:2]
    if settings.mirostat_tau > 0:
        history.mu = bumped[2 if settings.uses_penalties else 0]
    if settings.dry_multiplier > 0 or settings.constraint is not None:  # (both follow the tokens on the host)
        history.pending, history.dry = token, None


def _dry(ops: ArrayOps, s: SamplerSettings, history: History | None, vocab: int) -> np.ndarray:
    """DRY's penalties (V,) for the next draw: given (a re-sample's), from the history's tokens, or none."""
    if history is None:
        return np.zeros(vocab, dtype=np.float32)
    if history.dry is not None:
        return history.dry
    ids = history.host_ids(ops)
    return dry_vector(dry_penalties(ids, s.dry_multiplier, s.dry_base, s.dry_allowed_length, history.breakers), vocab)


def _mask(ops: ArrayOps, history: History | None, vocab: int) -> np.ndarray:
    """The grammar's mask (V,) for the next draw, from the row's matcher (every token without one: a re-sample)."""
    if history is None or history.grammar is None:
        return np.ones(vocab, dtype=np.float32)
    return history.grammar.mask(history.host_ids(ops))


@lru_cache(maxsize=64)
def pipeline_of(settings: SamplerSettings) -> SamplerSettings:
    """`settings.pipeline()`, cached: the step function's key, computed once per run rather than every step."""
    return settings.pipeline()


@lru_cache(maxsize=64)
def device_step(ops: ArrayOps, settings: SamplerSettings, vocab: int, top_n: int, mode: Mode,
                penalties: bool) -> tuple[Callable[..., tuple[StepOutput, tuple[Array, ...]]], tuple[str, ...]]:
    """The device step of one row, uncompiled (its stages made once per settings, not per step), and the names of
    its stages (penalties first when they apply). The step returns the `mode`'s record and the history's state
    after the draw (`step_state`'s arrays, updated)."""
    stages = make_stages(settings, vocab)

    def step(logits: Array, u: Array, *hist: Array) -> tuple[StepOutput, tuple[Array, ...]]:
        return _device_step(ops, stages, settings, top_n, mode, logits, u, *hist)

    names = ("penalties",) * penalties + tuple(name for name, _ in stages)
    return step, names


@lru_cache(maxsize=64)
def _step_function(ops: ArrayOps, settings: SamplerSettings, vocab: int, top_n: int, mode: Mode,
                   penalties: bool) -> tuple[Callable[..., tuple[StepOutput, tuple[Array, ...]]], tuple[str, ...]]:
    """`device_step`, compiled where the executor can."""
    step, names = device_step(ops, settings, vocab, top_n, mode, penalties)
    return compiled_step(ops, step, mode), names  # type: ignore[return-value]  # (not mapped: never None)


def compiled_step(ops: ArrayOps, step: Callable[..., tuple[StepOutput, tuple[Array, ...]]], mode: Mode,
                  rows: bool = False) -> Callable[..., tuple[StepOutput, tuple[Array, ...]]] | None:
    """`step`, compiled where the executor can; with `rows`, mapped over a leading row axis of every argument and
    output first (`backends.ops.vmap`; None where the executor has no vmap). A compiler or a vmap takes arrays out,
    not records: the step hands its arrays over flat (the counts first), put back into the `mode`'s record here."""
    def flat(logits: Array, u: Array, *hist: Array) -> tuple[Array, ...]:
        out, bumped = step(logits, u, *hist)
        return (*bumped, *out.arrays())

    fn = vmap(ops, flat) if rows else flat
    if fn is None:
        return None
    compiled = ops.compile(fn)
    if compiled is flat:  # not compiled (numpy, torch): no need to flatten
        return step

    def unflat(logits: Array, u: Array, *hist: Array) -> tuple[StepOutput, tuple[Array, ...]]:
        arrays = compiled(logits, u, *hist)
        return mode.from_arrays(arrays[len(hist):]), tuple(arrays[:len(hist)])

    return unflat


def _device_step(ops: ArrayOps, stages: Sequence[Stage], s: SamplerSettings, top_n: int, mode: Mode,
                 logits: Array, u: Array, *hist: Array) -> tuple[StepOutput, tuple[Array, ...]]:
    """Everything on the device and nothing on the host: pipeline, draw, the history's counts after it, and the
    record (`Recorded`) or what the host makes it from (`CutRows`). `u` (2,): the draw's uniform, then XTC's;
    `hist`: the penalties' counts, then mirostat's μ when it is on (each handed back updated)."""
    raw = sanitize(ops, logits)
    grammar = grammar_first(s)
    mask = hist[-1] if grammar else None  # (the last state array: the grammar's mask)
    hist = hist[:-1] if grammar else hist
    think = hist[-1] if s.soft_budget else None  # (then a soft think budget's raise)
    hist = hist[:-1] if s.soft_budget else hist
    miro, dry_on = s.mirostat_tau > 0, s.dry_multiplier > 0
    dry = hist[-1] if dry_on else None
    state = hist[:-1] if dry_on else hist
    counts, mu = (state[:-1], state[-1]) if miro else (state, None)
    cuts = run_stages(ops, stages, s, raw, ops.stack([u[0], u[1], mu]) if miro else u, *counts, dry=dry,
                      think=think, mask=mask)
    rows = stage_rows(ops, raw, cuts) if mode is Recorded else Dist.of(ops, cuts[-1].x)
    tok = rows.draw(u[0])  # (1,) from the final distribution
    bumped = tuple(bump(ops, h, tok) for h in counts)
    if miro:
        p_drawn = ops.take(rows.e[-1] / rows.z[-1] if mode is Recorded else rows.p, tok)[0]
        bumped = (*bumped, next_mu(ops, mu, p_drawn, s.mirostat_tau, s.mirostat_eta))
    if dry_on:
        bumped = (*bumped, dry)
    if think is not None:
        bumped = (*bumped, think)
    if mask is not None:
        bumped = (*bumped, mask)
    if mode is Recorded:  # (the grammar, where it runs, is the first stage after the penalties)
        return make_record(ops, raw, cuts, rows, tok, top_n, len(cuts) - len(stages) if grammar else None), bumped
    if mode is CutRows:
        return cut_rows(ops, raw, cuts, rows.lse, tok), bumped
    return Drawn(tok, ops.stack([rows.lse])), bumped  # lse (1,): `result` checks it is finite


def resample(
    top_ids: np.ndarray,
    top_logits: np.ndarray,
    settings: SamplerSettings,
    u: float,
    *,
    context_ids: Sequence[int] = (),
    generated_ids: Sequence[int] = (),
    top_n: int = 20,
    recorded: Sample | None = None,
    grammar: GrammarStep | None = None,
) -> Sample:
    """Re-apply `settings` to a recorded step without the model, over its top-`RECORD_K` raw logits (with a
    constraint: its `grammar` there, which recorded what it allowed of them).

    Exact whenever every token the new settings keep is among the recorded ones and the cut does not depend
    on the unrecorded tail: greedy, top-k ≤ RECORD_K (then any top-p / min-p / penalties), min-p alone; a
    stage's row before such a cut is over the recorded logits (`SamplerSettings.needs_whole_vocabulary` says when
    a stage before it breaks this). Ranks and token ids are those of the full vocabulary, and so are the raw
    numbers when the `recorded` step is given (its raw row, entropy, lse); mirostat resumes the μ recorded there,
    and DRY's penalties come from the context's ids (without the tokenizer's breakers).
    """
    by_id = np.argsort(top_ids, kind="stable")  # id order, so ties and the CDF walk match the full vocabulary
    ids, sub = top_ids[by_id], np.asarray(top_logits, dtype=np.float32)[by_id]
    remap = {int(t): i for i, t in enumerate(ids)}
    local = lambda seq: [remap[int(t)] for t in seq if int(t) in remap]
    hist = History.start(NUMPY, len(ids), local([*context_ids, *generated_ids]))
    gen = np.bincount(np.asarray(local(generated_ids), dtype=np.int64), minlength=len(ids))
    hist.generated = gen.astype(np.float32)
    hist.mu, hist.grammar = _recorded_mu(recorded), replayed(grammar, settings, by_id)
    if settings.dry_multiplier > 0:  # over the whole vocabulary's ids (no breakers: the tokenizer is not here)
        pen = dry_penalties([*context_ids, *generated_ids], settings.dry_multiplier, settings.dry_base,
                            settings.dry_allowed_length)
        hist.dry = dry_vector({remap[t]: v for t, v in pen.items() if t in remap}, len(ids))
    s = sample(NUMPY, sub, settings, u, history=hist, top_n=top_n)
    assert isinstance(s, Sample)
    s = replace(s, token=int(ids[s.token]), top_ids=ids[s.top_ids], grammar=s.grammar and grammar)
    return s if recorded is None else _with_raw_of(s, recorded)


def mu_after(last: Sample | None, s: SamplerSettings) -> float | None:
    """Mirostat's μ for the step after the recorded `last` (a branch going on from its parent's steps): its μ moved
    by its drawn token's surprise; None where mirostat did not run there."""
    mu = _recorded_mu(last)
    if mu is None or last.prob is None or last.prob <= 0:
        return None
    return mu - s.mirostat_eta * (-math.log2(last.prob) - s.mirostat_tau)


def _recorded_mu(recorded: Sample | None) -> float | None:
    """Mirostat's μ at a recorded step (its line was 2^-μ), or None where mirostat did not run there."""
    i = None if recorded is None else recorded.stage_index("mirostat")
    return None if i is None else -math.log2(float(recorded.thresholds[i]))


def _with_raw_of(s: Sample, recorded: Sample) -> Sample:
    """`s` with the raw distribution's numbers of the step it re-samples, which saw the whole vocabulary."""
    n = s.top_n
    if recorded.top_n < n or not np.array_equal(recorded.top_ids[:n], s.top_ids[:n]):
        return s
    at = int(np.flatnonzero(recorded.top_ids == s.token)[0])
    return s.with_values(recorded.probs[0, :n], raw_logprob=float(recorded.top_logits[at]) - recorded.raw_lse,
                         entropy=recorded.entropy, raw_lse=recorded.raw_lse)
