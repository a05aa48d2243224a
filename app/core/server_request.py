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
SERVER_NOTES = {
    "top_k": "sent to vLLM, llama.cpp and mlx_lm.server, off included (0; vLLM: -1); a server not recognised gets "
             "it only when on (OpenAI's own API refuses it)",
    "min_p": "sent to vLLM, llama.cpp and mlx_lm.server, off included; a server not recognised gets it only when on",
    "repetition_penalty": "sent as repetition_penalty (llama.cpp: repeat_penalty), 1 included; servers differ in "
                          "which tokens it counts (llama.cpp: the last 64 generated, mlx_lm.server: the last 20)",
    "order": "not sent: the server applies its stages in its own order (mlx_lm, llama.cpp: temperature last; "
             "vLLM: temperature first)",
    "seed": "sent: the server draws its own random numbers, so a seed repeats a server's run, not a local one",
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
    "llama.cpp": Dialect("llama.cpp", {**STANDARD, **EXTENSIONS, "repetition_penalty": "repeat_penalty"}),
    # llama-cpp-python's server, as it ships, ends a running stream when any other request arrives
    "llama-cpp-python": Dialect("llama-cpp-python", {**STANDARD, **EXTENSIONS,
                                                     "repetition_penalty": "repeat_penalty"}, interrupts_streams=True),
    "mlx_lm": Dialect("mlx_lm.server", {**STANDARD, **EXTENSIONS}),
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
            "frequency_penalty": s.frequency_penalty, "presence_penalty": s.presence_penalty}


def request_fields(settings: SamplerSettings, seed: int, max_tokens: int | None = None,
                   dialect: Dialect = OPENAI) -> dict[str, Any]:
    """The request's sampling fields for `settings` in `dialect` (what the trace records as sent)."""
    values = neutral_values(settings, dialect)
    params: dict[str, Any] = {theirs: values[ours] for ours, theirs in dialect.fields.items()}
    if not dialect.known:  # only what is on: a server that does not know a field refuses it with its own message
        off = {"top_k": dialect.top_k_off, "min_p": 0, "repetition_penalty": 1}
        params.update({theirs: values[ours] for ours, theirs in EXTENSIONS.items() if values[ours] != off[ours]})
    params.update(max_tokens=max_tokens or settings.max_tokens, seed=seed)
    if settings.stop:
        params["stop"] = list(settings.stop)
    return params
