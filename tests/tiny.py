"""Tiny real models made on the spot: a random-weight Llama and a byte-level BPE tokenizer trained here."""

from __future__ import annotations

from pathlib import Path

from backends import installed

LOCAL_BACKENDS = tuple(b for b in ("mlx", "torch") if installed(b))  # what this install can open a folder with

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Logit Lab shows each token's distribution. 温度は確率を変える。 🙂🚀 naïve café",
    "for i in range(10):\n    print(i * i)\n",
    "Hello, world! Bonjour le monde. こんにちは世界 👋🌍",
] * 20
EOS = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def make_tokenizer(vocab_size: int = 384):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS)


def make_model(path: Path, *, chat: bool = False, seed: int = 0, hidden: int = 64, layers: int = 2,
               tok: object = None) -> Path:
    """Save a random Llama (float32 safetensors, numpy's seeded draws: no framework needed, so a torch-only and an
    mlx-only install make the same model) and its tokenizer (`tok`, or the tiny one made here) to `path`."""
    import numpy as np
    from safetensors.numpy import save_file
    from transformers import LlamaConfig

    tok = tok if tok is not None else make_tokenizer()
    if chat:
        tok.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False,
        architectures=["LlamaForCausalLM"], torch_dtype="float32",
    )
    kv = hidden // config.num_attention_heads * config.num_key_value_heads
    shapes = {"model.embed_tokens.weight": (len(tok), hidden), "model.norm.weight": (hidden,),
              "lm_head.weight": (len(tok), hidden)}
    for i in range(layers):
        at, mlp = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        shapes.update({at + "q_proj.weight": (hidden, hidden), at + "k_proj.weight": (kv, hidden),
                       at + "v_proj.weight": (kv, hidden), at + "o_proj.weight": (hidden, hidden),
                       mlp + "gate_proj.weight": (hidden * 2, hidden), mlp + "up_proj.weight": (hidden * 2, hidden),
                       mlp + "down_proj.weight": (hidden, hidden * 2),
                       f"model.layers.{i}.input_layernorm.weight": (hidden,),
                       f"model.layers.{i}.post_attention_layernorm.weight": (hidden,)})
    rng = np.random.default_rng(seed)  # larger weights than transformers' init: distributions with some shape
    weights = {name: (rng.normal(0, 0.2, shape) if len(shape) == 2 else np.ones(shape)).astype(np.float32)
               for name, shape in shapes.items()}
    path.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(path)
    tok.save_pretrained(path)
    return path


REMOTE_CONFIG = """from transformers import LlamaConfig
class TinyRemoteConfig(LlamaConfig):
    model_type = "tiny_remote"
"""
REMOTE_MODEL = """from transformers import LlamaForCausalLM
from .configuration_tiny_remote import TinyRemoteConfig
class TinyRemoteForCausalLM(LlamaForCausalLM):
    config_class = TinyRemoteConfig
"""


def make_remote_code_model(src: Path, dst: Path) -> Path:
    """A copy of `src` whose config asks for code from the model folder (auto_map), as hub repos do."""
    import json
    import shutil

    shutil.copytree(src, dst)
    (dst / "configuration_tiny_remote.py").write_text(REMOTE_CONFIG)
    (dst / "modeling_tiny_remote.py").write_text(REMOTE_MODEL)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(model_type="tiny_remote", architectures=["TinyRemoteForCausalLM"], auto_map={
        "AutoConfig": "configuration_tiny_remote.TinyRemoteConfig",
        "AutoModelForCausalLM": "modeling_tiny_remote.TinyRemoteForCausalLM"})
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst
