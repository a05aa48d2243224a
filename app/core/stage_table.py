"""The stage table: one row per sampler stage, read by every part that knows a stage. Plain data: no app imports.

A row gives the stage's name (in chains, records and files), its label as people read it ("top-k"), the settings it
reads, when it is on, whether its cut depends on the whole vocabulary, what each engine calls it, how `describe`
writes it and why it cut a candidate (the step chart's tooltip). The function that builds it is the sampler's,
under the same name (`sampler.stages.BUILDERS`). The engines' own orders and the order box's names are here too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.settings import SamplerSettings

ANY_VOCAB = 2**62  # a vocabulary no top-k reaches: "on" for any model


@dataclass(frozen=True)
class StageRow:
    """One stage. `engines`: what each engine that has it calls it — llama.cpp its `samplers` entry (None: set apart
    from that list), mlx-lm its name in mlx_lm.sample_utils, transformers its logits processor, vLLM and OpenAI their
    request field. `off`: the value of its first setting that an engine reads as off, where it is not ours."""

    name: str
    label: str
    fields: tuple[str, ...]  # the settings it reads
    on: Callable[[SamplerSettings, int], bool]  # (settings, vocabulary size): whether it runs
    # (its recorded threshold, the same formatted): why it cut a candidate; a stage that shifts logits rather than
    # cutting at a line (DRY, logit bias, dynamic temperature) cuts only a logit it leaves at -inf
    why: Callable[[float, str], str]
    says: Callable[[SamplerSettings], str] | None = None  # how `describe` writes it (when on; always when `main`)
    engines: Mapping[str, str | None] = field(default_factory=dict)
    off: Mapping[str, float] = field(default_factory=dict)
    whole: bool = False  # its cut depends on the whole vocabulary's distribution (a re-sample needs the model)
    few: bool = False  # it keeps a fixed few top tokens: what follows sees only those (the recorded top suffices)
    main: bool = False  # one of the four main samplers, always named by `describe`
    chain: bool = True  # False: a name only records hold (penalties, always first; what temperature records as)

    def is_on(self, s: SamplerSettings, vocab: int = ANY_VOCAB) -> bool:
        return self.on(s, vocab)


def _mu(v: float) -> str:
    """Mirostat's μ from its recorded line 2^-μ."""
    return f"{-math.log2(v):.3g}" if v > 0 else "?"


def _off_or(label: str, value: float, on: bool) -> str:
    return (f"{label} {value}" if isinstance(value, int) else f"{label} {value:g}") if on else f"{label} off"


def _grammar(s: SamplerSettings) -> str:
    c = s.constraint
    assert c is not None
    return f"constrained to {CONSTRAINT_WORDS[c.kind]}" + (", checked after the draw" if c.place == "on_reject" else "")


CONSTRAINT_WORDS = {"json_schema": "a JSON schema", "json_object": "any JSON object", "regex": "a regular expression",
                    "lark": "a Lark grammar", "gbnf": "a GBNF grammar", "choices": "a list of choices"}


def _steering(s: SamplerSettings) -> str:
    st = s.steering
    assert st is not None
    layers = ",".join(map(str, st.layers)) or "every layer of the file"
    return f"steering {st.path.replace(chr(92), '/').rsplit('/', 1)[-1]} ×{st.strength:g} at {layers}"


