"""Train Logit Lab's built-in thinking model from scratch: addition with a think trace, in a Qwen3-style chat.

Seeded, offline and small enough for one CPU thread: a ~0.8M-parameter Llama-architecture decoder and a byte-level
BPE tokenizer (digits always single tokens) with <|im_start|>, <|im_end|>, <think> and </think>. The problems, the
think traces and the held-out set are `app/core/models/arithmetic.py`'s. Half the examples think column by column
("7+8=15, carry 1: 5"); some answer at once after an empty think span (the template's enable_thinking=False), and
some answer after a think span cut short at any token (its closing marker forced, not learned), so that a budget's
cut or a probe "the answer if it stopped thinking here" reads a real guess. The loss is on the assistant's tokens only.

    nice -n 10 python packaging/train_thinking_model.py --out resources/builtin-thinking --steps 1500

At the end the saved float16 folder is loaded through Logit Lab's own torch (and MLX) backends and scored greedily
on the held-out set with and without thinking (`app.core.decoding.accuracy`); the figures go to training.json and
the model card, and the first `--test-subset` problems' figures per backend are what the test reproduces.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, LlamaForCausalLM, PreTrainedTokenizerFast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a script run from anywhere finds the app

from train_builtin_model import make_config, make_optimizer, update  # the sibling script (this folder is on the path)

from app.core.models.arithmetic import (
    DIGIT_WEIGHTS,
    DIGITS,
    END_OF_TEXT,
    HELD_OUT_SEED,
    IM_END,
    IM_START,
    THINK_CLOSE,
    THINK_OPEN,
    Problem,
    draw,
    draw_for_training,
    held_out,
    prompt_text,
    think_span,
    trace,
)

SPECIAL = (END_OF_TEXT, IM_START, IM_END)  # special: a decode for people skips them
MARKERS = (THINK_OPEN, THINK_CLOSE)  # added but not special, as in Qwen3: the think span stays in the text
VOCAB = 320
POSITIONS = 256
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
MODES = ("thinking", "direct")  # enable_thinking True, False
MIX = {"think": 0.5, "direct": 0.25, "cut": 0.25}  # full trace; empty span from the template; span cut short


def train_tokenizer(texts: list[str]) -> Tokenizer:
    """Byte-level BPE whose pieces never join two digits (each digit one token, so that columns line up) and never
    cross a newline, a space run or a word boundary; the chat and think markers are added tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\d|\n|[ \t]+|[^\W\d]+|[^\w\s]+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - len(MARKERS), special_tokens=list(SPECIAL),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens([AddedToken(m, special=False, normalized=False) for m in MARKERS])
    return tok


def example(p: Problem, kind: str, rng: random.Random) -> tuple[str, str, bool]:
    """(prompt, completion, whether its closing think marker was forced) of one training example."""
    if kind == "direct":
        return prompt_text(p.question, thinking=False), p.answer + IM_END, False
    span = cut_span(trace(p), rng) if kind == "cut" else think_span(trace(p))
    return prompt_text(p.question, thinking=True), span + p.answer + IM_END, kind == "cut"


def cut_span(lines: list[str], rng: random.Random) -> str:
    """A think span cut short at a random token boundary (anywhere but inside a word) and closed right there, as a
    reasoning budget or a probe closes it."""
    body = "".join(line + "\n" for line in lines)
    inside = {i for m in re.finditer(r"[a-z]+", body) for i in range(m.start() + 1, m.end())}
    at = rng.choice([i for i in range(len(body)) if i not in inside])
    return f"{THINK_OPEN}\n{body[:at]}{THINK_CLOSE}\n\n"


