"""The llama.cpp backend's decode speed with the full trace ÷ llama-cpp-python's own generation on the same GGUF file,
in the same process (a benchmark, not a test): F16, Q8_0 and Q4_K_M, greedy and sampled.

    PYTHONPATH=. python benchmarks/llamacpp.py                       # a random ~0.16B Llama, 32k vocabulary
    PYTHONPATH=. python benchmarks/llamacpp.py --hidden 512 --layers 4 --tokens 128 --repeat 5
    PYTHONPATH=. python benchmarks/llamacpp.py --types Q8_0,Q4_K_M --files /tmp/gguf  # keep the files, reuse them
    PYTHONPATH=. python benchmarks/llamacpp.py --against /tmp/before  # a checkout of the code before, in the same runs
    PYTHONPATH=. python benchmarks/llamacpp.py --model ~/models/qwen2.5-0.5b-instruct-q4_k_m.gguf

Ours: `generate` on `backends.llamacpp` with the trace recorded (top-20 candidates, every stage, the top-256 raw
logits). Theirs: `Llama.generate` (llama.cpp's own sampler chain). Both decode `--tokens` tokens past EOS from the
same prompt with the same thread count; decode speed is timed from the first token to the last, so prefill is not
in it. Runs alternate ours / theirs, each file's median over `--repeat` runs after a warm-up. Beside wall time it
prints the process's CPU time per token, every thread's (on a machine others load, wall time moves with them; CPU
time says what each side costs); `--against` adds another checkout's runs, each side's turn first rotating round
by round. The random model's weights are numpy's seeded draws (no download); its quantizations are llama.cpp's own.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
MODES = {"greedy": ({"temperature": 0}, {"temp": 0.0}),  # (our SamplerSettings, llama-cpp-python's sampling)
         "sampled (T 0.8, top-k 40, top-p 0.95, min-p 0.05)": (
             {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "seed": 0},
             {"temp": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05})}
OWN = ("app", "backends")  # the packages another checkout brings its own of (`Checkout`)


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


def random_files(folder: Path, types: list[str], hidden: int, layers: int, vocab: int) -> dict[str, Path]:
    """The random Llama's files of these `types` (F16 and llama.cpp's quantizations of it), kept in `folder`: a file
    already there (named by its shape) is reused."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"random-{hidden}x{layers}-{vocab}"
    f16 = folder / f"{name}-f16.gguf"
    if not f16.exists():
        random_llama(f16, hidden, layers, vocab)
    files = {}
    for t in types:
        path = folder / f"{name}-{t.lower()}.gguf"
        files[t] = f16 if t == "F16" else path if path.exists() else quantize_gguf(f16, path, t)
    return files


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


def ours(model: object, ids: list[int], settings: dict, tokens: int) -> tuple[float, float]:
    """Decode tok/s and CPU ms per token of Logit Lab's run with the full trace (first token to last)."""
    s = SamplerSettings(**settings).with_(max_tokens=tokens)
    request = Request(prompt_ids=tuple(ids), settings=s, ignore_eos=True)
    return rates([clocks() for e in generate(model, request, threading.Event()) if isinstance(e, Step)])


class Checkout:
    """Another Logit Lab tree (`git worktree add /tmp/before HEAD`: the code before a change) in this process, so that
    its runs alternate with this tree's under the same load: its own modules, put in sys.modules for its runs (its
    imports at run time then find its own) and this tree's put back after."""

    def __init__(self, tree: Path) -> None:
        mine = _own_modules()
        for name in mine:
            del sys.modules[name]
        sys.path.insert(0, str(tree))
        try:
            names = ("app.core.decoding.generation", "app.core.events", "app.core.settings", "backends",
                     "backends.base")
            self.generation, self.events, self.settings, self.backends, self.base = map(importlib.import_module, names)
            self.modules = _own_modules()
        finally:
            sys.path.remove(str(tree))
            self._put(mine)

    @contextmanager
    def swapped(self) -> Iterator[None]:
        mine = _own_modules()
        self._put(self.modules)
        try:
            yield
        finally:
            self._put(mine)

    @staticmethod
    def _put(modules: dict[str, object]) -> None:
        for name in _own_modules():
            del sys.modules[name]
        sys.modules.update(modules)

    def load(self, path: Path, threads: int) -> object:
        with self.swapped():
            return self.backends.get_backend("llamacpp").load(path, self.base.LoadOptions(threads=threads))

    def ours(self, model: object, ids: list[int], settings: dict, tokens: int) -> tuple[float, float]:
        with self.swapped():
            s = self.settings.SamplerSettings(**settings).with_(max_tokens=tokens)
            request = self.events.Request(prompt_ids=tuple(ids), settings=s, ignore_eos=True)
            events = self.generation.generate(model, request, threading.Event())
            return rates([clocks() for e in events if isinstance(e, self.events.Step)])


