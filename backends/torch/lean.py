"""Llama, Mistral and Qwen2 folders on torch without transformers: importing it and its modelling code costs seconds
at every start, and the lean forward (`fast.FastLlama`) never calls transformers' modules anyway.

`load_lean(path, config, dtype)` builds `LeanLlama`: the module tree of transformers' `LlamaForCausalLM` (the same
names: `model.embed_tokens`, `model.layers[i].self_attn.q_proj`…, `model.norm`, `lm_head`, `model.rotary_emb`),
holding the folder's safetensors weights cast to `dtype` as `from_pretrained` casts them, for `FastLlama` to run and
the lens, attention and steering (torch/inside.py, torch/steer.py) to read. Its RoPE tables are computed as
transformers computes them (default, linear and llama3 scaling). None wherever that would not be transformers' model
exactly (another architecture, quantized weights, custom code, dynamic or YaRN RoPE, biases in the MLP, a sliding
window, a weight it does not expect or one missing): such a folder loads through transformers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the usual name

from backends.base import ModelLoadError, first_line

LEAN_TYPES = {"llama", "mistral", "qwen2"}  # (fast.FAST_TYPES)
UNUSUAL_KEYS = ("quantization", "quantization_config", "auto_map", "text_config", "model_file")
IGNORED = ".rotary_emb.inv_freq"  # a buffer some older checkpoints saved; transformers recomputes it too
ROPE_TYPES = {"default", "linear", "llama3"}


class LeanConfig(SimpleNamespace):
    """The attributes of transformers' config that the lean path reads, with transformers' defaults filled in."""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}


class Linear(torch.nn.Module):
    """A linear layer's weight (out, in) and bias, as `torch.nn.Linear` holds them (without allocating its own)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        """A `Parameter` given is held as it is (a tied head holds the embedding's own)."""
        super().__init__()
        self.weight = weight if isinstance(weight, torch.nn.Parameter) else torch.nn.Parameter(weight,
                                                                                                requires_grad=False)
        self.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class RMSNorm(torch.nn.Module):
    """transformers' `LlamaRMSNorm`: in float32, scaled by the weight in the input's dtype."""

    def __init__(self, weight: torch.Tensor, eps: float) -> None:
        super().__init__()
        self.weight, self.variance_epsilon = torch.nn.Parameter(weight, requires_grad=False), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(x.dtype)


class RotaryEmbedding(torch.nn.Module):
    """transformers' `LlamaRotaryEmbedding` for the RoPE types in `ROPE_TYPES`: (x, position ids) -> cos, sin."""

    def __init__(self, inv_freq: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


class LeanLlama(torch.nn.Module):
    """The module tree of a transformers Llama-family causal LM, without its forward (`FastLlama` runs it)."""

    base_model_prefix = "model"

    def __init__(self, config: LeanConfig, w: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.config = config
        eps, scaling = config.rms_norm_eps, config.head_dim**-0.5
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding.from_pretrained(w["model.embed_tokens.weight"], freeze=True)
        layers = []
        for i in range(config.num_hidden_layers):
            at = f"model.layers.{i}."
            layer = torch.nn.Module()
            layer.self_attn = torch.nn.Module()
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                key = f"{at}self_attn.{name}"
                setattr(layer.self_attn, name, Linear(w[key + ".weight"], w.get(key + ".bias")))
            layer.self_attn.scaling = scaling
            layer.mlp = torch.nn.Module()
            for name in ("gate_proj", "up_proj", "down_proj"):
                setattr(layer.mlp, name, Linear(w[f"{at}mlp.{name}.weight"], None))
            layer.input_layernorm = RMSNorm(w[at + "input_layernorm.weight"], eps)
            layer.post_attention_layernorm = RMSNorm(w[at + "post_attention_layernorm.weight"], eps)
            layers.append(layer)
        self.model.layers = torch.nn.ModuleList(layers)
        self.model.norm = RMSNorm(w["model.norm.weight"], eps)
        self.model.rotary_emb = RotaryEmbedding(inv_freq(config))
        tied = config.tie_word_embeddings  # one tensor, as transformers ties them
        self.lm_head = Linear(self.model.embed_tokens.weight if tied else w["lm_head.weight"], None)

    def get_decoder(self) -> torch.nn.Module:
        return self.model

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.model.embed_tokens

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.lm_head


def load_lean(path: Path, config: dict[str, Any], dtype: torch.dtype) -> LeanLlama | None:
    """The model in `path` (its checked `config`), built as transformers' `from_pretrained(dtype=dtype)` builds it;
    None where this path does not apply (see the module's docstring)."""
    c = lean_config(config)
    files = weight_files(path)
    if c is None or not files:
        return None
    from safetensors.torch import load_file

    weights: dict[str, torch.Tensor] = {}
    try:
        for f in files:
            weights.update(load_file(str(f)))
    except Exception as e:  # (check_folder read every header: this is a file changed or cut since)
        raise ModelLoadError(f"cannot load the weights in {path}: {first_line(e)}") from e
    weights = {k: v for k, v in weights.items() if not k.endswith(IGNORED)}
    have = set(weights) - ({"lm_head.weight"} if c.tie_word_embeddings else set())
    if have != expected_keys(c):
        return None  # a weight transformers would initialise at random, or one it would not read: its own warnings
    return LeanLlama(c, {k: v.to(dtype) for k, v in weights.items()})


def lean_config(config: dict[str, Any]) -> LeanConfig | None:
    """transformers' view of `config` for the lean path: its defaults filled in; None where the lean path does not
    apply."""
    kind = config.get("model_type")
    dims = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    if kind not in LEAN_TYPES or any(k in config for k in UNUSUAL_KEYS) or config.get("mlp_bias"):
        return None
    if not all(isinstance(config.get(k), int) and config[k] > 0 for k in dims):
        return None
    heads, hidden = config["num_attention_heads"], config["hidden_size"]
    if hidden % heads:  # transformers refuses it (Llama) or makes its own sense of it: its words, its model
        return None
    head_dim = config.get("head_dim") or hidden // heads
    window = config.get("sliding_window") if kind == "mistral" or config.get("use_sliding_window") else None
    rope = rope_parameters(config)
    if not isinstance(head_dim, int) or window or rope is None or config.get("hidden_act", "silu") != "silu":
        return None
    defaults = {"llama": (2048, 1e-6, False), "mistral": (4096 * 32, 1e-6, False), "qwen2": (32768, 1e-6, False)}
    positions, eps, tied = defaults[kind]
    return LeanConfig(**{**config, "model_type": kind, "head_dim": head_dim, "sliding_window": None,
                         "num_key_value_heads": config.get("num_key_value_heads") or heads,
                         "max_position_embeddings": config.get("max_position_embeddings") or positions,
                         "rms_norm_eps": config.get("rms_norm_eps") or eps, "hidden_act": "silu",
                         "tie_word_embeddings": config.get("tie_word_embeddings", tied), "rope_parameters": rope,
                         "final_logit_softcapping": None})


def rope_parameters(config: dict[str, Any]) -> dict[str, Any] | None:
    """The RoPE's parameters, from transformers 5's `rope_parameters` or the older `rope_theta` and `rope_scaling`;
    None for a type the lean path does not compute."""
    rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    kind = rope.pop("rope_type", None) or rope.pop("type", None) or "default"
    theta = rope.get("rope_theta", config.get("rope_theta", 10000.0))
    if kind not in ROPE_TYPES or not isinstance(theta, (int, float)) or rope.get("partial_rotary_factor", 1) != 1:
        return None
    needs = {"default": (), "linear": ("factor",),
             "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}[kind]
    if not all(isinstance(rope.get(k), (int, float)) for k in needs):
        return None
    return {**rope, "rope_type": kind, "rope_theta": float(theta)}


def inv_freq(c: LeanConfig) -> torch.Tensor:
    """RoPE's inverse frequencies, computed as transformers' `ROPE_INIT_FUNCTIONS` compute them (float32)."""
    rope, dim = c.rope_parameters, c.head_dim
    base = rope["rope_theta"]
    if rope["rope_type"] == "default":
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    factor = rope["factor"]
    if rope["rope_type"] == "linear":
        return freq / factor
    low, high, old = rope["low_freq_factor"], rope["high_freq_factor"], rope["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / freq
    scaled = torch.where(wavelen > low_wavelen, freq / factor, freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def expected_keys(c: LeanConfig) -> set[str]:
    """The weights transformers' model of `c` reads (the output head's only when it is not tied)."""
    biased = {"qwen2": ("q_proj", "k_proj", "v_proj"), "mistral": (),
              "llama": ("q_proj", "k_proj", "v_proj", "o_proj") if getattr(c, "attention_bias", False) else ()}
    keys = {"model.embed_tokens.weight", "model.norm.weight"} | (set() if c.tie_word_embeddings else {"lm_head.weight"})
    for i in range(c.num_hidden_layers):
        at = f"model.layers.{i}."
        keys |= {f"{at}self_attn.{n}.weight" for n in ("q_proj", "k_proj", "v_proj", "o_proj")}
        keys |= {f"{at}self_attn.{n}.bias" for n in biased[c.model_type]}
        keys |= {f"{at}mlp.{n}.weight" for n in ("gate_proj", "up_proj", "down_proj")}
        keys |= {at + "input_layernorm.weight", at + "post_attention_layernorm.weight"}
    return keys


def weight_files(path: Path) -> list[Path]:
    """The safetensors files transformers reads: those its index names, else model.safetensors (others in the
    folder, such as a Mistral repository's consolidated.safetensors, are not the model's); [] if neither."""
    index = path / "model.safetensors.index.json"
    if index.exists():
        try:
            names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return []
        files = [path / n for n in names]
        return files if all(f.is_file() for f in files) else []
    single = path / "model.safetensors"
    return [single] if single.is_file() else []
