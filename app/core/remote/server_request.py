"""One mapping from sampler settings to a server's request, per dialect.

Servers that speak OpenAI's API apply their own defaults to every sampling field a request leaves out (llama.cpp's
server: top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.1), so a setting that is off here must still be sent,
as its neutral value, under the name the server knows (llama.cpp: `repeat_penalty`; vLLM, mlx_lm.server:
`repetition_penalty`). A server is recognised from its /v1/models list; one we do not recognise gets OpenAI's own
fields and the common extensions (top_k, min_p, repetition_penalty) only when they are on, so that a server that
does not know them refuses them with its own message rather than ignoring them. The run records what it sent;
View code writes the same mapping. Which stages each engine takes, and the value it reads as off where that is not
ours (vLLM's top-k -1, llama.cpp's top-n-sigma -1), are the stage table's (`app.core.stage_table`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.record.spans import NO_THINKING
from app.core.remote.server_constraint import ServerConstraintError, constraint_fields
from app.core.settings import SamplerSettings
from app.core.stage_table import ROWS, STAGE, engine_stages


def stage_fields(engine: str) -> dict[str, str]:
    """Our settings -> their request fields, for the stages `engine` has (a row of the stage table names it): each
    under our name (logit bias apart: sent only when set)."""
    return {f: f for row in engine_stages(engine) if row.name != "logit_bias" for f in row.fields}


PENALTIES = {"frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty"}  # OpenAI's own
STANDARD = {**stage_fields("openai"), **PENALTIES}  # OpenAI's own sampling fields
# the common extensions: what vLLM takes beyond them (top-k, min-p) and the repetition penalty
EXTENSIONS = {**{f: f for f in stage_fields("vllm") if f not in STANDARD}, "repetition_penalty": "repetition_penalty"}
# llama.cpp's own names (ours -> its), and what it takes beyond its stages' settings: its sampler list (our order),
# mirostat's mode (2 when on) and how far back DRY looks
LLAMA_CPP_NAMES = {"repetition_penalty": "repeat_penalty", "dry_breakers": "dry_sequence_breakers"}
LLAMA_CPP_MORE = {"order": "samplers", "mirostat": "mirostat", "dry_last_n": "dry_penalty_last_n",
                  "think_budget": "reasoning_budget"}  # (its budget: -1 unlimited, 0 no thinking)
SERVER_NOTES = {
    "top_k": "sent to vLLM, llama.cpp and mlx_lm.server, off included (0; vLLM: -1); a server not recognised gets "
             "it only when on (OpenAI's own API refuses it)",
    "min_p": "sent to vLLM, llama.cpp and mlx_lm.server, off included; a server not recognised gets it only when on",
    "repetition_penalty": "sent as repetition_penalty (llama.cpp: repeat_penalty), 1 included; servers differ in "
                          "which tokens it counts (llama.cpp: the last 64 generated, mlx_lm.server: the last 20)",
    "order": "sent to llama.cpp as its samplers list (penalties first); other servers apply their stages in "
             "their own order (mlx_lm: top-p, min-p, XTC, top-k, temperature; vLLM: temperature first)",
    "seed": "sent: the server draws its own random numbers, so a seed repeats a server's run, not a local one",
}
MORE_SERVER_NOTES = {  # the same, for the settings folded under "More samplers"
    "typical_p": "sent to llama.cpp only (vLLM, mlx_lm.server and OpenAI do not take it)",
    "top_n_sigma": "sent to llama.cpp only, off as -1 (its own off: there 0 may run top-n-sigma alone)",
    "xtc_probability": "sent to llama.cpp and mlx_lm.server (which never removes a newline or an end token); the "
                       "server flips its own coin",
    "dynatemp_range": "sent to llama.cpp only",
    "epsilon_cutoff": "not sent: none of these servers takes it",
    "eta_cutoff": "not sent: none of these servers takes it",
    "dry_multiplier": "sent to llama.cpp only (its breakers are strings it matches across tokens; here a token "
                      "whose text holds one)",
    "mirostat_tau": "sent to llama.cpp only (mirostat 2), which then runs temperature and mirostat alone, its other "
                    "filters off",
    "think_budget": "sent to llama.cpp only, as reasoning_budget (off: -1, its unlimited; thinking off: 0); a soft "
                    "budget is not sent (llama.cpp's budget is hard). Thinking off is sent to vLLM and llama.cpp's "
                    "chat as chat_template_kwargs {enable_thinking: false}",
}


@dataclass(frozen=True)
class Dialect:
    """What one kind of server takes: our setting -> its field name (each always sent), and how it behaves."""

    name: str
    fields: Mapping[str, str] = field(default_factory=dict)
    engine: str = "openai"  # whose off values it reads (a key of a stage row's `off`)
    interrupts_streams: bool = False  # a new request ends a running stream: samples run one after another
    known: bool = True  # False: a server we do not recognise (extensions sent only when they are on)
    constraint: str = "openai"  # how it takes a constraint (a style of `server_constraint`; "none": it takes none)
    template_kwargs: bool = False  # its chat route takes chat_template_kwargs (thinking off: enable_thinking false)


def _llama_cpp_fields() -> dict[str, str]:
    ours = {**STANDARD, **EXTENSIONS, **stage_fields("llama.cpp"), **LLAMA_CPP_MORE}
    return {k: LLAMA_CPP_NAMES.get(k, v) for k, v in ours.items()}


OPENAI = Dialect("OpenAI-compatible", STANDARD, known=False)
DIALECTS = {
    "vllm": Dialect("vLLM", {**STANDARD, **EXTENSIONS}, "vllm", constraint="vllm", template_kwargs=True),
    "llama.cpp": Dialect("llama.cpp", _llama_cpp_fields(), "llama.cpp", constraint="llama.cpp", template_kwargs=True),
    # llama-cpp-python's server, as it ships, ends a running stream when any other request arrives
    "llama-cpp-python": Dialect("llama-cpp-python", {**STANDARD, **EXTENSIONS, "repetition_penalty": "repeat_penalty"},
                                "llama.cpp", interrupts_streams=True, constraint="llama-cpp-python"),
    "mlx_lm": Dialect("mlx_lm.server", {**STANDARD, **EXTENSIONS, **stage_fields("mlx-lm")}, "mlx-lm",
                      constraint="none"),
    "openai": OPENAI,
}


def detect(models: Sequence[Mapping[str, Any]]) -> Dialect:
    """The dialect of a server from its /v1/models entries (`owned_by` names most servers)."""
    owners = {m.get("owned_by") for m in models}
    if "vllm" in owners:
        return DIALECTS["vllm"]
    if "llamacpp" in owners:
        return DIALECTS["llama.cpp"]
    if "me" in owners:  # llama-cpp-python's server
        return DIALECTS["llama-cpp-python"]
    if models and all("owned_by" not in m and "created" in m for m in models):  # mlx_lm.server
        return DIALECTS["mlx_lm"]
    return OPENAI


def neutral_values(s: SamplerSettings, dialect: Dialect) -> dict[str, Any]:
    """Our settings as the server's numbers (off as its neutral value: ours, or the one its engine reads as off).
    Always the top token is asked for as temperature 0: our top-p 0 keeps one token, where mlx-lm reads 0 as off
    and vLLM refuses it."""
    if s.draws_top_token:
        s = s.with_(temperature=0.0, top_p=1.0)
    values = {f: _json(getattr(s, f)) for row in ROWS for f in row.fields}
    values |= {row.fields[0]: row.off[dialect.engine] for row in ROWS
               if dialect.engine in row.off and not row.is_on(s)}
    return {**values, "order": llama_cpp_samplers(s), "mirostat": 2 if s.mirostat_tau > 0 else 0, "dry_last_n": -1,
            "think_budget": 0 if not s.think else s.think_budget if s.think_budget > 0 and not s.think_soft else -1}


def _json(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def llama_cpp_samplers(s: SamplerSettings) -> list[str]:
    """Our order as llama.cpp's `samplers` list: its penalties first (as ours run first), then the stages that are
    on and that have an entry there (typical-p is its `typ_p`); a sampler left out of the list is off there."""
    names = (STAGE[n].engines.get("llama.cpp") for n in s.enabled_stages())
    return ["penalties", *(name for name in names if name)]


def logit_bias(s: SamplerSettings) -> dict[str, float]:
    """The logit bias as OpenAI's API takes it (and vLLM, llama.cpp, mlx_lm.server): token id text -> value."""
    return {str(tid): value for tid, value in s.logit_bias}


