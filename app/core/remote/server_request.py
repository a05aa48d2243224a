"""One mapping from sampler settings to a server's request, per dialect.

Servers that speak OpenAI's API apply their own defaults to every sampling field a request leaves out (llama.cpp's
server: top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.1), so a setting that is off here must still be sent,
as its neutral value, under the name the server knows (llama.cpp: `repeat_penalty`; vLLM, mlx_lm.server:
`repetition_penalty`). A server is recognised from its /v1/models list; one we do not recognise gets OpenAI's own
fields and the common extensions (top_k, min_p, repetition_penalty) only when they are on, so that a server that
does not know them refuses them with its own message rather than ignoring them. The run records what it sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.settings import SamplerSettings

STANDARD = {"temperature": "temperature", "top_p": "top_p", "frequency_penalty": "frequency_penalty",
            "presence_penalty": "presence_penalty"}  # OpenAI's own sampling fields
EXTENSIONS = {"top_k": "top_k", "min_p": "min_p", "repetition_penalty": "repetition_penalty"}
XTC = {"xtc_probability": "xtc_probability", "xtc_threshold": "xtc_threshold"}
LLAMA_CPP_MORE = {**XTC, "typical_p": "typical_p", "top_n_sigma": "top_n_sigma", "dynatemp_range": "dynatemp_range",
                  "dynatemp_exponent": "dynatemp_exponent", "order": "samplers", "mirostat": "mirostat",
                  "mirostat_tau": "mirostat_tau", "mirostat_eta": "mirostat_eta", "dry_multiplier": "dry_multiplier",
                  "dry_base": "dry_base", "dry_allowed_length": "dry_allowed_length",
                  "dry_breakers": "dry_sequence_breakers", "dry_last_n": "dry_penalty_last_n"}
# our stage -> llama.cpp's sampler name in its `samplers` list (logit bias is always first there, outside the list)
LLAMA_CPP_SAMPLERS = {"dry": "dry", "top_n_sigma": "top_n_sigma", "top_k": "top_k", "typical_p": "typ_p",
                      "top_p": "top_p", "min_p": "min_p", "xtc": "xtc", "temperature": "temperature"}
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
    "top_n_sigma": "sent to llama.cpp only",
    "xtc_probability": "sent to llama.cpp and mlx_lm.server (which never removes a newline or an end token); the "
                       "server flips its own coin",
    "dynatemp_range": "sent to llama.cpp only",
    "epsilon_cutoff": "not sent: none of these servers takes it",
    "eta_cutoff": "not sent: none of these servers takes it",
    "dry_multiplier": "sent to llama.cpp only (its breakers are strings it matches across tokens; here a token "
                      "whose text holds one)",
    "mirostat_tau": "sent to llama.cpp only (mirostat 2), which then runs temperature and mirostat alone, its other "
                    "filters off",
}


@dataclass(frozen=True)
class Dialect:
    """What one kind of server takes: our setting -> its field name (each always sent), and how it behaves."""

    name: str
    fields: Mapping[str, str] = field(default_factory=dict)
    top_k_off: int = 0  # the value that turns its top-k off
    interrupts_streams: bool = False  # a new request ends a running stream: samples run one after another
    known: bool = True  # False: a server we do not recognise (extensions sent only when they are on)


OPENAI = Dialect("OpenAI-compatible", STANDARD, known=False)
DIALECTS = {
    "vllm": Dialect("vLLM", {**STANDARD, **EXTENSIONS}, top_k_off=-1),
    "llama.cpp": Dialect("llama.cpp", {**STANDARD, **EXTENSIONS, "repetition_penalty": "repeat_penalty",
                                       **LLAMA_CPP_MORE}),
    # llama-cpp-python's server, as it ships, ends a running stream when any other request arrives
    "llama-cpp-python": Dialect("llama-cpp-python", {**STANDARD, **EXTENSIONS,
                                                     "repetition_penalty": "repeat_penalty"}, interrupts_streams=True),
    "mlx_lm": Dialect("mlx_lm.server", {**STANDARD, **EXTENSIONS, **XTC}),
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
    """Our settings as the server's numbers (off as its neutral value). Always the top token is asked for as
    temperature 0: our top-p 0 keeps one token, where mlx-lm reads 0 as off and vLLM refuses it."""
    if s.draws_top_token:
        s = s.with_(temperature=0.0, top_p=1.0)
    return {"temperature": s.temperature, "top_p": s.top_p,
            "top_k": s.top_k or dialect.top_k_off, "min_p": s.min_p, "repetition_penalty": s.repetition_penalty,
            "frequency_penalty": s.frequency_penalty, "presence_penalty": s.presence_penalty,
            "typical_p": s.typical_p, "top_n_sigma": s.top_n_sigma, "xtc_probability": s.xtc_probability,
            "xtc_threshold": s.xtc_threshold, "dynatemp_range": s.dynatemp_range,
            "dynatemp_exponent": s.dynatemp_exponent, "order": llama_cpp_samplers(s),
            "mirostat": 2 if s.mirostat_tau > 0 else 0, "mirostat_tau": s.mirostat_tau, "mirostat_eta": s.mirostat_eta,
            "dry_multiplier": s.dry_multiplier, "dry_base": s.dry_base, "dry_allowed_length": s.dry_allowed_length,
            "dry_breakers": list(s.dry_breakers), "dry_last_n": -1}


def llama_cpp_samplers(s: SamplerSettings) -> list[str]:
    """Our order as llama.cpp's `samplers` list: its penalties first (as ours run first), then the stages that are
    on and that it has (typical-p is its `typ_p`); a sampler left out of the list is off there."""
    return ["penalties", *(LLAMA_CPP_SAMPLERS[n] for n in s.enabled_stages() if n in LLAMA_CPP_SAMPLERS)]


def logit_bias(s: SamplerSettings) -> dict[str, float]:
    """The logit bias as OpenAI's API takes it (and vLLM, llama.cpp, mlx_lm.server): token id text -> value."""
    return {str(tid): value for tid, value in s.logit_bias}


def request_fields(settings: SamplerSettings, seed: int, max_tokens: int | None = None,
                   dialect: Dialect = OPENAI) -> dict[str, Any]:
    """The request's sampling fields for `settings` in `dialect` (what the trace records as sent)."""
    values = neutral_values(settings, dialect)
    params: dict[str, Any] = {theirs: values[ours] for ours, theirs in dialect.fields.items()}
    if not dialect.known:  # only what is on: a server that does not know a field refuses it with its own message
        off = {"top_k": dialect.top_k_off, "min_p": 0, "repetition_penalty": 1}
        params.update({theirs: values[ours] for ours, theirs in EXTENSIONS.items() if values[ours] != off[ours]})
    params.update(max_tokens=max_tokens or settings.max_tokens, seed=seed)
    if settings.logit_bias:  # every dialect takes it (OpenAI's own field); sent only when set
        params["logit_bias"] = logit_bias(settings)
    if settings.stop:
        params["stop"] = list(settings.stop)
    return params