class Examples:
    """Training batches drawn with a seed: problems outside the held-out set, tokens with their loss mask."""

    def __init__(self, tok: Tokenizer, seed: int) -> None:
        self.tok, self.rng = tok, random.Random(seed)
        self.pad, self.close = tok.token_to_id(END_OF_TEXT), tok.token_to_id(THINK_CLOSE)

    def batch(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        kinds = self.rng.choices(list(MIX), list(MIX.values()), k=n)
        rows = [self.tokens(*example(draw_for_training(self.rng), k, self.rng)) for k in kinds]
        width = max(len(ids) for ids, _ in rows)
        x = np.full((n, width), self.pad, dtype=np.int64)
        y = np.full((n, width), -100, dtype=np.int64)
        for i, (ids, labels) in enumerate(rows):
            x[i, : len(ids)], y[i, : len(ids)] = ids, labels
        return torch.from_numpy(x), torch.from_numpy(y)

    def tokens(self, prompt: str, completion: str, cut: bool) -> tuple[list[int], list[int]]:
        """The ids and the labels: the prompt unlearned, and a forced closing marker unlearned (the model is not
        taught to stop thinking early, only what to answer when made to)."""
        head = self.tok.encode(prompt, add_special_tokens=False).ids
        tail = self.tok.encode(completion, add_special_tokens=False).ids
        labels = [-100] * len(head) + [(-100 if cut and t == self.close else t) for t in tail]
        return head + tail, labels


@torch.no_grad()
def quick_accuracy(model: LlamaForCausalLM, tok: Tokenizer, problems: list[Problem], thinking: bool) -> float:
    """Greedy accuracy while training (transformers' generate, left-padded batch): a progress figure only; the
    recorded figures are Logit Lab's own runtime's (`recorded_figures`)."""
    from app.core.models.arithmetic import read_answer

    model.eval()
    enc = [tok.encode(prompt_text(p.question, thinking), add_special_tokens=False).ids for p in problems]
    width, pad = max(map(len, enc)), tok.token_to_id(END_OF_TEXT)
    ids = torch.tensor([[pad] * (width - len(e)) + e for e in enc])
    mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in enc])
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=80, do_sample=False,
                         eos_token_id=tok.token_to_id(IM_END), pad_token_id=pad)
    texts = [tok.decode(row[width:].tolist(), skip_special_tokens=False) for row in out]
    model.train()
    return sum(read_answer(t) == p.answer for t, p in zip(texts, problems, strict=True)) / len(problems)


def save_folder(out: Path, model: LlamaForCausalLM, tok: Tokenizer) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.half().save_pretrained(out, safe_serialization=True)
    GenerationConfig(eos_token_id=[tok.token_to_id(IM_END), tok.token_to_id(END_OF_TEXT)],
                     pad_token_id=tok.token_to_id(END_OF_TEXT), do_sample=False).save_pretrained(out)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, pad_token=END_OF_TEXT,
                                   unk_token=None, bos_token=None, chat_template=CHAT_TEMPLATE)
    fast.model_max_length = POSITIONS
    fast.save_pretrained(out)
    # The template inside tokenizer_config.json, where every reader of HF folders looks (not a chat_template.jinja)
    config = json.loads((out / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": CHAT_TEMPLATE}, indent=2) + "\n")
    (out / "chat_template.jinja").unlink(missing_ok=True)


def recorded_figures(folder: Path, subset: int, backends: list[str], whole: int) -> dict:
    """The held-out figures through Logit Lab's runtime, each model loaded and run on this thread: the first `whole`
    problems on the first backend, and the first `subset` on each (what tests/core/models/test_builtin_thinking.py
    reproduces)."""
    from app.core.decoding.accuracy import EVAL_OPTIONS, score
    from backends import get_backend

    problems, figures = list(held_out()), {}
    for i, name in enumerate(backends):
        model = get_backend(name).load(folder, EVAL_OPTIONS)
        figures[name] = {"subset": {m: score(model, problems[:subset], m == "thinking").correct for m in MODES}}
        if i == 0:
            figures[name]["all"] = {m: score(model, problems[:whole], m == "thinking").correct for m in MODES}
        print(f"{name}: {figures[name]}", flush=True)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("resources/builtin-thinking"))
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=384)
    ap.add_argument("--test-subset", type=int, default=40, help="held-out problems whose figures a test reproduces")
    ap.add_argument("--held-out", type=int, default=len(held_out()), help="held-out problems scored for the card")
    ap.add_argument("--backends", default="torch,mlx", help="Logit Lab backends to record the figures on")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    corpus_rng = random.Random(args.seed + 1)
    corpus = ["".join(example(draw(corpus_rng), k, corpus_rng)[:2]) for k in list(MIX) * 300]
    tok = train_tokenizer(corpus)
    config = make_config(args, vocab=tok.get_vocab_size(), bos=None, eos=tok.token_to_id(IM_END),
                         positions=POSITIONS)
    config.pad_token_id = tok.token_to_id(END_OF_TEXT)
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"vocabulary {tok.get_vocab_size()}, parameters {n_params:,}", flush=True)
    data, (opt, sched) = Examples(tok, args.seed), make_optimizer(model, args.lr, args.steps)
    watch = list(held_out())[-100:]
    t0, tokens = time.time(), 0
    for step in range(1, args.steps + 1):
        x, y = data.batch(args.batch)
        tokens += int((y != -100).sum())
        loss = model(input_ids=x, labels=y).loss
        update(model, opt, sched, loss)
        if step % 100 == 0 or step == args.steps:
            msg = f"step {step}/{args.steps} loss {loss.item():.4f} ({time.time() - t0:.0f}s)"
            if step % 500 == 0 or step == args.steps:
                msg += (f" accuracy on 100 held-out: thinking {quick_accuracy(model, tok, watch, True):.2f}, "
                        f"direct {quick_accuracy(model, tok, watch, False):.2f}")
            print(msg, flush=True)
    seconds = time.time() - t0
    save_folder(args.out, model, tok)
    figures = recorded_figures(args.out, args.test_subset, args.backends.split(","), args.held_out)
    write_card(args, n_params, tok.get_vocab_size(), tokens, seconds, figures)