def request_fields(settings: SamplerSettings, seed: int, max_tokens: int | None = None,
                   dialect: Dialect = OPENAI, chat: bool = False) -> dict[str, Any]:
    """The request's sampling fields for `settings` in `dialect` (what the trace records as sent; `chat`: for the
    chat route). A constraint the dialect cannot take raises `ServerConstraintError` (one line)."""
    values = neutral_values(settings, dialect)
    params: dict[str, Any] = {theirs: values[ours] for ours, theirs in dialect.fields.items()}
    if not dialect.known:  # only what is on: a server that does not know a field refuses it with its own message
        on = {row.fields[0] for row in ROWS if row.chain and row.is_on(settings)}
        on |= {"repetition_penalty"} if settings.repetition_penalty != 1 else set()
        params.update({theirs: values[ours] for ours, theirs in EXTENSIONS.items() if ours in on})
    params.update(max_tokens=max_tokens or settings.max_tokens, seed=seed)
    if settings.logit_bias:  # every dialect takes it (OpenAI's own field); sent only when set
        params["logit_bias"] = logit_bias(settings)
    if settings.stop:
        params["stop"] = list(settings.stop)
    if chat and not settings.think and dialect.template_kwargs:
        params["chat_template_kwargs"] = dict(NO_THINKING)
    return {**params, **constraint_fields(settings.constraint, dialect.constraint, dialect.name, chat)}


def without_refused(settings: SamplerSettings, dialect: Dialect = OPENAI,
                    chat: bool = False) -> tuple[SamplerSettings, str | None]:
    """`settings` as `dialect` can take them (a constraint it refuses set aside) and the refusal's line, if any:
    for code written for that server, which says what it leaves out rather than failing."""
    try:
        constraint_fields(settings.constraint, dialect.constraint, dialect.name, chat)
    except ServerConstraintError as e:
        return settings.with_(constraint=None), str(e)
    return settings, None
