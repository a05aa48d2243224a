"""The compiled decode step (`backends/torch/static.py`), checked on a CPU: it compiles whole, its logits are the
eager forward's, its call takes only the step's small tensors (so CUDA graphs cannot be skipped for mutated
inputs), its batched rows are the single rows, and a record read one step late is the record read at once."""

from __future__ import annotations

import inspect
import threading

import numpy as np
import pytest

from app.core.decoding.generation import generate
from app.core.events import Request, Step
from app.core.settings import SamplerSettings
from backends.base import LoadOptions

torch = pytest.importorskip("torch")

from torch._dynamo.utils import counters  # noqa: E402 - after the skip

from backends.torch.backend import TorchBackend, TorchOps  # noqa: E402
from backends.torch.static import BATCH_SIZES, StaticStep  # noqa: E402

STATIC_LEN = 48
PROMPT = [5, 17, 42, 9]


@pytest.fixture(scope="module")
def compiled(tiny_path):
    """The tiny Llama with a compiled step, its first decode step taken with torch's counters cleared."""
    model = TorchBackend().load(tiny_path, LoadOptions(device="cpu", dtype="float32", compile_len=STATIC_LEN))
    model.fast.compiled.mode = "default"  # a CPU's max-autotune tunes kernels for minutes: not what is held here
    model.fast.compiled.sizes = BATCH_SIZES  # as on CUDA (a CPU compiles one row only)
    counters.clear()
    cache = model.new_cache()
    model.forward([PROMPT], cache)
    model.forward([[7]], cache)
    return model, {k: dict(v) for k, v in counters.items()}


def prefilled(model, prompt=PROMPT):
    cache = model.new_cache()
    model.forward([prompt], cache)
    return cache


def test_the_step_compiles_as_one_graph_with_no_break(compiled):
    model, seen = compiled
    assert 1 in model.fast.compiled.calls  # fullgraph=True: a break would have raised instead
    assert not seen.get("graph_break")
    assert seen["stats"]["unique_graphs"] == 1


def test_compiled_logits_equal_the_eager_forward(compiled, torch_model):
    model, _ = compiled
    fast, eager = prefilled(model), prefilled(torch_model)
    for token in (7, 100, 3, 250):
        got, want = model.forward([[token]], fast), torch_model.forward([[token]], eager)
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    assert fast.pos == eager.pos == len(PROMPT) + 4


def test_the_compiled_call_takes_only_the_steps_small_tensors(compiled):
    model, _ = compiled
    assert list(inspect.signature(StaticStep.forward).parameters) == ["self", "ids", "pos"]
    steps, seen = model.fast.compiled, []
    inner = steps.calls[1]
    steps.calls[1] = lambda *args: seen.append(args) or inner(*args)
    try:
        cache = prefilled(model)
        model.forward([[11]], cache)
    finally:
        steps.calls[1] = inner
    (args,) = seen
    kv = {t.untyped_storage().data_ptr() for t in (*cache.k, *cache.v)}
    assert [tuple(a.shape) for a in args] == [(1, 1), ()]  # ids (B, 1), position
    assert all(a.untyped_storage().data_ptr() not in kv for a in args)
    buffers = list(steps.step(1).buffers())
    assert all(b.data_ptr() in kv for b in buffers)  # the KV buffers are the module's own
    # ... which dynamo marks static: CUDA graphs then allow their in-place writes (they skip for other inputs)
    assert all(getattr(b, "_dynamo_static_input_type", None) for b in buffers)


def test_batched_compiled_rows_equal_single_rows(compiled):
    model, _ = compiled
    base = prefilled(model)
    for b in BATCH_SIZES[1:2]:  # 2: its own static cache and compiled graph (4 and 8 alike, compiled on use)
        rows = model.fast.fork(base, b)
        tokens = [[7 + 13 * i] for i in range(b)]
        got = [model.forward(tokens, rows), model.forward([[3]] * b, rows)]
        assert b in model.fast.compiled.calls
        for i in range(b):
            single = model.fast.fork(base, 1)
            want = [model.forward([tokens[i]], single), model.forward([[3]], single)]
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(g[i], w[0], atol=1e-5, rtol=1e-5)


def test_a_cache_bound_away_keeps_its_content(compiled, torch_model):
    """Two caches take turns on one compiled step (a kept prefix and a new run): each goes on from its own."""
    model, _ = compiled
    a, b = prefilled(model), prefilled(model, [9, 9, 1])
    ref_a, ref_b = prefilled(torch_model), prefilled(torch_model, [9, 9, 1])
    for token in (4, 8):
        for cache, ref in ((a, ref_a), (b, ref_b)):
            np.testing.assert_allclose(model.forward([[token]], cache), torch_model.forward([[token]], ref),
                                       atol=1e-5, rtol=1e-5)
    model.trim(a, 2)
    torch_model.trim(ref_a, 2)
    np.testing.assert_allclose(model.forward([[5]], a), torch_model.forward([[5]], ref_a), atol=1e-5, rtol=1e-5)


