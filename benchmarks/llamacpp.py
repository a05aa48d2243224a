"""The llama.cpp backend's decode speed with the full trace ÷ llama-cpp-python's own generation on the same GGUF file,
in the same process (a benchmark, not a test): F16, Q8_0 and Q4_K_M, greedy and sampled.

    PYTHONPATH=. python benchmarks/llamacpp.py                       # a random ~0.16B Llama, 32k vocabulary
    PYTHONPATH=. python benchmarks/llamacpp.py --hidden 512 --layers 4 --tokens 128 --repeat 5
    PYTHONPATH=. python benchmarks/llamacpp.py --model ~/models/qwen2.5-0.5b-instruct-q4_k_m.gguf

Ours: `generate` on `backends.llamacpp` with the trace recorded (top-20 candidates, every stage, the top-256 raw
logits). Theirs: `Llama.generate` (llama.cpp's own sampler chain). Both decode `--tokens` tokens past EOS from the
same prompt with the same thread count; decode speed is timed from the first token to the last, so prefill is not
in it. Runs alternate ours / theirs, each file's median over `--repeat` runs after a warm-up. Beside wall time it
prints the process's CPU time per token, every thread's (on a machine others load, wall time moves with them; CPU
time says what each side costs). The random model's weights are numpy's seeded draws (no download); its
quantizations are llama.cpp's own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from itertools import islice
from pathlib import Path

import numpy as np

from app.core.decoding.generation import generate
from app.core.events import Request, Step
from app.core.settings import SamplerSettings
from backends.base import LoadOptions
from tests.gguf_files import quantize_gguf
from tests.tiny import make_tokenizer

PROMPT = "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(i * i)\n"
MODES = {"greedy": (SamplerSettings(temperature=0), {"temp": 0.0}),
         "sampled (T 0.8, top-k 40, top-p 0.95, min-p 0.05)": (
             SamplerSettings(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=0),
             {"temp": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05})}


def random_llama(dst: Path, hidden: int, layers: int, vocab: int, seed: int = 0) -> Path:
    """A random Llama as an F16 GGUF: `hidden` wide (heads of 64, a quarter as many KV heads), `layers` deep, a
    byte-level BPE vocabulary padded to `vocab` tokens with unused ones."""
    import gguf

    tok = make_tokenizer()
    words = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    tokens = [w for w, _ in words] + [f"<unused_{i}>" for i in range(vocab - len(words))]
    heads = hidden // 64
    kv_heads, ffn = max(1, heads // 4), hidden * 11 // 4 // 64 * 64
    w = gguf.GGUFWriter(str(dst), "llama")
    for add, value in ((w.add_context_length, 4096), (w.add_embedding_length, hidden), (w.add_block_count, layers),
                       (w.add_feed_forward_length, ffn), (w.add_head_count, heads), (w.add_head_count_kv, kv_heads),
                       (w.add_rope_dimension_count, 64), (w.add_vocab_size, vocab)):
        add(value)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(1)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t == tok.eos_token else 1 if i < len(words) else 5 for i, t in enumerate(tokens)])
    w.add_token_merges(_merges(tok))
    w.add_bos_token_id(tok.bos_token_id)
    w.add_eos_token_id(tok.eos_token_id)
    w.add_add_bos_token(False)
    rng = np.random.default_rng(seed)

    def dense(name: str, rows: int, cols: int) -> None:
        w.add_tensor(name, (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(np.float16))

    dense("token_embd.weight", vocab, hidden)
    dense("output.weight", vocab, hidden)
    w.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    for i in range(layers):
        b = f"blk.{i}."
        for name, rows, cols in (("attn_q", hidden, hidden), ("attn_k", kv_heads * 64, hidden),
                                 ("attn_v", kv_heads * 64, hidden), ("attn_output", hidden, hidden),
                                 ("ffn_gate", ffn, hidden), ("ffn_up", ffn, hidden), ("ffn_down", hidden, ffn)):
            dense(f"{b}{name}.weight", rows, cols)
        w.add_tensor(f"{b}attn_norm.weight", np.ones(hidden, dtype=np.float32))
        w.add_tensor(f"{b}ffn_norm.weight", np.ones(hidden, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def _merges(tok: object) -> list[str]:
    import json

    merges = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]
    return [" ".join(m) if isinstance(m, list) else m for m in merges]


def clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def rates(times: list[tuple[float, float]]) -> tuple[float, float]:
    """Tokens per wall second and CPU milliseconds per token, from the first token's clocks to the last's."""
    n = len(times) - 1
    return n / (times[-1][0] - times[0][0]), (times[-1][1] - times[0][1]) * 1e3 / n


def ours(model: object, ids: list[int], settings: SamplerSettings, tokens: int) -> tuple[float, float]:
    """Decode tok/s and CPU ms per token of Logit Lab's run with the full trace (first token to last)."""
    request = Request(prompt_ids=tuple(ids), settings=settings.with_(max_tokens=tokens), ignore_eos=True)
    return rates([clocks() for e in generate(model, request, threading.Event()) if isinstance(e, Step)])


