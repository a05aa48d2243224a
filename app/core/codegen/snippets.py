"""Code that reproduces the panel's settings and prompt elsewhere: mlx-lm (`make_sampler`,
`make_logits_processors`), transformers (`generate`), an OpenAI-compatible server (the JSON body, the Python
client, curl; with log-probabilities) and llama.cpp's server (`/completion`). Where an engine cannot express a
setting exactly (stage order, top-p 0, min-p, the penalties' definitions, the seed's random stream) a comment on
that line says so; where a few lines of the engine's own API make it exact, they are written out instead.
Text only: nothing here imports or runs an engine.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass

from app.core.codegen.engine_notes import filters, missing_note, order_matters, seed_note, top_p_zero_note
from app.core.events import Message
from app.core.models.sources import BUILTIN_NAME, BUILTIN_PATH, is_builtin
from app.core.remote.server_request import DIALECTS, EXTENSIONS, request_fields, without_refused
from app.core.settings import SamplerSettings, StageOrder
from app.core.stage_table import STAGE

WIDTH = 100  # of a comment line


@dataclass(frozen=True)
class CodeRequest:
    settings: SamplerSettings
    prompt: str = ""
    messages: tuple[Message, ...] | None = None  # chat mode
    model: str = BUILTIN_NAME  # "builtin", a local folder or a hub id
    rendered: str | None = None  # the prompt as the model sees it (chat template applied), for llama.cpp
    top_logprobs: int = 20
    openai_url: str = "http://localhost:8000/v1"
    llama_url: str = "http://localhost:8080"

    @property
    def model_ref(self) -> str:
        return str(BUILTIN_PATH) if is_builtin(self.model) else self.model

    @property
    def seed(self) -> int:
        return self.settings.seed if self.settings.seed is not None else 0


@dataclass(frozen=True)
class Snippet:
    title: str
    language: str  # "python", "bash" or "json"
    code: str
    notes: tuple[str, ...] = ()  # JSON has no comments: what it cannot express, shown beside it


def _comment(note: str | None, indent: str = "", mark: str = "#") -> list[str]:
    if not note:
        return []
    return [f"{indent}{mark} {line}" for line in textwrap.wrap(note, WIDTH - len(indent))]


Arg = tuple[str, str | None]  # an argument as written ("name=value" or "**kwargs"), and its comment


def _kw(name: str, value: str, note: str | None = None) -> Arg:
    return f"{name}={value}", note


def _call(head: str, args: list[Arg], indent: str = "    ") -> list[str]:
    """`head(` then one argument per line, each after its comment; `)`."""
    lines = [f"{head}("]
    for text, note in args:
        lines += [*_comment(note, indent), f"{indent}{text},"]
    return [*lines, ")"]


def _messages(req: CodeRequest) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in req.messages or ()]


def _stop_lines(s: SamplerSettings, engine: str) -> list[str]:
    if not s.stop:
        return []
    return [*_comment(f"stop strings ({engine}): the text is cut at the first one, where the app stops (and "
                      "hides it)."),
            f"for stop in {list(s.stop)!r}:", "    text = text.split(stop, 1)[0]"]


def _prompt_lines(req: CodeRequest, var: str, encode: str) -> list[str]:
    """`var` = the prompt tokenized as the app does: the text with the tokenizer's special tokens, or the chat
    rendered through the model's template and encoded as it is."""
    if req.messages is None:
        return [f"prompt = {req.prompt!r}", f"{var} = {encode.format('prompt', '')}"]
    off = "" if req.settings.think else ", enable_thinking=False"  # (thinking off: the template's switch)
    return [f"messages = {_messages(req)!r}",
            f"text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False{off})",
            f"{var} = {encode.format('text', ', add_special_tokens=False')}"]