def write_card(args: argparse.Namespace, n_params: int, vocab: int, tokens: int, seconds: float,
               figures: dict) -> None:
    first = next(iter(figures.values()))["all"]
    n = args.held_out
    stats = {
        "parameters": n_params, "vocabulary": vocab, "steps": args.steps, "batch": args.batch, "lr": args.lr,
        "seed": args.seed, "threads": args.threads, "train_seconds": round(seconds), "loss_tokens_seen": tokens,
        "mix": MIX, "digits": dict(zip(DIGITS, DIGIT_WEIGHTS, strict=True)),
        "held_out": {"seed": HELD_OUT_SEED, "problems": n, "backend": next(iter(figures)),
                     "correct_thinking": first["thinking"], "correct_direct": first["direct"],
                     "accuracy_thinking": round(first["thinking"] / n, 4),
                     "accuracy_direct": round(first["direct"] / n, 4)},
        "test_subset": {"problems": args.test_subset,
                        "correct": {name: f["subset"] for name, f in figures.items()}},
        "python": sys.version.split()[0], "torch": torch.__version__,
    }
    (args.out / "training.json").write_text(json.dumps(stats, indent=2) + "\n")
    shape = (f"{args.layers} layers, hidden {args.hidden}, {args.heads} heads / {args.kv_heads} KV heads, "
             f"MLP {args.intermediate}")
    (args.out / "README.md").write_text(CARD.format(
        shape=shape, n_params=n_params, vocab=vocab, seconds=round(seconds), tokens=tokens, n=n,
        think=first["thinking"], direct=first["direct"], pt=100 * first["thinking"] / n,
        pd=100 * first["direct"] / n, args=args, seed=HELD_OUT_SEED,
        digits=", ".join(f"{d}: {w}" for d, w in zip(DIGITS, DIGIT_WEIGHTS, strict=True)),
        mix=", ".join(f"{v:.0%} {k}" for k, v in MIX.items())))
    print(json.dumps(stats), flush=True)


CARD = """---
license: mit
library_name: transformers
tags: [logitlab, tiny, reasoning, arithmetic]
---
# Logit Lab built-in thinking model

A tiny Llama-architecture decoder trained from scratch to add numbers of up to three digits, thinking first in a
Qwen3-style think span, so that Logit Lab's thinking tools (think spans, reasoning budgets, "the answer if it
stopped thinking here") work with nothing to download. Ask it `47+38`:

```
<think>
7+8=15, carry 1: 5
4+3+1=8: 85
</think>

85
```

Each think line is one column from the units up: its sum with the carry it takes, the carry it gives, and the
answer's digits so far. With `enable_thinking=False` the chat template closes an empty think span itself (as
Qwen3's does) and the model answers at once.

| | |
|---|---|
| architecture | LlamaForCausalLM, {shape}, tied embeddings |
| parameters | {n_params:,} |
| tokenizer | byte-level BPE, {vocab} tokens, each digit a token; `<\\|im_start\\|>`, `<\\|im_end\\|>` (end of turn), `<think>`, `</think>` |
| chat template | `<\\|im_start\\|>user\\n47+38<\\|im_end\\|>\\n<\\|im_start\\|>assistant\\n`, `enable_thinking` as in Qwen3 |
| weights | float16 safetensors |
| data | synthetic: a+b, each operand 1, 2 or 3 digits (weights {digits}); {mix} (a think span cut short at a random token, its closing marker forced); loss on the assistant's tokens only |
| training | {args.steps} steps × {args.batch} examples ({tokens:,} loss tokens), AdamW, cosine schedule, seed {args.seed}, {seconds} s on {args.threads} CPU thread(s) |
| **held-out accuracy, thinking** | **{think}/{n} = {pt:.1f}%** (greedy, `enable_thinking=True`) |
| **held-out accuracy, no thinking** | **{direct}/{n} = {pd:.1f}%** (greedy, `enable_thinking=False`) |

The held-out set is {n} distinct problems drawn with seed {seed} (`app/core/models/arithmetic.py`), none of them
seen in training; the figures are Logit Lab's own greedy decoding (`app/core/decoding/accuracy.py`) of these
float16 weights loaded as float32 on the CPU, and `tests/core/models/test_builtin_thinking.py` reproduces them on
a subset.

Reproduce: `nice -n 10 python packaging/train_thinking_model.py --out resources/builtin-thinking --steps {args.steps}`
(needs `torch`, `transformers`, `tokenizers`; `mlx` to record the MLX figures).
"""


if __name__ == "__main__":
    main()
