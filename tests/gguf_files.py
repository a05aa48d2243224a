"""GGUF files made on the spot, offline, as llama.cpp's convert script makes them: a Llama folder's dimensions, its
byte-level BPE tokenizer (GPT-2's pre-tokenizer) and its tensors under GGUF names, Q/K rows permuted; 2-D tensors as
F32, F16 or a type the `gguf` package quantizes, and other quantizations (Q4_K…) by llama.cpp's own quantizer.
Used by the GGUF tests (torch's loader, the llama.cpp backend) and the llama.cpp benchmark.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from backends import installed

GGUF_BACKENDS = tuple(b for b in ("llamacpp", "torch") if installed(b))  # what this install opens a .gguf file on


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's row order for Llama's q / k projections (convert_hf_to_gguf.py), which loaders undo."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(src: Path, dst: Path, quant: str = "F32") -> Path:
    """The Llama in `src` as llama.cpp writes it: its dimensions, its byte-level BPE tokenizer, its tensors under
    GGUF names (2-D ones as `quant`: F32, F16 or Q8_0; norms in F32)."""
    import gguf
    from safetensors.numpy import load_file

    cfg = json.loads((src / "config.json").read_text())
    heads, kv_heads, layers = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    w = gguf.GGUFWriter(str(dst), "llama")
    w.add_name(src.name)
    w.add_file_type({"F32": 0, "F16": 1, "Q8_0": 7}[quant])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(layers)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    w.add_rope_freq_base((cfg.get("rope_parameters") or cfg)["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    add_tokenizer(w, src, cfg)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, layers)
    for hf_name, t in sorted(load_file(src / "model.safetensors").items()):
        base, suffix = hf_name.rsplit(".", 1)
        t = permute(t, heads) if "q_proj" in base else permute(t, kv_heads) if "k_proj" in base else t
        add_tensor(w, f"{names.get_name(base)}.{suffix}", t.astype(np.float32), quant if t.ndim == 2 else "F32")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def add_tokenizer(w: object, src: Path, cfg: dict) -> None:
    """The folder's tokenizer.json as GGUF metadata: GPT-2's byte-level BPE (its tokens, merges and types; special
    tokens as control tokens), its BOS / EOS, no BOS added (as the tokenizer adds none), its chat template."""
    tok = json.loads((src / "tokenizer.json").read_text())
    special = {a["id"]: a["content"] for a in tok["added_tokens"]}
    vocab = {i: t for t, i in tok["model"]["vocab"].items()} | special
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list([vocab[i] for i in range(len(vocab))])
    w.add_token_types([3 if i in special else 1 for i in range(len(vocab))])  # 3: control, 1: normal
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_add_bos_token(False)
    template = src / "chat_template.jinja"
    if template.exists():
        w.add_chat_template(template.read_text())


def add_tensor(w: object, name: str, t: np.ndarray, quant: str) -> None:
    import gguf

    if quant == "F32":
        w.add_tensor(name, t)
    elif quant == "F16":
        w.add_tensor(name, t.astype(np.float16))
    else:
        qtype = gguf.GGMLQuantizationType[quant]
        w.add_tensor(name, gguf.quants.quantize(t, qtype), raw_dtype=qtype)


def quantize_gguf(src: Path, dst: Path, kind: str) -> Path:
    """`src` (an F32 or F16 GGUF) quantized by llama.cpp's own quantizer to `kind` ("Q8_0", "Q4_K_M", …); tensors
    whose rows do not divide into the kind's blocks take llama.cpp's fallback type, as its tool does."""
    import logging

    import llama_cpp

    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)  # its log: a line per tensor
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{kind}")
    params.nthread = 1
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params) != 0:
        raise RuntimeError(f"llama.cpp could not quantize {src.name} to {kind}")
    return dst
