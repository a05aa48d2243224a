"""GGUF files as llama.cpp and LM Studio users have them: a tiny one written here by the `gguf` package from the
session's tiny Llama (the same weights as its safetensors), opened on torch through transformers' GGUF loading
(dequantized), refused on MLX with a pointer to torch, listed from the HF cache and from the user's folders, and
damaged ones (headers written byte by byte: a zero alignment, arrays nested thousands deep, counts and strings
past the end, unknown types; a dangling link) refused in one line that names the file, and named in a listing."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.decoding.generation import generate
from app.core.events import Request, Step
from app.core.models.catalog import estimate_memory, scan_cache, scan_folder
from app.core.models.catalog import main as models_main
from app.core.settings import SamplerSettings
from backends import installed
from backends.base import LoadOptions, ModelLoadError
from backends.gguf import GGML_TYPES, TRANSFORMERS_TYPES, read_gguf
from tests.backends.test_model_files import ENV, place_in_hf_cache
from tests.gguf_files import GGUF_BACKENDS, write_gguf
from tests.tiny import LOCAL_BACKENDS

gguf = pytest.importorskip("gguf")
CPU32 = LoadOptions(device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def gguf_dir(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gguf")
    write_gguf(tiny_path, out / "tiny-f32.gguf")
    write_gguf(tiny_path, out / "tiny-q8_0.gguf", quant="Q8_0")
    return out


@pytest.fixture(scope="module")
def gguf_model(gguf_dir: Path):
    from backends.torch.backend import TorchBackend

    return TorchBackend().load(gguf_dir / "tiny-f32.gguf", CPU32)


def greedy(model, prompt: str, n: int = 24) -> list[int]:
    request = Request(prompt=prompt, settings=SamplerSettings(temperature=0, max_tokens=n), ignore_eos=True)
    return [e.token_id for e in generate(model, request, threading.Event()) if isinstance(e, Step)]


# -- opening a GGUF file on torch ------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", ["def add(a, b):", "Hello, world! こんにちは 🙂"])
def test_greedy_tokens_of_the_gguf_equal_those_of_the_same_weights_from_safetensors(gguf_model, torch_model,
                                                                                      prompt: str):
    assert gguf_model.tokenizer.encode(prompt) == torch_model.tokenizer.encode(prompt)
    tokens = greedy(gguf_model, prompt)
    assert len(tokens) == 24
    assert tokens == greedy(torch_model, prompt)


def test_the_gguf_model_computes_the_same_logits_at_every_position(gguf_model, torch_model):
    ids = [torch_model.tokenizer.encode("for i in range(10):\n    print(i * i)\n")]
    a = gguf_model.forward(ids, gguf_model.new_cache(), "all")
    b = torch_model.forward(ids, torch_model.new_cache(), "all")
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_the_gguf_model_card_reads_as_the_safetensors_one(gguf_model, torch_model):
    a, b = gguf_model.info, torch_model.info
    assert a.name == "tiny-f32.gguf" and a.backend == "torch" and a.dtype == "float32"
    for field in ("parameters", "layers", "heads", "kv_heads", "head_dim", "hidden_size", "vocab_size",
                  "context_length", "weight_bytes", "kv_bytes_per_token"):
        assert getattr(a, field) == getattr(b, field), field
    assert gguf_model.tokenizer.eos_ids == torch_model.tokenizer.eos_ids
    assert gguf_model.tokenizer.has_chat_template  # the template travels in the file's metadata


def test_a_q8_0_file_is_dequantized_to_weights_within_its_quantization_step(gguf_dir: Path, torch_model):
    from backends.torch.backend import TorchBackend

    model = TorchBackend().load(gguf_dir / "tiny-q8_0.gguf", CPU32)
    ref = dict(torch_model.model.named_parameters())
    for name, p in model.model.named_parameters():
        want = ref[name].detach().numpy()
        # Q8_0: blocks of 32 values share one step, max|x| / 127: rounding is at most half a step, and the step
        # is stored as float16 (relative error 2^-11, times up to 127 steps: another 0.062 of a step)
        step = np.abs(want.reshape(-1, 32)).max(axis=1, keepdims=True) / 127
        err = np.abs(p.detach().numpy() - want).reshape(-1, 32)
        assert (err <= step * (0.5 + 127 * 2**-11) + 1e-7).all(), name
        assert err.max() > 0 or want.ndim == 1, name  # 2-D weights were quantized (norms stay F32, exact)
    assert len(greedy(model, "import ", 8)) == 8


def test_the_cli_generates_from_a_gguf_file(gguf_dir: Path, torch_model):
    r = subprocess.run([sys.executable, "-m", "app", "generate", "--model", str(gguf_dir / "tiny-f32.gguf"),
                        "--backend", "torch", "--device", "cpu", "--dtype", "float32", "--prompt", "def add(a, b):",
                        "--temperature", "0", "--max-tokens", "6", "--json"],
                       capture_output=True, text=True, timeout=180, env=ENV)
    assert r.returncode == 0, r.stderr
    ids = [json.loads(line)["token_id"] for line in r.stdout.splitlines()[:-1]]
    assert ids == greedy(torch_model, "def add(a, b):", 24)[: len(ids)] and ids


# -- what cannot be opened: one line each ----------------------------------------------------------------------


def damaged(src: Path, dst: Path, how: str) -> Path:
    data = src.read_bytes()
    header_end = data.index(b"blk.0.attn_k.weight")  # inside the tensor table
    dst.write_bytes({
        "empty": b"",
        "wrong magic": b"GGML" + data[4:],
        "a safetensors file renamed": (16).to_bytes(8, "little") + b'{"a": 1}        ',
        "cut in the header": data[:header_end],
        "cut in the tensors": data[: len(data) * 2 // 3],
        "cut by one byte": data[:-1],
        "a string longer than the file": data[:24] + (2**40).to_bytes(8, "little") + data[32:],
        "version 7": data[:4] + (7).to_bytes(4, "little") + data[8:],
    }[how])
    return dst


@pytest.mark.parametrize(("how", "message"), [
    ("empty", "is empty (0 bytes)"),
    ("wrong magic", "is not a GGUF file: it starts with b'GGML'"),
    ("a safetensors file renamed", "is not a GGUF file"),
    ("cut in the header", "has a damaged or truncated header"),
    ("cut in the tensors", "is truncated: its tensors need"),
    ("cut by one byte", "is truncated: its tensors need"),
    ("a string longer than the file", "has a damaged or truncated header"),
    ("version 7", "is GGUF version 7"),
])
def test_a_damaged_gguf_is_refused_in_one_line_before_any_framework_reads_it(gguf_dir: Path, tmp_path: Path,
                                                                           how: str, message: str):
    from backends.torch.backend import TorchBackend

    bad = damaged(gguf_dir / "tiny-f32.gguf", tmp_path / "model.gguf", how)
    with pytest.raises(ModelLoadError) as e:
        TorchBackend().load(bad, CPU32)
    assert message in str(e.value) and "model.gguf" in str(e.value)
    assert "\n" not in str(e.value)
    [entry] = scan_folder(tmp_path)  # still listed, so the user sees it, but loadable by nothing
    assert entry.model_type == "?" and entry.backends == ()


def test_the_cli_names_the_damaged_file_in_one_line(gguf_dir: Path, tmp_path: Path):
    bad = damaged(gguf_dir / "tiny-f32.gguf", tmp_path / "model.gguf", "cut in the tensors")
    r = subprocess.run([sys.executable, "-m", "app", "generate", "--model", str(bad), "--backend", "torch",
                        "--prompt", "x"], capture_output=True, text=True, timeout=180, env=ENV)
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.splitlines()[-1].startswith("logitlab generate: error: model.gguf is truncated: its tensors need")


# -- headers written byte by byte: every malformed one is one line naming the file and what is wrong ----------


def text(t: str | bytes) -> bytes:
    b = t.encode() if isinstance(t, str) else t
    return struct.pack("<Q", len(b)) + b


def kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    return text(key) + struct.pack("<I", vtype) + payload


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def array(etype: int, items: list[bytes], n: int | None = None) -> bytes:
    return struct.pack("<IQ", etype, len(items) if n is None else n) + b"".join(items)


def nested(depth: int) -> bytes:
    """An array of arrays `depth` deep (the innermost an array of one uint32)."""
    inner = array(4, [u32(7)])
    for _ in range(depth - 1):
        inner = array(9, [inner])
    return inner


def tensor(name: str, shape: tuple[int, ...], offset: int = 0, ggml_type: int = 0) -> bytes:
    return text(name) + u32(len(shape)) + struct.pack(f"<{len(shape)}Q", *shape) + struct.pack("<IQ", ggml_type, offset)


def header(kvs: list[bytes], tensors: list[bytes], *, n_kv: int | None = None, n_tensors: int | None = None,
           data: int = 16, align: int = 32) -> bytes:
    """A GGUF v3 file: its metadata `kvs`, tensor table `tensors`, then `data` bytes of tensor data, aligned."""
    head = (b"GGUF" + struct.pack("<IQQ", 3, len(tensors) if n_tensors is None else n_tensors,
                                  len(kvs) if n_kv is None else n_kv) + b"".join(kvs) + b"".join(tensors))
    return head + bytes(-len(head) % align + data)


ARCH = kv("general.architecture", 8, text("llama"))
ALIGN32 = kv("general.alignment", 4, u32(32))
VOCAB = kv("tokenizer.ggml.tokens", 9, array(8, [text("a"), text("bc")]))
GOOD = header([ARCH, ALIGN32, VOCAB], [tensor("w", (4,))])  # four float32 weights


MALFORMED = {  # name: (the file's bytes, what the line says after "<file> has a damaged or truncated header: ")
    "alignment 0": (header([ARCH, kv("general.alignment", 4, u32(0))], [tensor("w", (4,))]),
                    "general.alignment is 0; it must be a power of two such as 32"),
    "alignment 24": (header([ARCH, kv("general.alignment", 4, u32(24))], [tensor("w", (4,))]),
                     "general.alignment is 24; it must be a power of two"),
    "alignment as text": (header([ARCH, kv("general.alignment", 8, text("32"))], [tensor("w", (4,))]),
                          "general.alignment is '32'; it must be a power of two"),
    "arrays 5,000 deep": (header([ARCH, kv("deep", 9, nested(5000))], []),
                          "metadata 'deep' holds arrays nested more than 8 deep"),
    "a huge array": (header([ARCH, kv("big", 9, array(4, [], n=2**62))], []),
                     "it counts 4,611,686,018,427,387,904 items of metadata 'big', more than its"),
    "a huge array of strings": (header([ARCH, kv("big", 9, array(8, [], n=2**40))], []),
                                "it counts 1,099,511,627,776 items of metadata 'big', more than"),
    "a huge array of arrays": (header([ARCH, kv("big", 9, array(9, [], n=2**40))], []),
                               "it counts 1,099,511,627,776 items of metadata 'big'"),
    "a string longer than the file": (header([kv("general.architecture", 8, struct.pack("<Q", 2**40) + b"x")], []),
                                      "metadata 'general.architecture' runs past the end of the file"),
    "a vocabulary past the end": (header([ARCH, kv("tokenizer.ggml.tokens", 9, array(8, [text("a"),
                                                                                        struct.pack("<Q", 2**30)]))],
                                         [], data=0, align=1), "metadata 'tokenizer.ggml.tokens' runs past the end"),
    "an unknown value type": (header([ARCH, kv("odd", 99, u32(1))], []), "metadata 'odd' has an unknown value type 99"),
    "an array of an unknown type": (header([ARCH, kv("odd", 9, array(77, [], n=0))], []),
                                    "metadata 'odd' is an array of an unknown value type 77"),
    "a key that is not UTF-8": (header([kv(b"\xff\xfe", 4, u32(1))], []), "the key of metadata entry 0 is not UTF-8"),
    "a key with a newline": (header([ARCH, kv("a\nb", 99, u32(1))], []), "metadata 'a\\nb' has an unknown value"),
    "a huge count of entries": (header([ARCH], [], n_kv=2**63), "it counts 9,223,372,036,854,775,808 metadata"),
    "a huge count of tensors": (header([ARCH], [], n_tensors=2**50), "it counts 1,125,899,906,842,624 tensors"),
    "a tensor of 2^32 - 1 dimensions": (header([ARCH], [text("w") + u32(2**32 - 1)]),
                                        "tensor 'w' has 4,294,967,295 dimensions (at most 4)"),
    "cut in the count": (GOOD[:18], "the count of metadata entries runs past the end of the file"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_header_is_one_line_naming_the_file_and_what_is_wrong(tmp_path: Path, case: str):
    data, says = MALFORMED[case]
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(ModelLoadError) as e:
        read_gguf(path)
    assert str(e.value).startswith(f"bad.gguf has a damaged or truncated header: {says}"), str(e.value)
    assert "\n" not in str(e.value) and len(str(e.value)) < 300


def test_a_header_cut_anywhere_is_one_line_and_the_whole_one_reads(tmp_path: Path):
    path = tmp_path / "cut.gguf"
    path.write_bytes(GOOD)
    assert read_gguf(path).metadata == {"general.architecture": "llama", "general.alignment": 32,
                                        "tokenizer.ggml.tokens": 2}
    for end in range(len(GOOD)):
        path.write_bytes(GOOD[:end])
        with pytest.raises(ModelLoadError) as e:
            read_gguf(path)
        assert str(e.value).startswith("cut.gguf ") and "\n" not in str(e.value), end


def test_a_listing_names_each_bad_file_and_lists_the_rest(gguf_dir: Path, tiny_path: Path, tmp_path: Path,
                                                          capsys):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "aligned-0.gguf").write_bytes(MALFORMED["alignment 0"][0])
    (folder / "deep.gguf").write_bytes(MALFORMED["arrays 5,000 deep"][0])
    (folder / "gone.gguf").symlink_to(folder / "deleted.gguf")  # a link left by a moved download
    shutil.copy(gguf_dir / "tiny-f32.gguf", folder / "tiny.gguf")
    shutil.copytree(tiny_path, folder / "typed")
    config = json.loads((folder / "typed" / "config.json").read_text())
    (folder / "typed" / "config.json").write_text(json.dumps({**config, "model_type": 5}))
    (folder / "typed" / "gone.bin").symlink_to(folder / "nothing")  # a model folder's dangling link
    entries = {Path(e.source).name: e for e in scan_folder(folder)}
    assert entries["tiny.gguf"].backends == GGUF_BACKENDS and not entries["tiny.gguf"].problem
    for name, says in [("aligned-0.gguf", "general.alignment is 0"), ("deep.gguf", "nested more than 8 deep"),
                       ("gone.gguf", "No such file or directory"), ("typed", "model_type is 5; it must be text")]:
        assert entries[name].model_type == "?" and entries[name].backends == () and says in entries[name].problem
    assert models_main(["--cache-dir", str(tmp_path / "empty"), "--folder", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert [line.split()[0] for line in out.splitlines()[4:]] == [str(folder / n) for n in (  # after the 3 shipped
        "aligned-0.gguf", "deep.gguf", "gone.gguf", "tiny.gguf", "typed")]
    assert err.splitlines() == [f"logitlab models: {entries[n].source} cannot be loaded: {entries[n].problem}"
                                for n in ("aligned-0.gguf", "deep.gguf", "gone.gguf", "typed")]


@pytest.mark.parametrize("case", ["alignment 0", "arrays 5,000 deep"])
def test_loading_a_malformed_header_is_refused_in_one_line(tmp_path: Path, case: str):
    from backends.torch.backend import TorchBackend

    (tmp_path / "bad.gguf").write_bytes(MALFORMED[case][0])
    with pytest.raises(ModelLoadError, match=f"^bad.gguf has a damaged or truncated header: {MALFORMED[case][1]}"):
        TorchBackend().load(tmp_path / "bad.gguf", CPU32)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_whatever_bytes_a_header_holds_it_reads_or_is_refused_in_one_line(data):
    """GOOD with bytes changed, cut or put in anywhere: a header or one line, never a traceback or a long read."""
    b = bytearray(GOOD)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(b)))
        new = data.draw(st.binary(min_size=0, max_size=9))
        cut = data.draw(st.integers(0, 9))
        b[at:at + cut] = new
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "f.gguf"
        path.write_bytes(bytes(b))
        try:
            read_gguf(path)
        except ModelLoadError as e:
            assert "\n" not in str(e) and ("f.gguf" in str(e)), str(e)


def rewritten(src: Path, dst: Path, **metadata) -> Path:
    """A copy of a GGUF with some metadata replaced (None: removed), written again by the gguf package."""
    reader = gguf.GGUFReader(src)
    arch = metadata.pop("architecture", "llama")
    w = gguf.GGUFWriter(str(dst), arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or metadata.get(key, "") is None:
            continue
        vtype = field.types[0]
        value = metadata.get(key, field.contents())
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key.replace("llama.", f"{arch}."), value, vtype, sub_type=sub)
    for t in reader.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_shape=tuple(reversed(t.shape.tolist())), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


@pytest.mark.parametrize(("change", "message", "llama_cpp_lists_it"), [
    ({"architecture": "deepseek2"}, "is a 'deepseek2' model: transformers cannot load GGUF files of that", True),
    ({"tokenizer.ggml.model": None, "tokenizer.ggml.tokens": None}, "has no tokenizer in its metadata", False),
    ({"llama.block_count": 0}, "llama.block_count is 0; it must be a whole number of at least 1", False),
    ({"name": "odd-00001-of-00002.gguf"}, "is one part of a split GGUF, and transformers loads whole files only",
     True),  # (llama.cpp opens a split file by its first part)
])
def test_a_gguf_torch_cannot_read_says_why(gguf_dir: Path, tmp_path: Path, change: dict, message: str,
                                           llama_cpp_lists_it: bool):
    from backends.torch.backend import TorchBackend

    name = change.pop("name", "odd.gguf")
    path = rewritten(gguf_dir / "tiny-f32.gguf", tmp_path / name, **change)
    with pytest.raises(ModelLoadError, match=message):
        TorchBackend().load(path, CPU32)
    listed = ("llamacpp",) if llama_cpp_lists_it and installed("llamacpp") else ()
    assert scan_folder(tmp_path)[0].backends == listed


def test_mlx_refuses_a_gguf_file_and_points_to_torch(gguf_dir: Path):
    pytest.importorskip("mlx_lm")
    from backends.mlx.backend import MlxBackend

    with pytest.raises(ModelLoadError, match=r"tiny-f32.gguf is a GGUF file, which the MLX backend cannot load: "
                                             r"open it with the torch backend \(--backend torch"):
        MlxBackend().load(gguf_dir / "tiny-f32.gguf", LoadOptions())


# -- finding GGUF files: the HF cache, the user's folders, the picker ------------------------------------------


def test_the_hf_cache_listing_finds_gguf_repos_and_names_them_by_repo_and_file(gguf_dir: Path, tmp_path: Path):
    cache = tmp_path / "hub"
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(gguf_dir / "tiny-f32.gguf", repo / "tiny-f32.gguf")
    (repo / "README.md").write_text("a GGUF repo has no config.json")
    snapshot = place_in_hf_cache(cache, "someone/Tiny-GGUF", repo)
    (snapshot / "q8").mkdir()  # repos keep some quantizations in folders
    blob = snapshot.parents[1] / "blobs" / "q8"
    shutil.copy(gguf_dir / "tiny-q8_0.gguf", blob)
    (snapshot / "q8" / "tiny-q8_0.gguf").symlink_to(os.path.relpath(blob, snapshot / "q8"))
    entries = scan_cache(cache)
    assert [e.label for e in entries] == ["someone/Tiny-GGUF/q8/tiny-q8_0.gguf", "someone/Tiny-GGUF/tiny-f32.gguf"]
    q8, f32 = entries
    assert f32.source == str(snapshot / "tiny-f32.gguf")  # what to type: the file, which `resolve` opens as is
    assert f32.size_bytes == (gguf_dir / "tiny-f32.gguf").stat().st_size
    assert (f32.model_type, f32.backends, f32.quantization) == ("llama", GGUF_BACKENDS, "GGUF F32")
    assert q8.quantization == "GGUF Q8_0" and q8.size_bytes < f32.size_bytes / 3


def test_a_users_folder_lists_gguf_files_and_model_folders_three_levels_down(gguf_dir: Path, tiny_path: Path,
                                                                           tmp_path: Path):
    (tmp_path / "lmstudio" / "someone" / "Tiny-GGUF").mkdir(parents=True)
    shutil.copy(gguf_dir / "tiny-q8_0.gguf", tmp_path / "lmstudio" / "someone" / "Tiny-GGUF")
    shutil.copytree(tiny_path, tmp_path / "lmstudio" / "tiny-llama")
    (tmp_path / "lmstudio" / "a" / "b" / "c" / "d").mkdir(parents=True)
    shutil.copy(gguf_dir / "tiny-f32.gguf", tmp_path / "lmstudio" / "a" / "b" / "c" / "d")  # four levels down
    (tmp_path / "lmstudio" / ".hidden").mkdir()
    shutil.copy(gguf_dir / "tiny-f32.gguf", tmp_path / "lmstudio" / ".hidden")
    entries = scan_folder(tmp_path / "lmstudio")
    assert [(e.label, e.backends) for e in entries] == [
        ("someone/Tiny-GGUF/tiny-q8_0.gguf", GGUF_BACKENDS),
        ("", LOCAL_BACKENDS),
    ]
    assert entries[1].source == str(tmp_path / "lmstudio" / "tiny-llama")


def test_logitlab_models_lists_the_folders_it_is_given(gguf_dir: Path, tmp_path: Path, capsys):
    assert models_main(["--cache-dir", str(tmp_path / "empty"), "--folder", str(gguf_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["model", "size", "type", "backends", "quantization"]
    assert [x.split()[0] for x in lines[1:4]] == ["builtin", "builtin-draft", "builtin-thinking"]  # shipped first
    assert [line.split()[0] for line in lines[4:]] == [str(gguf_dir / n) for n in ("tiny-f32.gguf", "tiny-q8_0.gguf")]
    assert lines[4].split()[3:] == ["llama", ",".join(GGUF_BACKENDS), "GGUF", "F32"]
    assert models_main(["--cache-dir", str(tmp_path / "empty"), "--folder", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.strip() == f"logitlab models: error: no folder {tmp_path / 'nope'}"


def test_the_picker_lists_the_users_folders_and_adds_one(qtbot, gguf_dir: Path, tiny_path: Path, tmp_path: Path):
    from app.ui.panels.model_picker import ModelPicker

    more = tmp_path / "more"
    more.mkdir()
    shutil.copy(gguf_dir / "tiny-q8_0.gguf", more / "other.gguf")
    picker = ModelPicker([], cache_dir=str(tmp_path / "empty"), folders=[str(gguf_dir)])
    qtbot.addWidget(picker)
    names = [picker.table.item(r, 0).text() for r in range(picker.table.rowCount())]
    assert names[2:] == ["tiny-f32.gguf", "tiny-q8_0.gguf"]  # after the built-in model and the thinking one
    assert picker.table.item(2, 3).text() == ", ".join(GGUF_BACKENDS) and picker.table.item(3, 4).text() == "GGUF Q8_0"
    picker.open_folder(str(more))  # a folder of models: listed, its first selected, remembered
    assert picker.table.item(4, 0).text() == "other.gguf" and picker.choice == str(more / "other.gguf")
    assert picker.folders == [str(gguf_dir), str(more)] and picker.hint.text() == f"1 model in {more}"
    picker.open_folder(str(tmp_path / "empty"))
    assert picker.hint.text().startswith("No model folders or .gguf files in") and picker.table.rowCount() == 5
    picker.open_folder(str(tiny_path))  # a model folder itself: chosen
    assert picker.choice == str(tiny_path) and picker.result() == picker.DialogCode.Accepted


# -- the memory check and the tables kept in step with the libraries -------------------------------------------


def test_the_memory_check_counts_a_gguf_as_the_backend_auto_picks_holds_it(gguf_dir: Path, torch_model):
    """llama.cpp runs the file's own tensors; torch dequantizes them to float32 (4 bytes a parameter)."""
    for name in ("tiny-f32.gguf", "tiny-q8_0.gguf"):
        est = estimate_memory(gguf_dir / name)
        assert est.parameters == torch_model.info.parameters
        on_llamacpp = installed("llamacpp")
        assert est.weight_bytes == (read_gguf(gguf_dir / name).tensor_bytes if on_llamacpp else 4 * est.parameters)
        assert est.kv_bytes_per_1k_tokens == 1000 * torch_model.info.kv_bytes_per_token // 2  # float16 budget


def test_the_header_reader_agrees_with_the_gguf_package(gguf_dir: Path):
    for name in ("tiny-f32.gguf", "tiny-q8_0.gguf"):
        ours, theirs = read_gguf(gguf_dir / name), gguf.GGUFReader(gguf_dir / name)
        assert [(t.name, t.shape, t.type) for t in ours.tensors] == [
            (t.name, tuple(int(d) for d in t.shape), int(t.tensor_type)) for t in theirs.tensors]
        assert ours.parameters == sum(int(t.n_elements) for t in theirs.tensors)
        for key, field in theirs.fields.items():
            if not key.startswith("GGUF."):
                value = field.contents()
                assert ours.metadata[key] == (len(value) if isinstance(value, list) else value), key


def test_the_tables_match_the_installed_libraries():
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    renamed = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss"}  # transformers' own names
    assert {renamed.get(a, a) for a in TRANSFORMERS_TYPES} <= set(GGUF_SUPPORTED_ARCHITECTURES)
    for t, (name, per_block, nbytes) in GGML_TYPES.items():
        qtype = gguf.GGMLQuantizationType(t)
        assert qtype.name == name and gguf.GGML_QUANT_SIZES[qtype] == (per_block, nbytes)
