"""The runner table: one row per strategy, `RUNNERS[job.kind](context, job)`, each a short generator of the job's
events over the models the `ThreadContext` holds; a new strategy is a row here (and its loop in `decoding/`), and
`ModelThread` does not change. A runner raises what it cannot do; the thread makes that each request's `Failed`
(`failure`). A job run together fails request by request: a model that does not load fails the requests naming it,
and the others run (`guarded`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

from app.core.decoding.generation import PromptError, build_prompt, generate
from app.core.decoding.inside import look, refuse_remote, watching
from app.core.decoding.probes import ProbeError, run_probes
from app.core.decoding.quant_diff import run_diff
from app.core.decoding.steering.pairs import make_from_pairs
from app.core.decoding.steering.steered import steers
from app.core.decoding.surprisal import score
from app.core.decoding.together import generate_together, groups, interleave
from app.core.events import Event, Failed, Finished, Loaded, Request, Scored
from app.core.metrics import Metrics
from app.core.models.sources import Cancelled, ModelSpec
from app.core.runs.beam_run import refuse_server, run_beam
from app.core.runs.context import ThreadContext, local, shared_tokenizer
from app.core.runs.jobs import Job, JobRequest
from app.core.runs.multiverse_run import refuse_server as refuse_explore
from app.core.runs.multiverse_run import run_multiverse
from app.core.runs.speculative_run import run_speculative
from app.core.sampler.constraint import ConstraintError
from app.core.sampler.logit_bias import check_ids
from app.core.sampler.sampling import NoValidTokenError
from app.core.settings import SettingsError
from backends import Model, ModelLoadError

log = logging.getLogger(__name__)
# a line a person can act on
USER_ERRORS = (ModelLoadError, PromptError, NoValidTokenError, SettingsError, ProbeError, ConstraintError)
Runner = Callable[[ThreadContext, Job], Iterator[Event]]


def kind_of(request: Request) -> str:
    """The row that runs a `Request` alone: speculative decoding where it names a draft, else plain."""
    return "speculative" if request.draft is not None else "plain"


def _alone(ctx: ThreadContext, job: Job) -> Model:
    """The job's one model as the main one (models held beside it for an earlier job go)."""
    ctx.free_held(keep=(job.request.model,))
    return ctx.ensure(job, job.request)


def _plain(ctx: ThreadContext, job: Job) -> Iterator[Event]:
    request: Request = job.request  # type: ignore[assignment]
    model = _alone(ctx, job)
    check_ids(request.settings.logit_bias, model.info.vocab_size)
    with watching(model, request.lens):  # the live lens, where asked for
        yield from generate(model, request, job.cancel, ctx.prefix)


def _speculative(ctx: ThreadContext, job: Job) -> Iterator[Event]:
    request: Request = job.request  # type: ignore[assignment]
    if steers(request.settings):  # (the draft and the target would have to be steered alike: not done)
        raise SettingsError("steering runs on plain decoding and samples, not on speculative decoding")
    if request.settings.think_budget > 0:  # (the target's verify would have to force the closing marker mid-round)
        raise SettingsError("a think budget runs on plain decoding and samples, not on speculative decoding: set "
                            "it to 0 (off)")
    model = _alone(ctx, job)
    check_ids(request.settings.logit_bias, model.info.vocab_size)
    target = local(model)
    assert request.draft is not None
    yield from run_speculative(target, ctx.draft(job, request.draft, target), request, job.cancel)


def _load(ctx: ThreadContext, job: Job) -> Iterator[Event]:
    known = ctx.has(job.request.model)
    model = _alone(ctx, job)
    if known:  # loaded already: say so anyway
        job.say(Loaded(job.request.id, model.info, 0.0, shared_tokenizer(model)))
    yield from ()


def _score(ctx: ThreadContext, job: Job) -> Iterator[Event]:
    request: Request = job.request  # type: ignore[assignment]
    model = _alone(ctx, job)
    ids, text = build_prompt(model.tokenizer, request, model.info.context_length)
    result = score(local(model), ids, job.cancel)
    if result is not None:  # (None: cancelled)
        yield Scored(request.id, text, result)


def _beam(ctx: ThreadContext, job: Job) -> Iterator[Event]:
    refuse_server(job.request.model)  # (before connecting: the refusal does not depend on the server)
    yield from run_beam(_alone(ctx, job), job.request, job.cancel, ctx.prefix)  # type: ignore[arg-type, misc]


def _multiverse(ctx: ThreadContext, job: Job) -> Iterator[Event]:
    refuse_explore(job.request.model)  # (before connecting, as a beam search)
    yield from run_multiverse(_alone(ctx, job), job.request, job.cancel, ctx.prefix)  # type: ignore[arg-type]


def _think_probes(ctx: ThreadContext, job: Job) -> Iterator[Event]:
    model = local(_alone(ctx, job))
    yield from run_probes(model, job.request, job.cancel, ctx.prefix)  # type: ignore[arg-type, misc]


