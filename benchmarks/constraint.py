"""What a constraint's grammar costs per step, as a ratio to a plain step measured in the same run, on the CPU.

The logits path: the whole sampler step (`start_sample(...).result()`: the pipeline, the draw and the trace's record,
on numpy, the torch backend's CPU executor) over random logits, for a plain step and for a step constrained to a JSON
schema (the matcher following the tokens drawn, its mask, the grammar stage, its record). llguidance needs a real
tokenizer of that size: a byte-level BPE vocabulary is synthesized on the spot (the 256 bytes, then word pieces of
letters, digits, spaces and JSON's punctuation). When a JSON object is complete the row starts another.

    PYTHONPATH=. python benchmarks/constraint.py [--vocab 32000 152000] [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from app.core.sampler.constraint import matcher_for
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import start_sample
from app.core.settings import SamplerSettings
from app.core.stage_inputs import Constraint
from backends.ops import NUMPY

SCHEMA = {"type": "object", "required": ["name", "age", "city", "tags"], "additionalProperties": False,
          "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0},
                         "city": {"enum": ["Paris", "Lagos", "Osaka", "Lima"]},
                         "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4}}}
PLAIN = SamplerSettings(temperature=0.8, top_k=40, top_p=0.95)
EOS = "<|endoftext|>"


def synthetic_tokenizer(vocab: int):
    """A byte-level BPE tokenizer of `vocab` tokens: the 256 bytes, end-of-text, and random word pieces (no merges:
    the grammar engine reads the vocabulary, not how text is split)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from backends.hf.tokenizer import HFTokenizer

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_char = {b: c for b, c in zip(sorted(range(256)), _byte_chars(), strict=True)}
    pieces = dict.fromkeys(sorted(alphabet))
    rng = np.random.default_rng(0)
    letters = list("etaoinshrdlucmfwypvbgkjqxz" * 4 + "ETAOINSHRD" + "0123456789" + ' ",:{}[]-_.!?\n')
    while len(pieces) < vocab - 1:
        n = int(rng.integers(2, 9))
        text = ("Ġ" if rng.random() < 0.4 else "") + "".join(byte_char[ord(c)] for c in rng.choice(letters, n))
        pieces[text] = None
    ids = {piece: i for i, piece in enumerate(pieces)}
    ids[EOS] = len(ids)
    raw = Tokenizer(models.BPE(ids, []))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.add_special_tokens([EOS])
    return HFTokenizer(PreTrainedTokenizerFast(tokenizer_object=raw, eos_token=EOS))


def _byte_chars() -> list[str]:
    """GPT-2's byte-level alphabet, byte 0 to 255."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs, strict=True))]


def run(tok, vocab: int, steps: int) -> tuple[list[float], list[float], list[int]]:
    """Each step's seconds, plain and constrained (taken in turn on the same logits, so that both see the same
    machine), and the constrained step's legal count, over `steps` steps of random logits."""
    rng = np.random.default_rng(1)
    c = Constraint("json_schema", json.dumps(SCHEMA))
    bound = PLAIN.with_(constraint=c)
    free, row = _row(tok, vocab, None), _row(tok, vocab, c)
    plain, constrained, legal = [], [], []
    for _ in range(steps):
        logits = (rng.normal(size=vocab) * 3).astype(np.float32)
        u = float(rng.random())
        if row.grammar.end(row.host_ids(NUMPY)) is not None:  # complete: another object
            row = _row(tok, vocab, c)
        t = time.perf_counter()
        start_sample(NUMPY, logits, PLAIN, u, history=free).result()
        t1 = time.perf_counter()
        s = start_sample(NUMPY, logits, bound, u, history=row).result()
        constrained.append(time.perf_counter() - t1)
        plain.append(t1 - t)
        legal.append(s.grammar.legal)
    return plain, constrained, legal


def _row(tok, vocab: int, c: Constraint | None) -> History:
    history = History.start(NUMPY, vocab, [0])
    if c is not None:
        history.grammar = matcher_for(c, tok, vocab, 1)
    return history


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocab", type=int, nargs="+", default=[32_000, 152_000])
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args()
    for vocab in args.vocab:
        t = time.perf_counter()
        tok = synthetic_tokenizer(vocab)
        matcher_for(Constraint("json_schema", json.dumps(SCHEMA)), tok, vocab, 0)  # the token table, compiled once
        setup = time.perf_counter() - t
        run(tok, vocab, 20)  # warm
        plain, bound, legal = run(tok, vocab, args.steps)
        base, med, mean = statistics.median(plain), statistics.median(bound), statistics.fmean(bound)
        print(f"vocabulary {vocab:,} (tokenizer and grammar built in {setup:.1f} s): plain step {base * 1e3:.2f} ms "
              f"(the baseline); constrained to a JSON schema {med * 1e3:.2f} ms median = {med / base:.2f}x, mean "
              f"{mean * 1e3:.2f} ms = {mean / statistics.fmean(plain):.2f}x, p95 {np.percentile(bound, 95) * 1e3:.2f} "
              f"ms; legal tokens per step: median {int(statistics.median(legal)):,}")


if __name__ == "__main__":
    main()
