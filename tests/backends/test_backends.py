"""Both real backends on the same tiny weights: parity, the KV cache, the shared pipeline, detokenization."""

from __future__ import annotations

import threading

import numpy as np

from app.core.decoding.generation import generate
from app.core.events import Finished, Message, Request, Step
from app.core.settings import SamplerSettings

PROMPT = "def add(a, b):"


def run(model, settings: SamplerSettings, prompt: str = PROMPT, **kw) -> tuple[list[Step], Finished]:
    events = list(generate(model, Request(prompt=prompt, settings=settings, **kw), threading.Event()))
    return [e for e in events if isinstance(e, Step)], events[-1]


def test_same_weights_same_logits_on_mlx_and_torch(torch_model, mlx_model):
    ids = torch_model.tokenizer.encode("Hello, world! こんにちは 🙂")
    assert ids == mlx_model.tokenizer.encode("Hello, world! こんにちは 🙂")
    t = np.asarray(torch_model.forward([ids], torch_model.new_cache(), positions="all"))
    m = np.array(mlx_model.forward([ids], mlx_model.new_cache(), positions="all"))
    assert t.shape == m.shape == (1, len(ids), torch_model.info.vocab_size)
    np.testing.assert_allclose(m, t, atol=2e-4, rtol=1e-4)


def test_identical_greedy_and_seeded_output_on_both_backends(torch_model, mlx_model):
    for s in (SamplerSettings(temperature=0, max_tokens=24), SamplerSettings(temperature=1.0, top_p=0.9, seed=7,
                                                                             max_tokens=24)):
        a, _ = run(torch_model, s)
        b, _ = run(mlx_model, s)
        assert [x.token_id for x in a] == [x.token_id for x in b]


def test_cached_decoding_equals_recomputing_the_whole_sequence(model):
    steps, _ = run(model, SamplerSettings(temperature=0, max_tokens=16))
    ids = model.tokenizer.encode(PROMPT)
    for st in steps:
        logits = model.ops.numpy(model.forward([ids], model.new_cache()))
        assert logits.shape == (1, model.info.vocab_size) and int(np.argmax(logits[0])) == st.token_id
        ids.append(st.token_id)


def test_streaming_detokenization_is_byte_exact_for_emoji_and_cjk(model):
    text = "naïve café 🙂🚀 温度は確率を変える。 こんにちは世界 👋🌍 done"
    ids = model.tokenizer.encode(text)
    dec = model.tokenizer.stream()
    pieces = [dec.add(i) for i in ids]
    assert "".join(pieces) + dec.flush() == text
    assert all("\ufffd" not in p for p in pieces)


def test_a_broken_character_at_the_end_is_flushed_not_dropped(model):
    ids = model.tokenizer.encode("🙂")
    dec = model.tokenizer.stream()
    out = "".join(dec.add(i) for i in ids[:-1])
    assert out + dec.flush() == model.tokenizer.decode(ids[:-1])


def test_stop_strings_spanning_tokens_are_cut_and_not_shown(model):
    steps, _ = run(model, SamplerSettings(temperature=0, max_tokens=40))
    text = "".join(s.text for s in steps)
    stop = text[5:12]  # some text that spans several tokens of the greedy continuation
    assert len(model.tokenizer.encode(stop)) > 1
    steps2, fin2 = run(model, SamplerSettings(temperature=0, max_tokens=40, stop=(stop,)))
    assert fin2.reason == "stop"
    assert "".join(s.text for s in steps2) == text[: text.index(stop)]


def test_max_tokens_eos_and_metrics(model):
    steps, fin = run(model, SamplerSettings(temperature=0.8, seed=1, max_tokens=12))
    assert fin.reason in ("length", "eos") and len(steps) <= 12
    m = fin.metrics
    assert m.generated_tokens == len(fin.trace.steps) and m.prompt_tokens == len(model.tokenizer.encode(PROMPT))
    assert m.ttft_s > 0 and m.kv_cache_bytes > 0 and m.decode_tokens_per_s > 0