def _lens(ctx: ThreadContext, job: Job) -> Iterator[Event]:
    refuse_remote(job.request.model)  # (before connecting: a server exposes no layers)
    yield from look(_alone(ctx, job), job.request, "lens", job.cancel, ctx.prefix)  # type: ignore[arg-type, misc]


def _attention(ctx: ThreadContext, job: Job) -> Iterator[Event]:
    refuse_remote(job.request.model)
    yield from look(_alone(ctx, job), job.request, "attention", job.cancel, ctx.prefix)  # type: ignore[arg-type, misc]


def _steer_vector(ctx: ThreadContext, job: Job) -> Iterator[Event]:
    refuse_remote(job.request.model)  # (a vector is read from a local model's layers)
    yield from make_from_pairs(local(_alone(ctx, job)), job.request, job.cancel)  # type: ignore[arg-type]


def _diff(ctx: ThreadContext, job: Job) -> Iterator[Event]:
    model = local(_alone(ctx, job))
    yield from run_diff(model, job.request, job.cancel, ctx.unload, ctx.load_variant)  # type: ignore[arg-type, misc]


def _together(ctx: ThreadContext, job: Job) -> Iterator[Event]:
    """Each group of requests on one model and prompt in one batch; the groups' events interleaved."""
    requests: Sequence[Request] = job.requests  # type: ignore[assignment]
    models, failed = _models_for(ctx, job, requests)
    yield from failed
    streams = []
    for group in groups(requests):  # groups on one model share its prefix cache: the first takes what it holds
        spec = group[0].model
        if spec in models:  # (else it failed to load, and said so)
            for request in group:
                check_ids(request.settings.logit_bias, models[spec].info.vocab_size)
            streams.append(guarded(group, generate_together(models[spec], group, job.cancel, ctx.prefix_of(spec))))
    yield from interleave(streams)


def _models_for(ctx: ThreadContext, job: Job, requests: Sequence[Request]) -> tuple[dict[ModelSpec, Model], list]:
    """The job's models, by spec: the main one stays where the job names it (else its first model becomes the main
    one), the others are held beside it; one that fails to load fails its requests only (the events returned)."""
    specs = list(dict.fromkeys(r.model for r in requests))
    ctx.free_held(keep=specs)
    main = ctx.main_spec if ctx.main_spec in specs else specs[0]
    models, failed = {}, []
    for spec in sorted(specs, key=lambda s: s != main):
        named = [r for r in requests if r.model == spec]
        try:
            models[spec] = ctx.ensure(job, named[0]) if spec == main else ctx.hold(job, named[0])
        except (*USER_ERRORS, Cancelled) as e:
            failed += failure(named, e)
    return models, failed


RUNNERS: dict[str, Runner] = {
    "plain": _plain,  # one request: n samples from one prefill (`decoding.generation`)
    "speculative": _speculative,  # one request with a draft model (`runs.speculative_run`)
    "together": _together,  # several requests streaming together: side-by-side columns, sweep cells
    "load": _load,  # a model load alone (the window's model bar)
    "score": _score,  # the prompt's own log-probabilities (prompt surprisal)
    "beam": _beam,  # a beam search (`runs.beam_run`)
    "multiverse": _multiverse,  # the likely continuations, best first, as a tree (`runs.multiverse_run`)
    "steer_vector": _steer_vector,  # a steering vector from contrastive prompt pairs (`decoding.steering.pairs`)
    "diff": _diff,  # a quantization diff (`decoding.quant_diff`)
    "lens": _lens,  # the logit lens at a step of a sequence (`decoding.inside`)
    "attention": _attention,  # the attention at a step of a sequence (`decoding.inside`)
    "think_probes": _think_probes,  # a thinking run's answer if it stopped thinking here (`decoding.probes`)
}


def failure(requests: Sequence[JobRequest], e: BaseException) -> Iterator[Event]:
    """What a failure says to each of the requests it ends: a `Failed` (a line a person can act on), or each of
    their runs `Finished` as "cancelled" (a download stopped)."""
    if isinstance(e, Cancelled):
        yield from (Finished(r.id, "cancelled", Metrics(), None, rid) for r in requests for rid in r.run_ids)
        return
    message = str(e) if isinstance(e, USER_ERRORS) else f"unexpected error: {type(e).__name__}: {e}"
    yield from (Failed(r.id, message, getattr(e, "opt_in", None)) for r in requests)


def guarded(requests: Sequence[Request], events: Iterator[Event]) -> Iterator[Event]:
    """`events`, ended by a `Failed` for each of `requests` where they raise (the job's other streams go on)."""
    try:
        yield from events
    except USER_ERRORS as e:
        yield from failure(requests, e)
    except Exception as e:
        log.exception("generation failed")
        yield from failure(requests, e)
