"""What each engine can and cannot say of the app's settings, as the notes View code writes beside its lines
(`codegen.py`): which filters cut anything, whether temperature's place matters, the stages an engine lacks, the
seed's and top-p 0's meaning. Which engine has which stage is the stage table's. Text only: nothing here imports an
engine.
"""

from __future__ import annotations

from app.core.settings import SamplerSettings
from app.core.stage_table import STAGE, record_name


# what each engine can and cannot say ---------------------------------------------------------------------------
def filters(s: SamplerSettings) -> dict[str, float]:
    """The filters that cut anything, by their parameter name."""
    on = {"top_k": s.top_k if s.top_k > 0 else 0, "top_p": s.top_p if s.top_p < 1 else 0, "min_p": s.min_p}
    return {k: v for k, v in on.items() if v}


def order_matters(s: SamplerSettings) -> bool:
    """Whether temperature's place among the filters changes anything."""
    return not s.draws_top_token and s.temperature != 1 and bool(filters(s))


# the engine a snippet names -> its key in the stage table ("the server": vLLM's, with its top-k and min-p)
ENGINE_KEYS = {"mlx-lm": "mlx-lm", "transformers": "transformers", "the server": "vllm", "llama.cpp": "llama.cpp"}


def missing_note(s: SamplerSettings, engine: str) -> str | None:
    """The stages that are on here and that `engine` does not have (a stage row names the engines that have it;
    dynamic temperature, which temperature records itself as, last)."""
    key = ENGINE_KEYS[engine]
    names = [n for n in s.enabled_stages() if key not in STAGE[n].engines]
    if record_name(s, "temperature") == "dynatemp" and key not in STAGE["dynatemp"].engines:
        names.append("dynatemp")
    return f"{engine} has no {', '.join(names)}: left out here, so its tokens can differ." if names else None


def seed_note(s: SamplerSettings, engine: str) -> str | None:
    if s.draws_top_token:
        return None
    return (f"seed {s.seed}: {engine} has its own random stream: the same distribution as the app, not the same "
            "tokens (the app draws by inverse CDF with one seeded numpy uniform per step).")


def top_p_zero_note(s: SamplerSettings, engine: str) -> str | None:
    if s.top_p == 0 and s.temperature != 0:
        return f"top_p 0 keeps one token in the app, which is greedy: written as greedy here ({engine})."
    return None