def test_cancel_is_honoured_within_one_step(model):
    cancel = threading.Event()
    req = Request(prompt=PROMPT, settings=SamplerSettings(max_tokens=500, seed=0), ignore_eos=True)  # (no early end)
    gen = generate(model, req, cancel)
    n = 0
    for ev in gen:
        if isinstance(ev, Step):
            n += 1
            if n == 3:
                cancel.set()
        if isinstance(ev, Finished):
            assert ev.reason == "cancelled"
    assert n <= 4


def test_chat_mode_uses_the_template(model):
    req = Request(messages=(Message("system", "Be brief."), Message("user", "Hi")),
                  settings=SamplerSettings(max_tokens=3, seed=0))
    events = list(generate(model, req, threading.Event()))
    assert events[0].prompt_text == "<|system|>Be brief.\n<|user|>Hi\n<|assistant|>"


def test_the_lean_torch_forward_matches_transformers(tiny_path, torch_model):
    from backends.base import LoadOptions
    from backends.torch.backend import TorchBackend

    assert torch_model.fast is not None
    plain = TorchBackend().load(tiny_path, LoadOptions(device="cpu", dtype="float32", fast=False))
    assert plain.fast is None
    ids = torch_model.tokenizer.encode("Hello, world! The quick brown fox. 🙂")
    want = np.asarray(plain.forward([ids], plain.new_cache(), positions="all"))
    cache = torch_model.new_cache()  # prefill in two chunks, then decode: the cache path too
    got = np.concatenate([np.asarray(torch_model.forward([ids[:7]], cache, positions="all")),
                          np.asarray(torch_model.forward([ids[7:]], cache, positions="all"))], axis=1)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
    steps_fast, _ = run(torch_model, SamplerSettings(temperature=0, max_tokens=20))
    steps_plain, _ = run(plain, SamplerSettings(temperature=0, max_tokens=20))
    assert [s.token_id for s in steps_fast] == [s.token_id for s in steps_plain]
    torch_model.trim(cache, 3)
    assert cache.pos == len(ids) - 3


def _prefilled(model, tokens: list[list[int]]):
    cache = model.new_cache()
    model.forward(tokens, cache)
    return cache


def test_the_opt_in_compiled_static_cache_gives_the_same_tokens(tiny_path, torch_model):
    import torch

    from backends.base import LoadOptions
    from backends.torch.backend import TorchBackend

    compiled = TorchBackend().load(tiny_path, LoadOptions(device="cpu", dtype="float32", compile_len=64))
    s = SamplerSettings(temperature=0, max_tokens=12)
    assert compiled.fast.static_len == 64
    cache = compiled.new_cache()
    compiled.forward([[1, 2, 3]], cache)  # the static step attends over the whole buffer, masked: no NaN may hide there
    assert cache.k[0].shape[2] == 64  # buffers of exactly the static length: the decode steps take the compiled one
    assert all(bool(torch.isfinite(b).all()) for b in (*cache.k, *cache.v))
    rows, plain = compiled.fork(cache, 2), torch_model.fork(_prefilled(torch_model, [[1, 2, 3]]), 2)
    np.testing.assert_allclose(compiled.forward([[4], [5]], rows), torch_model.forward([[4], [5]], plain),
                               atol=1e-5)  # a batch of rows takes the eager step: one compiled graph, for B = 1
    got, _ = run(compiled, s)
    want, _ = run(torch_model, s)
    assert [x.token_id for x in got] == [x.token_id for x in want]
    long, _ = run(compiled, s.with_(max_tokens=70))  # past the static length: grows and falls back to eager
    assert len(long) == 70 or long[-1].token_id in compiled.tokenizer.eos_ids


def test_the_lean_forward_keeps_the_weights_once(torch_model):
    """It re-lays the weights out for the CPU's matrix-vector products; transformers' modules then hold views of
    the new storage, so a laptop does not hold the model twice."""
    hf, fast = torch_model.model, torch_model.fast
    logical = sum(p.numel() * p.element_size() for p in hf.parameters())
    storages = {}
    for name, p in [*hf.named_parameters(), *fast.w.named_parameters()]:
        if name not in ("cos", "sin") and not name.endswith("qkv_bias"):  # derived tables, small
            storages[p.untyped_storage().data_ptr()] = p.untyped_storage().nbytes()
    assert sum(storages.values()) == logical
    assert not fast.w.layers[0].qkv.t().is_contiguous()  # input-major on the CPU: (in, out) rows
