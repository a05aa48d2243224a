"""Tiny real models made on the spot: a random-weight Llama and a byte-level BPE tokenizer trained here."""

from __future__ import annotations

from pathlib import Path

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


def make_model(path: Path, *, chat: bool = False, seed: int = 0, hidden: int = 64, layers: int = 2) -> Path:
    """Save a random Llama (float32 safetensors) and its tokenizer to `path`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = make_tokenizer()
    if chat:
        tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # larger weights than the default init: distributions with some shape
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.2)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
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
