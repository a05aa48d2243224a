"""Train Logit Lab's built-in model from scratch on the Python standard library's own source.

Reproducible (seeded), offline, and small enough for a 2-core CPU: a ~6M-parameter Llama-architecture
decoder with a byte-level BPE tokenizer trained on the spot. Writes a Hugging Face-format folder
(config.json, model.safetensors in float16, tokenizer files, README.md model card).

    python packaging/train_builtin_model.py --out resources/builtin-model --steps 1500

A draft model for speculative decoding reuses the built-in model's tokenizer exactly (its files are copied, not
retrained) and is smaller:

    python packaging/train_builtin_model.py --out resources/builtin-draft --tokenizer resources/builtin-model \
        --hidden 128 --layers 2 --heads 4 --kv-heads 2 --intermediate 352 --steps 1500 --name "built-in draft model"
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

EOS = "<|endoftext|>"
VOCAB = 4096
SEQ = 256


def source_files() -> tuple[list[Path], list[Path]]:
    """The stdlib's .py files (no tests, no site-packages), split ~5% held out by a hash of the path."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p for p in root.rglob("*.py")
        if not {"test", "tests", "site-packages", "idlelib"} & set(p.relative_to(root).parts)
    )
    def held_out(p: Path) -> bool:
        return hashlib.sha256(str(p.relative_to(root)).encode()).digest()[0] < 13
    return [p for p in files if not held_out(p)], [p for p in files if held_out(p)]


def read(p: Path) -> str:
    return p.read_text(encoding="utf-8", errors="replace")


def train_tokenizer(texts: list[str]) -> Tokenizer:
    """Byte-level BPE whose pieces never cross a newline, a run of spaces or a word boundary: a newline, the
    indentation after it and the word after a space are separate tokens, so a prompt that ends in "\n" or in
    "import " ends on a boundary the model saw in training (GPT-2's scheme glues the space to the next word)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\n|[ \t]+|\w+|[^\w\s]+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def add_bos(tok: Tokenizer) -> Tokenizer:
    """Prompts start like files do in training, after the end-of-text separator (as Llama prepends <s>)."""
    tok.post_processor = processors.TemplateProcessing(single=f"{EOS} $A", special_tokens=[(EOS, tok.token_to_id(EOS))])
    return tok


def encode_all(tok: Tokenizer, texts: list[str]) -> np.ndarray:
    eos = tok.token_to_id(EOS)
    ids: list[int] = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(eos)
    return np.asarray(ids, dtype=np.int64)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def load_tokenizer(folder: Path) -> Tokenizer:
    """Another model's tokenizer, as is (for a draft model, which must tokenize exactly like its target)."""
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def make_config(args: argparse.Namespace, vocab: int = VOCAB, bos: int | None = 0, eos: int = 0,
                positions: int = 1024) -> LlamaConfig:
    """The Llama shape the arguments name (--hidden, --layers, --heads, --kv-heads, --intermediate)."""
    return LlamaConfig(
        vocab_size=vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=args.hidden // args.heads, max_position_embeddings=positions,
        rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=bos, eos_token_id=eos, torch_dtype="float16",
    )


def make_optimizer(model: torch.nn.Module, lr: float, steps: int) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW with a linear warmup over the first 5% of the steps, then a cosine decay to zero."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    )
    return opt, sched


def update(model: torch.nn.Module, opt: torch.optim.Optimizer, sched: torch.optim.lr_scheduler.LRScheduler,
           loss: torch.Tensor) -> None:
    """One optimizer step on `loss`, gradients clipped to norm 1."""
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)


@torch.no_grad()
def evaluate(model: LlamaForCausalLM, data: np.ndarray, batches: int = 8, batch: int = 16) -> float:
    model.eval()
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(batches):
        x = sample_batch(data, rng, batch)
        losses.append(model(input_ids=x, labels=x).loss.item())
    model.train()
    return float(np.mean(losses))