def theirs(llm: object, ids: list[int], sampling: dict, tokens: int) -> tuple[float, float]:
    """Decode tok/s and CPU ms per token of llama-cpp-python's own `generate` (first token to last)."""
    llm.reset()  # its prompt cache would otherwise skip the prefill: the same work as ours either way
    return rates([clocks() for _ in islice(llm.generate(ids, **sampling), tokens)])


def measure(path: Path, threads: int, tokens: int, repeat: int) -> list[tuple[str, float, float, float, float]]:
    """Per mode: (mode, ours tok/s, theirs tok/s, ours CPU ms/token, theirs CPU ms/token), medians."""
    import llama_cpp

    from backends import get_backend

    model = get_backend("llamacpp").load(path, LoadOptions(threads=threads))
    llm = llama_cpp.Llama(str(path), n_ctx=4096, n_threads=threads, n_threads_batch=threads, verbose=False)
    ids = model.tokenizer.encode(PROMPT)
    rows = []
    for mode, (settings, sampling) in MODES.items():
        ours(model, ids, settings, 8), theirs(llm, ids, sampling, 8)  # warm-up
        a, b = [], []
        for r in range(repeat):
            for who in ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours"):  # alternate who goes first
                if who == "ours":
                    a.append(ours(model, ids, settings, tokens))
                else:
                    b.append(theirs(llm, ids, sampling, tokens))
        rows.append((mode, *(statistics.median(x[i] for x in side) for i in (0, 1) for side in (a, b))))
    model.close()
    llm.close()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, help="a GGUF file of yours (default: a random Llama in F16, Q8_0, Q4_K_M)")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    args = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.threads} thread(s) each; "
          f"{args.tokens} tokens a run, median of {args.repeat}")
    with tempfile.TemporaryDirectory() as tmp:
        if args.model:
            files = {args.model.name: args.model}
        else:
            f16 = random_llama(Path(tmp) / "random-f16.gguf", args.hidden, args.layers, args.vocab)
            files = {"F16": f16, "Q8_0": quantize_gguf(f16, Path(tmp) / "random-q8_0.gguf", "Q8_0"),
                     "Q4_K_M": quantize_gguf(f16, Path(tmp) / "random-q4_k_m.gguf", "Q4_K_M")}
        print(f"{'file':<8} {'mode':<50} {'ours tok/s':>10} {'theirs':>7} {'ratio':>6} {'CPU ms/tok':>10} "
              f"{'theirs':>7} {'ratio':>6}")
        for name, path in files.items():
            for mode, a, b, ca, cb in measure(path, args.threads, args.tokens, args.repeat):
                print(f"{name:<8} {mode:<50} {a:>10.1f} {b:>7.1f} {a / b:>5.2f}x {ca:>10.2f} {cb:>7.2f} "
                      f"{cb / ca:>5.2f}x")


if __name__ == "__main__":
    main()