# mlx-lm -----------------------------------------------------------------------------------------------------------
def mlx_lm(req: CodeRequest) -> Snippet:
    s = req.settings
    lines = ["# Logit Lab's settings and prompt in mlx-lm (pip install mlx-lm).", "import mlx.core as mx",
             "from mlx_lm import load", "from mlx_lm.generate import generate_step",
             "from mlx_lm.sample_utils import make_logits_processors, "
             "make_sampler", "", f"model, tokenizer = load({req.model_ref!r})",
             *_prompt_lines(req, "prompt_ids", "tokenizer.encode({0}{1})"), "n_prompt = len(prompt_ids)",
             f"max_tokens = {s.max_tokens}", ""]
    if not s.draws_top_token:
        lines += [*_comment(seed_note(s, "mlx")), f"mx.random.seed({s.seed})"]
    lines += [*_mlx_sampler(s), "", *_mlx_processors(s), "",
              *_comment("The tokens one by one, decoded at the end as the app shows them (mlx-lm's generate() "
                        "drops a leading space of the output)."),
              "tokens = []",
              "for token, _ in generate_step(mx.array(prompt_ids), model, max_tokens=max_tokens, sampler=sampler,",
              "                              logits_processors=logits_processors):",
              "    if token in tokenizer.eos_token_ids:",
              "        break",
              "    tokens.append(token)",
              "text = tokenizer.decode(tokens)", *_stop_lines(s, "mlx-lm's generate_step() has none"),
              "print(text)"]
    return Snippet("mlx-lm", "python", "\n".join(lines) + "\n")


def _mlx_sampler(s: SamplerSettings) -> list[str]:
    if s.draws_top_token:
        return [*_comment(top_p_zero_note(s, "mlx-lm reads top_p 0 as off")), "sampler = make_sampler(temp=0.0)"]
    f = filters(s)
    first = s.order == StageOrder.TEMPERATURE_FIRST and order_matters(s)
    temp_note = ("temperature first: mlx-lm applies temperature after its filters, so a logits processor "
                 "(below) divides by it before them and the sampler draws at temp 1.0." if first else None)
    args = [_kw("temp", "1.0" if first else repr(s.temperature), temp_note)]
    if "top_p" in f:
        args.append(_kw("top_p", repr(s.top_p), "mlx-lm applies top-p to the whole distribution, before top-k; "
                        "the app applies it after top-k, renormalized: with both on, the kept set can differ."
                        if "top_k" in f else None))
    if "min_p" in f:
        args.append(_kw("min_p", repr(s.min_p)))
    if "top_k" in f:
        args.append(_kw("top_k", str(s.top_k)))
    if s.xtc_probability > 0:
        args += [_kw("xtc_probability", repr(s.xtc_probability)), _kw("xtc_threshold", repr(s.xtc_threshold)),
                 _kw("xtc_special_tokens", "[]", "the app's XTC may remove any token (mlx_lm.server spares a "
                     "newline and the end tokens); mlx-lm flips XTC's coin with its own random stream")]
    return [*_comment(missing_note(s, "mlx-lm")), *_call("sampler = make_sampler", args)]


def _mlx_processors(s: SamplerSettings) -> list[str]:
    lines, names = [], []
    if s.logit_bias:
        lines += _call("bias = make_logits_processors", [_kw("logit_bias", repr(dict(s.logit_bias)))])
        names.append("*bias")
    if s.repetition_penalty != 1:
        lines += _call("repetition = make_logits_processors", [
            _kw("repetition_penalty", repr(s.repetition_penalty)),
            _kw("repetition_context_size", "n_prompt + max_tokens",
                "the app's repetition penalty sees the whole prompt and output (mlx-lm's default: the last 20)")])
        names.append("*repetition")
    if s.frequency_penalty or s.presence_penalty:
        lines += ["", *_comment("Frequency and presence as the app and OpenAI define them, over the generated "
                                "tokens only: make_logits_processors' own count the prompt too (in a window)."),
                  "def openai_penalties(tokens, logits):  # tokens: the prompt, then what was generated",
                  "    counts = mx.zeros(logits.shape[-1]).at[tokens[n_prompt:]].add(1.0)",
                  f"    return logits - counts * {s.frequency_penalty!r} - (counts > 0) * {s.presence_penalty!r}",
                  ""]
        names.append("openai_penalties")
    if s.order == StageOrder.TEMPERATURE_FIRST and order_matters(s):
        lines += ["", "def temperature_first(tokens, logits):", f"    return logits / {s.temperature!r}", ""]
        names.append("temperature_first")
    return [*lines, f"logits_processors = [{', '.join(names)}]"]