def sample_batch(data: np.ndarray, rng: np.random.Generator, batch: int) -> torch.Tensor:
    starts = rng.integers(0, len(data) - SEQ - 1, size=batch)
    return torch.from_numpy(np.stack([data[s : s + SEQ] for s in starts]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("resources/builtin-model"))
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokenizer", type=Path, help="reuse this model folder's tokenizer files instead of training one")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=704)
    ap.add_argument("--name", default="built-in model", help="the model card's title: Logit Lab <name>")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train_files, val_files = source_files()
    train_texts, val_texts = [read(p) for p in train_files], [read(p) for p in val_files]
    print(f"files: {len(train_files)} train, {len(val_files)} validation", flush=True)
    tok = load_tokenizer(args.tokenizer) if args.tokenizer else train_tokenizer(train_texts)
    train_ids, val_ids = encode_all(tok, train_texts), encode_all(tok, val_texts)
    print(f"tokens: {len(train_ids):,} train, {len(val_ids):,} validation", flush=True)

    model = LlamaForCausalLM(make_config(args)).to(args.device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params:,}", flush=True)
    opt, sched = make_optimizer(model, args.lr, args.steps)
    t0 = time.time()
    for step in range(1, args.steps + 1):
        x = sample_batch(train_ids, rng, args.batch).to(args.device)
        loss = model(input_ids=x, labels=x).loss
        update(model, opt, sched, loss)
        if step % 50 == 0 or step == args.steps:
            msg = f"step {step}/{args.steps} train loss {loss.item():.3f} ({time.time() - t0:.0f}s)"
            if step % 250 == 0 or step == args.steps:
                msg += f" validation loss {evaluate(model, torch.as_tensor(val_ids).numpy()):.3f}"
            print(msg, flush=True)

    val_loss = evaluate(model, val_ids, batches=32)
    save(args, model.cpu(), tok, n_params, len(train_ids), val_loss, time.time() - t0, len(train_files), len(val_files))


def save(args, model, tok, n_params, n_train, val_loss, seconds, n_train_files, n_val_files) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    model.half().save_pretrained(args.out, safe_serialization=True)
    save_tokenizer(args, tok)
    tokens_seen = args.steps * args.batch * SEQ
    stats = {
        "parameters": n_params, "training_tokens_seen": tokens_seen, "corpus_tokens": n_train,
        "validation_loss": round(val_loss, 4), "validation_perplexity": round(math.exp(val_loss), 2),
        "steps": args.steps, "batch": args.batch, "seq_len": SEQ, "seed": args.seed,
        "train_seconds": round(seconds), "python": sys.version.split()[0],
        "train_files": n_train_files, "validation_files": n_val_files,
    }
    (args.out / "training.json").write_text(json.dumps(stats, indent=2) + "\n")
    (args.out / "README.md").write_text(CARD.format(**stats, **card_fields(args)))
    print(json.dumps(stats), flush=True)


def save_tokenizer(args: argparse.Namespace, tok: Tokenizer) -> None:
    """A reused tokenizer's files are copied byte for byte; a trained one is saved with the BOS template."""
    if args.tokenizer:
        for name in TOKENIZER_FILES:
            shutil.copyfile(args.tokenizer / name, args.out / name)
        return
    fast = PreTrainedTokenizerFast(tokenizer_object=add_bos(tok), eos_token=EOS, bos_token=EOS, unk_token=EOS)
    fast.model_max_length = 1024
    fast.save_pretrained(args.out)


def card_fields(args: argparse.Namespace) -> dict:
    shape = (f"{args.layers} layers, hidden {args.hidden}, {args.heads} heads / {args.kv_heads} KV heads, "
             f"MLP {args.intermediate}")
    tokenizer = (f"the tokenizer of `{args.tokenizer.name}`, copied as is" if args.tokenizer
                 else "trained on the same data")
    reproduce = (f"--tokenizer {args.tokenizer} --hidden {args.hidden} --layers {args.layers} --heads {args.heads} "
                 f"--kv-heads {args.kv_heads} --intermediate {args.intermediate} --name \"{args.name}\" "
                 if args.tokenizer else "")
    purpose = (f"\nIt is the draft model for `{args.tokenizer.name}` in speculative decoding: it tokenizes exactly as "
               "that model does." if args.tokenizer else "")
    return {"name": args.name, "shape": shape, "tokenizer_source": tokenizer, "out": args.out,
            "reproduce": reproduce, "purpose": purpose}


CARD = """---
license: psf-2.0
library_name: transformers
tags: [logitlab, tiny, code]
---
# Logit Lab {name}

A tiny Llama-architecture decoder trained from scratch so that Logit Lab works with nothing to download.
It knows Python only (and not well): it exists to make the playground's charts mean something.{purpose}

| | |
|---|---|
| architecture | LlamaForCausalLM, {shape}, tied embeddings |
| parameters | {parameters:,} |
| tokenizer | byte-level BPE, 4,096 tokens, {tokenizer_source}; newlines, space runs and words are separate pieces |
| weights | float16 safetensors |
| data | the CPython {python} standard library's own `.py` sources (tests, site-packages and idlelib left out), {train_files} files; {validation_files} files held out by a hash of their path |
| licence of the data | PSF License Agreement (the sources ship with every Python) |
| training | {steps} steps × {batch} sequences × {seq_len} tokens = {training_tokens_seen:,} tokens seen (corpus {corpus_tokens:,} tokens), AdamW, cosine schedule, seed {seed}, {train_seconds} s |
| validation loss | {validation_loss} (perplexity {validation_perplexity}) |

Reproduce: `python packaging/train_builtin_model.py --out {out} {reproduce}--steps {steps}`
(needs `torch`, `transformers` and `tokenizers`; the result depends on the Python version's stdlib).
"""


if __name__ == "__main__":
    main()