def samples(model, ops, settings: dict, n: int = 2) -> list:
    saved, model.ops = model.ops, ops
    try:
        req = Request(prompt_ids=tuple(PROMPT), settings=SamplerSettings(**settings), ignore_eos=True, n=n)
        return [e.trace.sample for e in generate(model, req, threading.Event()) if isinstance(e, Step)]
    finally:
        model.ops = saved


SETTINGS = [{"temperature": 0.9, "top_k": 40, "top_p": 0.9, "repetition_penalty": 1.2, "seed": 3, "max_tokens": 10},
            {"temperature": 0.0, "seed": 1, "max_tokens": 10}]


@pytest.mark.parametrize("settings", SETTINGS, ids=["sampling", "greedy"])
def test_the_record_read_a_step_late_equals_the_record_read_at_once(compiled, settings: dict):
    """On torch tensors: step t+1's forward queued before step t's record is read (through the host copies) gives
    the same trace, bit for bit, as reading each step before the next forward."""
    model, _ = compiled
    traces = {}
    for overlap in (True, False):
        ops = TorchOps(torch.device("cpu"))
        ops.overlap = overlap
        traces[overlap] = samples(model, ops, settings)
    assert len(traces[True]) == len(traces[False]) == 20
    for a, b in zip(traces[True], traces[False], strict=True):
        assert (a.token, a.rank, a.u, a.stage_names) == (b.token, b.rank, b.u, b.stage_names)
        for name in ("top_ids", "kept", "values"):  # every number of the record (values: float32, all of them)
            assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name


def test_the_compiled_sampler_step_gives_the_eager_record(compiled):
    """With --compile on a GPU the sampler's step is compiled too, whole: here on the CPU it draws the same tokens
    and records the same candidates, ranks and cuts as eager, its probabilities within float32 rounding."""
    model, _ = compiled
    settings = {**SETTINGS[0], "max_tokens": 4}
    eager = samples(model, TorchOps(torch.device("cpu")), settings)
    counters.clear()
    steps = samples(model, TorchOps(torch.device("cpu"), compile_steps=True), settings)
    assert not counters.get("graph_break")  # fullgraph=True: a break would have raised instead
    assert len(steps) == len(eager) == 8
    for a, b in zip(steps, eager, strict=True):
        assert (a.token, a.rank) == (b.token, b.rank)
        assert np.array_equal(a.top_ids, b.top_ids) and np.array_equal(a.kept, b.kept)
        np.testing.assert_allclose(a.values, b.values, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_the_step_and_the_sampler_run_as_cuda_graphs(tiny_path):
    model = TorchBackend().load(tiny_path, LoadOptions(device="cuda", dtype="float32", compile_len=STATIC_LEN))
    counters.clear()
    got = samples(model, model.ops, {**SETTINGS[0], "max_tokens": 8}, n=1)
    eager = TorchBackend().load(tiny_path, LoadOptions(device="cuda", dtype="float32"))
    want = samples(eager, eager.ops, {**SETTINGS[0], "max_tokens": 8}, n=1)
    assert counters["inductor"]["cudagraph_skips"] == 0
    assert [s.token for s in got] == [s.token for s in want]


def test_the_bench_fails_loudly_when_inductor_skips_our_cuda_graph(capsys):
    """A skip, as inductor reports it (its own function), is filed under the bench's phase; ours fail the bench."""
    from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

    from app.cli.bench.command import Phase, graphs_verdict
    from app.cli.bench.table import graph_report, print_graphs
    from backends.baselines import watch_graph_skips

    reason = "skipping cudagraphs due to mutated inputs (44 instances)"
    with watch_graph_skips(True) as watch:
        phase = Phase(watch)
        for name in ("baseline-static", "trace"):
            phase(name)
            log_cudagraph_skip_and_bump_counter(reason)
    report = graph_report(watch)
    assert (report["skips_ours"], report["skips_baseline_static"], report["skips_unattributed"]) == (1, 1, 0)
    assert graphs_verdict({"compiled": True, "cuda_graphs": report}) == 3
    assert graphs_verdict({"compiled": True, "cuda_graphs": {**report, "skips_ours": 0}}) == 0
    print_graphs(report)
    out, err = capsys.readouterr()
    assert "CUDA graphs: SKIPPED" in out and f"trace: {reason}" in out
    assert "CUDA graphs were SKIPPED" in err and "mutated inputs" in err