# transformers -----------------------------------------------------------------------------------------------------
def _warper(name: str) -> str:
    """transformers' logits processor for stage `name` (the stage table's name for it)."""
    return STAGE[name].engines["transformers"]


def transformers(req: CodeRequest) -> Snippet:
    s = req.settings
    last = s.order == StageOrder.TEMPERATURE_LAST and order_matters(s)
    lines = ["# Logit Lab's settings and prompt in transformers (pip install transformers torch).", "import torch",
             *_wrapped("from transformers import ", _hf_imports(s, last)), "", f"model_id = {req.model_ref!r}",
             "tokenizer = AutoTokenizer.from_pretrained(model_id)",
             *_comment("float32, as the app runs on a CPU: lower precisions round differently"),
             "model = AutoModelForCausalLM.from_pretrained(model_id, dtype=torch.float32)",
             *_prompt_lines(req, "inputs", 'tokenizer({0}, return_tensors="pt"{1})'),
             'n_prompt = inputs["input_ids"].shape[1]', ""]
    if not s.draws_top_token:
        lines += [*_comment(seed_note(s, "torch")), f"torch.manual_seed({s.seed})"]
    args = [("**inputs", None), *_hf_args(s, last), *_hf_processors(s, last)]
    lines += [*_hf_penalty_class(s), *_call("out = model.generate", args),
              "text = tokenizer.decode(out[0, n_prompt:], skip_special_tokens=True)",
              *_stop_lines(s, "generate()'s stop_strings would keep them"), "print(text)"]
    return Snippet("transformers", "python", "\n".join(lines) + "\n")


def _hf_imports(s: SamplerSettings, last: bool) -> list[str]:
    names = {"AutoModelForCausalLM", "AutoTokenizer"}
    if s.frequency_penalty or s.presence_penalty:
        names |= {"LogitsProcessor", "LogitsProcessorList"}
    if last:
        names |= {"LogitsProcessorList", _warper("temperature"), *(_warper(k) for k in filters(s))}
    return sorted(names)


def _hf_args(s: SamplerSettings, last: bool) -> list[Arg]:
    args = [_kw("max_new_tokens", str(s.max_tokens))]
    if s.draws_top_token:
        return [*args, _kw("do_sample", "False", top_p_zero_note(s, "do_sample=False"))]
    args += [_kw("do_sample", "True", missing_note(s, "transformers")), *_hf_more(s)]
    if last:
        note = ("temperature last: generate() always applies temperature before its filters, so its own are off "
                "here and the filters, then temperature, are passed as processors in the app's order.")
        return [*args, _kw("temperature", "1.0", note), _kw("top_k", "0"), _kw("top_p", "1.0")]
    args += [_kw("temperature", repr(s.temperature)),
             _kw("top_k", str(s.top_k), None if s.top_k else "0: off (generate()'s default is 50)"),
             _kw("top_p", repr(s.top_p))]
    return [*args, _kw("min_p", repr(s.min_p))] if s.min_p else args


def _hf_more(s: SamplerSettings) -> list[Arg]:
    """generate()'s own typical, epsilon and eta (after its min-p) and the logit bias."""
    args = [_kw(k, repr(getattr(s, k))) for k in ("typical_p", "epsilon_cutoff", "eta_cutoff")
            if getattr(s, k) != (1.0 if k == "typical_p" else 0.0)]
    if s.logit_bias:
        args.append(_kw("sequence_bias", repr({(tid,): v for tid, v in s.logit_bias}), "the app's logit bias"))
    return args


def _hf_processors(s: SamplerSettings, last: bool) -> list[Arg]:
    out = []
    if s.repetition_penalty != 1:
        out.append(_kw("repetition_penalty", repr(s.repetition_penalty),
                       "generate()'s own is the app's: CTRL's, over the prompt and the output"))
    items = ["OpenAIPenalties()"] if s.frequency_penalty or s.presence_penalty else []
    if last:
        items += [f"{_warper(k)}({v!r})" for k, v in filters(s).items()]
        items.append(f"{_warper('temperature')}({s.temperature!r})")
    if items:
        out.append(_kw("logits_processor", "\n".join(_wrapped("LogitsProcessorList([", items, "])", "    "))))
    return out