ROWS: tuple[StageRow, ...] = (
    StageRow("penalties", "penalties", ("repetition_penalty", "frequency_penalty", "presence_penalty"),
             on=lambda s, v: s.uses_penalties, chain=False, why=lambda v, t: "",
             says=lambda s: f"penalties: repetition {s.repetition_penalty:g}, frequency {s.frequency_penalty:g}, "
                            f"presence {s.presence_penalty:g}"),
    StageRow("logit_bias", "logit bias", ("logit_bias",),
             engines={"llama.cpp": None, "mlx-lm": "logit_bias", "transformers": "SequenceBiasLogitsProcessor",
                      "vllm": "logit_bias", "openai": "logit_bias"},
             on=lambda s, v: any(value != 0 and tid < v for tid, value in s.logit_bias),
             says=lambda s: f"logit bias on {sum(1 for _, v in s.logit_bias if v)} token(s)",
             why=lambda v, t: "its logit bias left its logit at -inf"),
    StageRow("dry", "DRY", ("dry_multiplier", "dry_base", "dry_allowed_length", "dry_breakers"),
             on=lambda s, v: s.dry_multiplier > 0, engines={"llama.cpp": "dry"},
             says=lambda s: f"DRY ×{s.dry_multiplier:g}, base {s.dry_base:g}, allowed {s.dry_allowed_length}",
             why=lambda v, t: "it would extend a repeat so long that DRY's penalty is infinite"),
    # a thinking model's budget (`sampler.think_budget`): soft, this stage raises the closing marker's logit as the
    # budget nears (its record's threshold: the logit it added); hard, no stage: the marker is a forced step. No
    # engine runs it in its chain; llama.cpp's server takes a budget beside it (`reasoning_budget`, server_request)
    StageRow("think_budget", "think budget", ("think_budget", "think_soft"), on=lambda s, v: s.soft_budget,
             says=lambda s: f"think budget {s.think_budget} (soft)",
             why=lambda v, t: "the think budget left its logit at -inf"),
    StageRow("temperature", "temperature", ("temperature",), on=lambda s, v: True, main=True,
             engines={"llama.cpp": "temperature", "mlx-lm": "temp", "transformers": "TemperatureLogitsWarper",
                      "vllm": "temperature", "openai": "temperature"},
             says=lambda s: "greedy" if s.greedy else f"temperature {s.temperature:g}", why=lambda v, t: ""),
    StageRow("greedy", "greedy", (), on=lambda s, v: s.greedy, chain=False, few=True,
             why=lambda v, t: "greedy (temperature 0) keeps only the most probable candidate"),
    # llama.cpp's temperature sampler takes the range: it has no stage of its own there
    StageRow("dynatemp", "dynamic temperature", ("dynatemp_range", "dynatemp_exponent"), chain=False, whole=True,
             on=lambda s, v: s.dynatemp_range > 0, engines={"llama.cpp": None},
             says=lambda s: f"dynamic temperature ±{s.dynatemp_range:g}, exponent {s.dynatemp_exponent:g}",
             why=lambda v, t: f"dynamic temperature (T {v:.3g} here) left its logit at -inf"),
    # llama.cpp reads -1 as off (its default): some versions run top-k, temperature and top-n-sigma in place of the
    # whole chain for any value ≥ 0, 0 included
    StageRow("top_n_sigma", "top-n-sigma", ("top_n_sigma",), on=lambda s, v: s.top_n_sigma > 0, whole=True,
             engines={"llama.cpp": "top_n_sigma"}, off={"llama.cpp": -1},
             says=lambda s: f"top-n-sigma {s.top_n_sigma:g}",
             why=lambda v, t: f"its probability is below top-n-sigma's line ({t}: n standard deviations of the "
                              "logits under the top one)"),
    StageRow("top_k", "top-k", ("top_k",), on=lambda s, v: 0 < s.top_k < v, few=True, main=True,
             engines={"llama.cpp": "top_k", "mlx-lm": "top_k", "transformers": "TopKLogitsWarper", "vllm": "top_k"},
             off={"vllm": -1}, says=lambda s: _off_or("top-k", s.top_k, s.top_k > 0),
             why=lambda v, t: f"its probability is below the k-th candidate's ({t})"),
    StageRow("typical_p", "typical-p", ("typical_p",), on=lambda s, v: s.typical_p < 1, whole=True,
             engines={"llama.cpp": "typ_p", "transformers": "TypicalLogitsWarper"},
             says=lambda s: f"typical-p {s.typical_p:g}",
             why=lambda v, t: f"its surprise is further from the entropy than the tokens that already hold "
                              f"typical-p's {t} of the probability"),
    StageRow("top_p", "top-p", ("top_p",), on=lambda s, v: s.top_p < 1, whole=True, main=True,
             engines={"llama.cpp": "top_p", "mlx-lm": "top_p", "transformers": "TopPLogitsWarper", "vllm": "top_p",
                      "openai": "top_p"},
             says=lambda s: _off_or("top-p", s.top_p, s.top_p < 1),
             why=lambda v, t: f"the candidates before it already hold top-p's {t} of the probability"),
    StageRow("min_p", "min-p", ("min_p",), on=lambda s, v: s.min_p > 0, main=True,
             engines={"llama.cpp": "min_p", "mlx-lm": "min_p", "transformers": "MinPLogitsWarper", "vllm": "min_p"},
             says=lambda s: _off_or("min-p", s.min_p, s.min_p > 0),
             why=lambda v, t: f"its probability is below min-p's line ({t}: min-p × the top probability)"),
    StageRow("epsilon_cutoff", "epsilon cutoff", ("epsilon_cutoff",), on=lambda s, v: s.epsilon_cutoff > 0,
             whole=True, engines={"transformers": "EpsilonLogitsWarper"},
             says=lambda s: f"epsilon {s.epsilon_cutoff:g}",
             why=lambda v, t: f"its probability is below epsilon's cutoff ({t})"),
    StageRow("eta_cutoff", "eta cutoff", ("eta_cutoff",), on=lambda s, v: s.eta_cutoff > 0, whole=True,
             engines={"transformers": "EtaLogitsWarper"}, says=lambda s: f"eta {s.eta_cutoff:g}",
             why=lambda v, t: f"its probability is below eta's cutoff ({t}: min(ε, √ε · e^-entropy))"),
    StageRow("xtc", "XTC", ("xtc_probability", "xtc_threshold"), on=lambda s, v: s.xtc_probability > 0, whole=True,
             engines={"llama.cpp": "xtc", "mlx-lm": "xtc"},
             says=lambda s: f"XTC threshold {s.xtc_threshold:g}, probability {s.xtc_probability:g}",
             why=lambda v, t: f"XTC's coin fired and it is more likely than {t}, the least likely candidate above "
                              "the threshold (kept)"),
    # llama.cpp runs mirostat in place of its chain (its `mirostat` field, 2), not as a `samplers` entry
    StageRow("mirostat", "mirostat v2", ("mirostat_tau", "mirostat_eta"), on=lambda s, v: s.mirostat_tau > 0,
             whole=True, engines={"llama.cpp": None},
             says=lambda s: f"mirostat τ {s.mirostat_tau:g}, η {s.mirostat_eta:g}",
             why=lambda v, t: f"its surprise is above mirostat's μ = {_mu(v)} (probability below {t})"),
    # a constraint (`SamplerSettings.constraint`, not a number: no field here) compiled to a grammar; its place, not
    # the order, says where it runs: first (after the penalties), or after the draw, redrawing only what it refuses.
    # llama.cpp takes it beside its samplers (`grammar`, `json_schema`), vLLM as structured outputs (once guided_*),
    # OpenAI as response_format
    StageRow("grammar", "grammar", (), on=lambda s, v: s.constraint is not None, chain=False, whole=True,
             engines={"llama.cpp": None, "vllm": "structured_outputs", "openai": "response_format"},
             says=_grammar, why=lambda v, t: "cut by the grammar: it cannot come next here"),
    # a steering vector (`SamplerSettings.steering`, not a number: no field here) acts in the forward, before the
    # logits: a record's `steer` (not a stage row) says what it did against the unsteered twin (`decoding.steering`);
    # in no chain
    StageRow("steering", "steering", (), on=lambda s, v: s.steering is not None and s.steering.strength != 0,
             chain=False, says=_steering, why=lambda v, t: ""),
)
STAGE = {row.name: row for row in ROWS}
RECORD_NAMES = tuple(STAGE)  # every name a step's record may give a stage
STAGES = tuple(row.name for row in ROWS if row.chain)  # every stage an order can name, in the default order