def _own_modules() -> dict[str, object]:
    return {name: m for name, m in sys.modules.items() if name.split(".")[0] in OWN}


def theirs(llm: object, ids: list[int], sampling: dict, tokens: int) -> tuple[float, float]:
    """Decode tok/s and CPU ms per token of llama-cpp-python's own `generate` (first token to last)."""
    llm.reset()  # its prompt cache would otherwise skip the prefill: the same work as ours either way
    return rates([clocks() for _ in islice(llm.generate(ids, **sampling), tokens)])


def measure(path: Path, threads: int, tokens: int, repeat: int,
            against: Checkout | None = None) -> list[tuple[str, list[float]]]:
    """Per mode: its medians of tok/s and CPU ms per token, [ours, theirs] (then the checkout's runs, `against`), each
    side's runs taking turns first round by round."""
    import llama_cpp

    from backends import get_backend

    model = get_backend("llamacpp").load(path, LoadOptions(threads=threads))
    llm = llama_cpp.Llama(str(path), n_ctx=4096, n_threads=threads, n_threads_batch=threads, verbose=False)
    ids = model.tokenizer.encode(PROMPT)
    sides = [lambda s, t: ours(model, ids, s[0], t), lambda s, t: theirs(llm, ids, s[1], t)]
    if against is not None:
        before = against.load(path, threads)
        sides.append(lambda s, t: against.ours(before, ids, s[0], t))
    rows = []
    for mode, settings in MODES.items():
        for side in sides:
            side(settings, 8)  # warm-up
        runs: list[list[tuple[float, float]]] = [[] for _ in sides]
        for r in range(repeat):
            for i in [*range(r % len(sides), len(sides)), *range(r % len(sides))]:  # who goes first rotates
                runs[i].append(sides[i](settings, tokens))
        rows.append((mode, [statistics.median(x[j] for x in side) for j in (0, 1) for side in runs]))
    for m in (model, before) if against is not None else (model,):
        m.close()
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
    p.add_argument("--types", default="F16,Q8_0,Q4_K_M", help="which of the random model's files (comma-separated)")
    p.add_argument("--files", type=Path, help="a folder to keep the random model's files in and reuse (default: made "
                   "afresh in a temporary folder)")
    p.add_argument("--against", type=Path, help="another checkout of Logit Lab (e.g. a git worktree of the commit "
                   "before a change): its runs alternate with this tree's and llama-cpp-python's in this process")
    args = p.parse_args()
    against = Checkout(args.against) if args.against else None
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.threads} thread(s) each; "
          f"{args.tokens} tokens a run, median of {args.repeat}")
    with tempfile.TemporaryDirectory() as tmp:
        files = {args.model.name: args.model} if args.model else random_files(
            args.files or Path(tmp), args.types.split(","), args.hidden, args.layers, args.vocab)
        print(f"{'file':<8} {'mode':<50} {'ours tok/s':>10} {'theirs':>7} {'ratio':>6} {'CPU ms/tok':>10} "
              f"{'theirs':>7} {'ratio':>6}" + (f" {'against':>8} {'ratio':>6} {'ours÷it':>7}" if against else ""))
        for name, path in files.items():
            for mode, m in measure(path, args.threads, args.tokens, args.repeat, against):
                a, b, ca, cb = (m[0], m[1], m[3], m[4]) if against else m
                line = f"{name:<8} {mode:<50} {a:>10.1f} {b:>7.1f} {a / b:>5.2f}x {ca:>10.2f} {cb:>7.2f} "
                more = f" {m[5]:>8.2f} {cb / m[5]:>5.2f}x {ca / m[5]:>6.2f}x" if against else ""
                print(line + f"{cb / ca:>5.2f}x" + more)


if __name__ == "__main__":
    main()