def _wrapped(head: str, items: list[str], tail: str = "", indent: str = "") -> list[str]:
    """`head` + the items, comma-separated, + `tail` on one line, or one item a line when that is too long."""
    one = f"{head}{', '.join(items)}{tail}"
    if len(indent) + len(one) <= WIDTH:
        return [one]
    opener, closer = (head, tail) if tail else (f"{head}(", ")")
    return [opener, *(f"{indent}    {item}," for item in items), f"{indent}{closer}"]


def _hf_penalty_class(s: SamplerSettings) -> list[str]:
    if not (s.frequency_penalty or s.presence_penalty):
        return []
    return ["", "", "class OpenAIPenalties(LogitsProcessor):",
            '    """Frequency and presence penalties over the generated tokens, as the app and OpenAI define',
            '    them (generate() has neither)."""', "",
            "    def __call__(self, input_ids, scores):",
            "        generated = input_ids[:, n_prompt:]",
            "        ones = torch.ones_like(generated, dtype=scores.dtype)",
            "        counts = torch.zeros_like(scores).scatter_add_(1, generated, ones)",
            f"        return scores - counts * {s.frequency_penalty!r} - (counts > 0) * {s.presence_penalty!r}", "",
            ""]


# OpenAI-compatible servers ------------------------------------------------------------------------------------
def openai_body(req: CodeRequest) -> tuple[dict, dict]:
    """(the OpenAI request body, the parameters only vLLM-style servers take) for /v1/completions or, in chat
    mode, /v1/chat/completions."""
    body: dict = {"model": req.model_ref}
    if req.messages is None:
        body.update(prompt=req.prompt, logprobs=req.top_logprobs)
    else:
        body.update(messages=_messages(req), logprobs=True, top_logprobs=req.top_logprobs)
    settings, _ = without_refused(req.settings, chat=req.messages is not None)  # (its refusal: a note)
    fields = request_fields(settings, req.seed, chat=req.messages is not None)  # what the app sends an unknown server
    extra = {k: fields.pop(k) for k in EXTENSIONS if k in fields}
    return {**body, **fields}, extra


def openai_notes(req: CodeRequest) -> list[str]:
    s, f = req.settings, filters(req.settings)
    notes = [top_p_zero_note(s, "vLLM refuses top_p 0"), missing_note(s, "the server")]
    if s.order == StageOrder.TEMPERATURE_LAST and order_matters(s):
        notes.append("temperature last cannot be expressed: OpenAI-compatible servers (vLLM) apply temperature "
                     "before their filters.")
    if s.repetition_penalty != 1 or (not s.draws_top_token and set(f) - {"top_p"}):
        notes.append("top_k, min_p and repetition_penalty are not OpenAI parameters: vLLM (and the llama.cpp and "
                     "mlx-lm servers) take them; OpenAI's own API does not.")
    if not s.draws_top_token and "min_p" in f and "top_p" in f:
        notes.append("vLLM applies min-p before top-k and top-p (the app: top-k, top-p, then min-p): with top-p "
                     "and min-p both on, the kept set can differ.")
    notes.append(seed_note(s, "the server"))
    if req.messages is None:
        notes.append(f"logprobs {req.top_logprobs}: OpenAI's /v1/completions returns at most 5; vLLM up to its "
                     "--max-logprobs (20).")
    notes.append("vLLM reports the model's raw log-probabilities by default (before penalties and temperature).")
    notes.append(without_refused(s, chat=req.messages is not None)[1])
    return [n for n in notes if n]


def _endpoint(req: CodeRequest) -> str:
    return f"{req.openai_url}/{'completions' if req.messages is None else 'chat/completions'}"


def openai_json(req: CodeRequest) -> Snippet:
    body, extra = openai_body(req)
    return Snippet("OpenAI JSON", "json", json.dumps({**body, **extra}, indent=2, ensure_ascii=False) + "\n",
                   tuple([f"POST {_endpoint(req)}", *openai_notes(req)]))


