"""The llama.cpp backend on GGUF files written here from the session's tiny Llama (F32, F16, and llama.cpp's own
Q8_0 and Q4_K_M quantizations), held to llama-cpp-python itself: the same tokens as the HF tokenizer, the same
greedy tokens as `Llama.generate`, each step's record what our sampler makes of `Llama.eval`'s logits; trim, fork
and beam reordering compute what a fresh prefill computes; `--n`, a branch, beam search, speculative decoding and
`logitlab diff` (a Q8_0 file against its F32 source) run on it; what it cannot open is refused in one line."""

from __future__ import annotations

import json
import shutil
import threading
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from app.core.decoding.beam import BeamSettings
from app.core.decoding.generation import Prefix, generate
from app.core.events import Finished, Request, Step
from app.core.runs.beam_run import BeamFinished, BeamRequest, run_beam
from app.core.runs.speculative_run import run_speculative
from app.core.sampler.sampling import sample
from app.core.settings import SamplerSettings
from backends import get_backend, installed, resolve_name
from backends.base import LoadOptions, ModelLoadError
from backends.ops import NUMPY
from tests.backends.test_gguf import rewritten
from tests.gguf_files import quantize_gguf, write_gguf

llama_cpp = pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

PROMPT = "def add(a, b):\n    return a + b\n\nfor i in range(10):"
TEXTS = ["def add(a, b):\n    return a + b", "Hello, world! こんにちは 🙂 naïve café", "  spaces\t\ttabs 123 4567"]


@pytest.fixture(scope="module")
def ggufs(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("llamacpp")
    write_gguf(tiny_path, out / "tiny-f32.gguf")
    write_gguf(tiny_path, out / "tiny-f16.gguf", quant="F16")
    quantize_gguf(out / "tiny-f32.gguf", out / "tiny-q8_0.gguf", "Q8_0")
    quantize_gguf(out / "tiny-f32.gguf", out / "tiny-q4_k.gguf", "Q4_K_M")
    return out


@pytest.fixture(scope="module")
def lcpp(ggufs: Path):
    return get_backend("llamacpp").load(ggufs / "tiny-f32.gguf", LoadOptions())


def events(model, request: Request, prefix: Prefix | None = None) -> tuple[list[Step], list[Finished]]:
    out = list(generate(model, request, threading.Event(), prefix))
    return [e for e in out if isinstance(e, Step)], [e for e in out if isinstance(e, Finished)]


def peer(path: Path, **kw) -> llama_cpp.Llama:
    """llama-cpp-python's own engine on the same file, one thread as ours on a tiny model."""
    return llama_cpp.Llama(str(path), n_ctx=512, n_threads=1, verbose=False, **kw)


# -- the file's own tokenizer ---------------------------------------------------------------------------------------


def test_the_files_tokenizer_encodes_and_decodes_as_the_hf_one(lcpp, torch_model, ggufs: Path, tmp_path: Path):
    ours, hf = lcpp.tokenizer, torch_model.tokenizer
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == hf.encode(text)
        assert ours.decode(ids) == hf.decode(ids) == text
        stream = ours.stream()
        pieces = [stream.add(i) for i in ids] + [stream.flush()]
        assert "".join(pieces) == text and not any("\ufffd" in p for p in pieces)  # never half a character
    assert ours.eos_ids == hf.eos_ids and ours.bos_id == hf.bos_id
    part = next(i for i in ours.encode("こんにちは") if ours.token_text(i).startswith("‹"))  # a piece of a character
    assert ours.token_text(part) == hf.token_text(part)
    messages = [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello."}]
    assert ours.apply_chat_template(messages) == hf.apply_chat_template(messages)
    beside = tmp_path / "with-tokenizer"  # a GGUF beside its model's tokenizer.json: the HF tokenizer, exact
    beside.mkdir()
    shutil.copy(ggufs / "tiny-f32.gguf", beside)
    for f in torch_model.tokenizer.hf.save_pretrained(beside):
        assert Path(f).exists()
    model = get_backend("llamacpp").load(beside / "tiny-f32.gguf", LoadOptions())
    assert type(model.tokenizer).__name__ == "HFTokenizer" and model.tokenizer.encode(TEXTS[1]) == hf.encode(TEXTS[1])
    model.close()


# -- the same numbers as llama-cpp-python -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiny-f32.gguf", "tiny-f16.gguf", "tiny-q4_k.gguf"])
def test_greedy_tokens_are_llama_cpp_pythons_own(ggufs: Path, name: str):
    model = get_backend("llamacpp").load(ggufs / name, LoadOptions())
    request = Request(prompt=PROMPT, settings=SamplerSettings(temperature=0, max_tokens=24), ignore_eos=True)
    steps, _ = events(model, request)
    ids = model.tokenizer.encode(PROMPT)
    theirs = list(islice(peer(ggufs / name).generate(ids, temp=0.0), 24))
    assert [s.token_id for s in steps] == theirs
    model.close()


def test_each_steps_record_is_our_sampler_over_llama_cpps_logits(lcpp, ggufs: Path):
    settings = SamplerSettings(temperature=0.8, top_k=30, top_p=0.9, seed=7, max_tokens=12)
    _, [done] = events(lcpp, Request(prompt=PROMPT, settings=settings, ignore_eos=True))
    trace = done.trace
    ids = list(trace.prompt_ids) + trace.token_ids
    llm = peer(ggufs / "tiny-f32.gguf", logits_all=True)
    llm.eval(ids[:-1])
    scores = np.asarray(llm.scores[: llm.n_tokens])  # (T, V): llama.cpp's logits at every position
    for i, st in enumerate(trace.steps):
        want = sample(NUMPY, scores[len(trace.prompt_ids) - 1 + i], settings, st.sample.u, top_n=20)
        got = st.sample
        assert got.token == want.token and got.rank == want.rank
        np.testing.assert_array_equal(got.top_ids[:20], want.top_ids[:20])
        np.testing.assert_allclose(got.probs, want.probs, atol=1e-6)
        np.testing.assert_allclose(got.top_logits, want.top_logits, atol=1e-5)


# -- the cache: sequences of one context ---------------------------------------------------------------------------


def test_trim_fork_and_reorder_compute_what_a_fresh_prefill_computes(lcpp):
    ids = lcpp.tokenizer.encode(PROMPT)

    def fresh(tokens: list[int]) -> np.ndarray:  # (a batch of B rows rounds apart from one row: ~1e-5)
        return lcpp.forward([tokens], lcpp.new_cache())[0]

    whole = lcpp.forward([ids], lcpp.new_cache(), "all")[0]  # (T, V)
    cache = lcpp.new_cache()
    lcpp.forward([ids], cache)
    lcpp.trim(cache, 4)
    assert lcpp.cache_len(cache) == len(ids) - 4
    np.testing.assert_allclose(lcpp.forward([ids[-4:]], cache, "all")[0], whole[-4:], atol=1e-5)
    rows = lcpp.fork(cache, 3)  # the prompt's cache stays usable beside its rows
    got = lcpp.forward([[10], [11], [12]], rows)
    for i, t in enumerate((10, 11, 12)):
        np.testing.assert_allclose(got[i], fresh([*ids, t]), atol=1e-4, err_msg=f"row {i}")
    lcpp.reorder(rows, [2, 2, 0, 1])  # repeats, and the batch grows
    got = lcpp.forward([[20], [21], [22], [23]], rows)
    for i, (first, then) in enumerate([(12, 20), (12, 21), (10, 22), (11, 23)]):
        np.testing.assert_allclose(got[i], fresh([*ids, first, then]), atol=1e-4, err_msg=f"row {i}")
    np.testing.assert_allclose(lcpp.forward([[5]], cache)[0], fresh([*ids, 5]), atol=1e-5)
    with pytest.raises(ValueError, match="3-row cache cannot take a batch of 2"):
        lcpp.forward([[1], [2]], lcpp.fork(cache, 3))


def test_n_samples_and_a_branch_draw_what_they_draw_alone(lcpp):
    settings = SamplerSettings(temperature=1.0, top_k=40, seed=11, max_tokens=10)
    steps, done = events(lcpp, Request(prompt=PROMPT, settings=settings, n=3, ignore_eos=True))
    assert len(done) == 3 and len(steps) == 30
    for i, d in enumerate(sorted(done, key=lambda d: d.trace.settings.seed)):
        _, [alone] = events(lcpp, Request(prompt=PROMPT, settings=settings.with_(seed=11 + i), ignore_eos=True))
        assert d.trace.token_ids == alone.trace.token_ids, f"sample {i}"
    prefix = Prefix()
    _, [parent] = events(lcpp, Request(prompt=PROMPT, settings=settings, ignore_eos=True), prefix)
    t, k = parent.trace, 4
    runner_up = int(next(i for i in t.steps[k].sample.top_ids if i != t.steps[k].token_id))
    _, [child] = events(lcpp, Request(prompt_ids=tuple(t.prompt_ids), settings=settings, inherited=tuple(t.steps[:k]),
                                      parent=(t.run_id, k), force=runner_up), prefix)
    assert child.trace.token_ids[:k] == t.token_ids[:k] and child.trace.token_ids[k] == runner_up
    assert child.metrics.reused_tokens == len(t.prompt_ids) + k - 1  # the prefix's sequence, trimmed and reused
    np.testing.assert_allclose(child.trace.steps[k].sample.probs, t.steps[k].sample.probs, atol=1e-6)


def test_beam_search_and_speculative_decoding_run_on_it(lcpp, ggufs: Path, torch_model):
    request = BeamRequest(prompt=PROMPT, settings=BeamSettings(3, max_tokens=6))
    [ours] = [e for e in run_beam(lcpp, request, threading.Event()) if isinstance(e, BeamFinished)]
    [theirs] = [e for e in run_beam(torch_model, request, threading.Event()) if isinstance(e, BeamFinished)]
    assert [h.tokens for h in ours.result.hypotheses] == [h.tokens for h in theirs.result.hypotheses]
    np.testing.assert_allclose([h.score for h in ours.result.hypotheses],
                               [h.score for h in theirs.result.hypotheses], atol=1e-3)  # (llama.cpp: a float16 KV)
    draft = get_backend("llamacpp").load(ggufs / "tiny-q8_0.gguf", LoadOptions())
    greedy = SamplerSettings(temperature=0, max_tokens=16)
    spec = [e.token_id for e in run_speculative(lcpp, draft, Request(prompt=PROMPT, settings=greedy, draft_k=3,
                                                                      ignore_eos=True), threading.Event())
            if isinstance(e, Step)]
    plain, _ = events(lcpp, Request(prompt=PROMPT, settings=greedy, ignore_eos=True))
    assert spec == [s.token_id for s in plain]
    draft.close()


# -- the command line and the choice of backend ---------------------------------------------------------------------


def test_logitlab_diff_compares_a_q8_0_file_with_its_f32_source(ggufs: Path, capsys):
    from app.cli.diff import main

    code = main(["--model", str(ggufs / "tiny-q8_0.gguf"), "--model-b", str(ggufs / "tiny-f32.gguf"),
                 "--backend", "llamacpp", "--prompt", PROMPT])
    out = capsys.readouterr()
    assert code == 0, out.err
    lines = [json.loads(line) for line in out.out.splitlines()]
    summary = lines[-1]
    assert summary["a"].endswith("tiny-q8_0.gguf · llamacpp float32, Q8_0") and summary["tokens"] == len(lines) - 1
    assert 0 < summary["mean_kl"] < 0.05 and summary["agreement"] > 0.8  # close, not identical: 8-bit weights


def test_auto_opens_a_gguf_file_on_llama_cpp_and_refuses_what_it_cannot_run(lcpp, ggufs: Path, tiny_path: Path,
                                                                              torch_model, tmp_path: Path):
    assert resolve_name("auto", ggufs / "tiny-f32.gguf") == "llamacpp" and installed("llamacpp")
    info = lcpp.info
    assert (info.backend, info.dtype, info.quantization) == ("llamacpp", "float32", None)
    for field in ("parameters", "layers", "heads", "kv_heads", "head_dim", "hidden_size", "vocab_size"):
        assert getattr(info, field) == getattr(torch_model.info, field), field
    q4 = get_backend("llamacpp").load(ggufs / "tiny-q4_k.gguf", LoadOptions())
    assert q4.info.quantization == "Q4_K_M" and q4.info.weight_bytes < info.weight_bytes / 3
    q4.close()  # its tokenizer outlives it (the window keeps one after its model is closed)
    assert q4.tokenizer.encode(TEXTS[1]) == lcpp.tokenizer.encode(TEXTS[1])
    backend = get_backend("llamacpp")
    for path, options, message in [
        (ggufs / "tiny-f32.gguf", LoadOptions(dtype="bfloat16"), "runs a GGUF file in the types it was written in"),
        (ggufs / "tiny-f32.gguf", LoadOptions(quantize_bits=4), "quantize-on-load is MLX's"),
        (tiny_path, LoadOptions(), "is not a .gguf file"),
        (rewritten(ggufs / "tiny-f32.gguf", tmp_path / "odd.gguf", architecture="nonsense"), LoadOptions(),
         r"cannot load odd.gguf, a 'nonsense' model: unknown model architecture: 'nonsense'"),  # llama.cpp's reason
    ]:
        with pytest.raises(ModelLoadError, match=message) as e:
            backend.load(path, options)
        assert "\n" not in str(e.value)