def label(name: str) -> str:
    """A stage as people read it ("top-k"); a name not in the table, as it is with dashes."""
    return STAGE[name].label if name in STAGE else name.replace("_", "-")


def why(name: str, threshold: float, shown: str) -> str:
    """Why stage `name` cut a candidate, with its recorded `threshold` (`shown`: the same as the view writes it)."""
    return STAGE[name].why(threshold, shown) if name in STAGE else ""


def record_name(s: SamplerSettings, name: str) -> str:
    """The name stage `name` records itself under with settings `s`: temperature is greedy at 0, and dynatemp
    with a range; every other stage, its own."""
    if name != "temperature":
        return name
    return "greedy" if s.greedy else "dynatemp" if s.dynatemp_range > 0 else name


# Where each old order puts the stages: DRY first and mirostat last in both, as in llama.cpp (... temperature, then
# mirostat); "temperature" stands for greedy and dynamic temperature too.
_FILTERS = tuple(n for n in STAGES if n not in ("logit_bias", "dry", "temperature", "mirostat"))
ORDER_CHAINS = {
    "temperature-first": STAGES,
    "temperature-last": ("logit_bias", "dry", *_FILTERS, "temperature", "mirostat"),
}


@dataclass(frozen=True)
class Engine:
    """An engine's own order (the stages it has, as it runs them) and how the order box names it."""

    label: str
    chain: tuple[str, ...]


# Each engine's order, from its source: llama.cpp's common_params_sampling.samplers (logit bias before the chain);
# mlx-lm's make_sampler (top-p, min-p, XTC, top-k, then temperature in categorical_sampling, logit bias among
# make_logits_processors); transformers' generate (_get_logits_processor: temperature, top-k, top-p, min-p, typical,
# epsilon, eta); vLLM (temperature, then min-p, then top-k / top-p); OpenAI (temperature, top-p). Stages an engine
# lacks follow its own, in the default order. An engine has a stage exactly when the stage's row names it.
ENGINES = {
    "llama.cpp": Engine("llama.cpp's chain", ("logit_bias", "dry", "top_n_sigma", "top_k", "typical_p", "top_p",
                                              "min_p", "xtc", "temperature", "mirostat")),
    "mlx-lm": Engine("mlx-lm's make_sampler", ("logit_bias", "top_p", "min_p", "xtc", "top_k", "temperature")),
    "transformers": Engine("transformers' generate", ("logit_bias", "temperature", "top_k", "top_p", "min_p",
                                                      "typical_p", "epsilon_cutoff", "eta_cutoff")),
    "vllm": Engine("vLLM's", ("logit_bias", "temperature", "min_p", "top_k", "top_p")),
    "openai": Engine("OpenAI's", ("logit_bias", "temperature", "top_p")),
}
ENGINE_CHAINS = {name: e.chain for name, e in ENGINES.items()}
# the order box: an old order or an engine's (each a value `settings.parse_order` reads), as people read it
ORDER_LABELS = {"temperature-first": "Temperature first", "temperature-last": "Temperature last",
                **{name: e.label for name, e in ENGINES.items()}}


def engine_stages(engine: str) -> tuple[StageRow, ...]:
    """The rows of the stages `engine` has (a key of `ENGINES`), in the table's order."""
    return tuple(row for row in ROWS if engine in row.engines)