def openai_python(req: CodeRequest) -> Snippet:
    body, extra = openai_body(req)
    chat = req.messages is not None
    args = [_kw(k, repr(v)) for k, v in body.items()]
    if extra:
        args.append(_kw("extra_body", repr(extra), "not OpenAI parameters: for vLLM-style servers"))
    lines = ["# Logit Lab's settings and prompt for an OpenAI-compatible server (pip install openai).",
             *[line for n in openai_notes(req) for line in _comment(n)], "from openai import OpenAI", "",
             f'client = OpenAI(base_url="{req.openai_url}", api_key="none")  # a local server wants no key',
             *_call(f"response = client.{'chat.completions' if chat else 'completions'}.create", args),
             "choice = response.choices[0]"]
    if chat:
        lines += ["print(choice.message.content)", "for t in choice.logprobs.content:",
                  "    print(repr(t.token), t.logprob, [(a.token, a.logprob) for a in t.top_logprobs])"]
    else:
        lines += ["print(choice.text)", "for token, top in zip(choice.logprobs.tokens, choice.logprobs.top_logprobs):",
                  "    print(repr(token), top)"]
    return Snippet("OpenAI Python", "python", "\n".join(lines) + "\n")


def _curl(url: str, body: dict, notes: list[str]) -> str:
    data = json.dumps(body, indent=2, ensure_ascii=False)
    lines = [*[line for n in notes for line in _comment(n)], f"curl -s {url} \\",
             '  -H "Content-Type: application/json" \\', "  -d @- <<'JSON'", data, "JSON"]
    return "\n".join(lines) + "\n"


def openai_curl(req: CodeRequest) -> Snippet:
    body, extra = openai_body(req)
    return Snippet("curl", "bash", _curl(_endpoint(req), {**body, **extra}, openai_notes(req)))


# llama.cpp --------------------------------------------------------------------------------------------------------
def llama_cpp_body(req: CodeRequest) -> dict:
    """The body of llama.cpp's /completion: what the app sends its server (`request_fields`, one mapping), with
    /completion's own names for the length and the logit bias, and its log-probabilities and prompt cache."""
    s = req.settings
    sent = request_fields(without_refused(s, DIALECTS["llama.cpp"])[0], req.seed, dialect=DIALECTS["llama.cpp"])
    body = {"prompt": req.rendered if req.messages is not None and req.rendered else req.prompt,
            "n_predict": sent.pop("max_tokens"), **sent, "repeat_last_n": -1, "n_probs": req.top_logprobs}
    if s.logit_bias:
        body["logit_bias"] = [[tid, v] for tid, v in s.logit_bias]
    return {**body, "cache_prompt": True}


def llama_cpp_notes(req: CodeRequest) -> list[str]:
    s = req.settings
    notes = ["llama.cpp serves GGUF files: convert the model first (convert_hf_to_gguf.py).",
             top_p_zero_note(s, "temperature 0 samples greedily in llama.cpp"),
             "samplers: the app's stages that are on, in its order; each sampler left out is off.",
             missing_note(s, "llama.cpp"),
             "repeat_last_n -1: the penalties see the whole context, prompt included, as the app's repetition "
             "penalty does."]
    if s.frequency_penalty or s.presence_penalty:
        notes.append("llama.cpp's frequency and presence penalties count the prompt's tokens too (the app and "
                     "OpenAI count only the generated ones).")
    if req.messages is not None:
        notes.append("/completion takes the chat already rendered through the model's template, as the app sends "
                     "it" if req.rendered else "/completion takes a rendered prompt: load the model to fill it in, "
                     "or use /v1/chat/completions.")
    notes.append(seed_note(s, "llama.cpp"))
    notes.append(without_refused(s, DIALECTS["llama.cpp"])[1])
    notes.append("n_probs: the model's probabilities before sampling (add \"post_sampling_probs\": true for the "
                 "final ones).")
    return [n for n in notes if n]


def llama_cpp(req: CodeRequest) -> Snippet:
    return Snippet("llama.cpp", "bash", _curl(f"{req.llama_url}/completion", llama_cpp_body(req),
                                              llama_cpp_notes(req)))


def snippets(req: CodeRequest) -> list[Snippet]:
    """Every engine's code, in the order the dialog shows them."""
    return [mlx_lm(req), transformers(req), openai_json(req), openai_python(req), openai_curl(req),
            llama_cpp(req)]
