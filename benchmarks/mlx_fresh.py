"""MLX in a fresh process, as a command-line user runs it: `logitlab generate --backend mlx --json` against
`mlx_lm generate`, each in its own new process, alternated run by run, greedy on the same model and prompt.

Baseline: mlx_lm's own "Generation: N tokens, X tokens-per-sec" (N tokens over the time from the first token
to the last). Ours is put on that definition (its JSON reports N - 1 intervals over the same time) before the
ratio. Also prints our median step time over the first 8 steps and over the rest.

    python benchmarks/mlx_fresh.py [--model PATH] [--tokens 12,128] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROMPT = "def fibonacci(n):"
MLX_RATE = re.compile(r"Generation: (\d+) tokens, ([\d.]+) tokens-per-sec")


def tiny_qwen(out: Path) -> Path:
    """A random-weight Qwen2 (0.3M parameters) with the built-in model's tokenizer."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from app.core.models.sources import BUILTIN_PATH

    tok = AutoTokenizer.from_pretrained(str(BUILTIN_PATH))
    config = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def run_mlx_lm(model: Path, tokens: int) -> float:
    out = subprocess.run([sys.executable, "-m", "mlx_lm", "generate", "--model", str(model), "--prompt", PROMPT,
                          "--max-tokens", str(tokens), "--temp", "0", "--ignore-chat-template"],
                         capture_output=True, text=True, timeout=300, check=True)
    _n, rate = MLX_RATE.search(out.stdout + out.stderr).groups()
    return float(rate)


def run_ours(model: Path, tokens: int) -> tuple[float, list[float]]:
    """mlx_lm's definition of our rate, and our step times (s)."""
    out = subprocess.run([sys.executable, "-m", "app", "generate", "--backend", "mlx", "--model", str(model),
                          "--json", "--max-tokens", str(tokens), "--temperature", "0", "--seed", "0",
                          "--prompt", PROMPT], capture_output=True, text=True, timeout=300, check=True)
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    summary, steps = lines[-1], lines[:-1]
    n = summary["generated_tokens"]
    return summary["decode_tokens_per_s"] * n / max(1, n - 1), [s["seconds"] for s in steps]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a model folder (default: a tiny random-weight Qwen2 made here)")
    ap.add_argument("--tokens", default="12,128")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    model = Path(args.model) if args.model else tiny_qwen(Path(tempfile.mkdtemp(prefix="logitlab-qwen-")))
    print(f"{model.name}, greedy, fresh processes alternated, median of {args.repeat}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    for tokens in (int(t) for t in args.tokens.split(",")):
        theirs, ours, first, rest = [], [], [], []
        for _ in range(args.repeat):
            theirs.append(run_mlx_lm(model, tokens))
            rate, seconds = run_ours(model, tokens)
            ours.append(rate)
            first += seconds[1:9]
            rest += seconds[9:]
        t, o = statistics.median(theirs), statistics.median(ours)
        tail = f", later steps {statistics.median(rest) * 1000:.2f} ms" if rest else ""
        print(f"{tokens:4d} tokens: mlx_lm generate {t:7.1f} tok/s, logitlab generate {o:7.1f} tok/s "
              f"({o / t:.2f}x); our steps 1-8 {statistics.median(first) * 1000:.2f} ms{tail}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
