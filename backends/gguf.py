"""GGUF files (llama.cpp, LM Studio): read the header without loading a tensor, and check it is whole.

`read_gguf` parses the metadata and the tensor table in pure Python (arrays such as the vocabulary are kept as
their length only, so a 150k-token header reads in well under a second) and turns a wrong magic, a damaged
header (a count, a length or a string past the end of the file, an unknown value type, arrays nested deeper
than any writer nests them, an alignment that is not a power of two) or a file shorter than its tensors need
into one `ModelLoadError` line that names the file and what is wrong. Every count is checked against the bytes
left before it is looped over, so no header makes it read for long. No framework imports; loading the weights
is the llama.cpp backend's (its own quantized kernels) or the torch backend's (transformers dequantizes them).
"""

from __future__ import annotations

import importlib.util
import math
import mmap
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.base import ModelLoadError
from backends.support import torch_supports

MAGIC = b"GGUF"
SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)  # llama.cpp's split files: name-00001-of-00003.gguf
# GGUF architecture -> transformers model_type, for the causal LMs transformers' GGUF loader can dequantize
# (transformers.integrations.ggml.GGUF_SUPPORTED_ARCHITECTURES; a test holds this table to it).
TRANSFORMERS_TYPES = {
    "llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen2moe": "qwen2_moe", "qwen3": "qwen3",
    "qwen3moe": "qwen3_moe", "phi3": "phi3", "gemma2": "gemma2", "gemma3": "gemma3_text", "falcon": "falcon",
    "stablelm": "stablelm", "gpt2": "gpt2", "starcoder2": "starcoder2", "bloom": "bloom", "mamba": "mamba",
    "nemotron": "nemotron", "lfm2": "lfm2", "gpt-oss": "gpt_oss", "gemma4": "gemma4_text",
}
REQUIRED = ("block_count", "embedding_length", "attention.head_count")  # a decoder's dimensions, as GGUF names them
# Value types of the format: struct code of each fixed-size scalar; 8 is a string, 9 an array.
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
MAX_NESTING = 8  # arrays of arrays: llama.cpp's writers nest none; a header nesting deeper is damaged
MAX_DIMS = 4  # GGML_MAX_DIMS
# ggml tensor types: id -> (name, elements per block, bytes per block), as gguf-py's GGML_QUANT_SIZES
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}  # a type not listed (newer than this table) is not checked for length


@dataclass(frozen=True)
class GgufTensor:
    name: str
    shape: tuple[int, ...]
    type: int
    offset: int  # from the start of the data section


@dataclass(frozen=True)
class GgufFile:
    """A GGUF file's header: metadata (arrays as their length) and tensor table."""

    path: Path
    metadata: dict[str, Any]
    tensors: tuple[GgufTensor, ...]

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "?"))

    @property
    def model_type(self) -> str | None:
        """transformers' name for this architecture, or None where its GGUF loader cannot read it."""
        return TRANSFORMERS_TYPES.get(self.architecture)

    @property
    def parameters(self) -> int:
        return sum(math.prod(t.shape) for t in self.tensors)

    @property
    def tensor_bytes(self) -> int:
        """The bytes its tensors take as stored (a type newer than `GGML_TYPES`: counted at 4 bytes a value)."""
        total = 0
        for t in self.tensors:
            _, per_block, nbytes = GGML_TYPES.get(t.type, ("?", 1, 4))
            total += math.prod(t.shape) // per_block * nbytes
        return total

    @property
    def weight_type(self) -> str:
        """The tensor type holding most of the weights, e.g. Q4_K (a file mixes types; norms stay F32)."""
        sizes: dict[int, int] = {}
        for t in self.tensors:
            sizes[t.type] = sizes.get(t.type, 0) + math.prod(t.shape)
        top = max(sizes, key=sizes.__getitem__, default=0)
        return GGML_TYPES[top][0] if top in GGML_TYPES else f"type {top}"

    @property
    def has_tokenizer(self) -> bool:
        return "tokenizer.ggml.model" in self.metadata and "tokenizer.ggml.tokens" in self.metadata

    def config(self) -> dict[str, Any]:
        """The decoder's dimensions under transformers' config names (what `ConfigShape` reads)."""
        arch, m = self.architecture, self.metadata
        heads = m.get(f"{arch}.attention.head_count")
        return {"model_type": self.model_type or arch, "num_hidden_layers": m.get(f"{arch}.block_count"),
                "num_attention_heads": heads, "num_key_value_heads": m.get(f"{arch}.attention.head_count_kv", heads),
                "head_dim": m.get(f"{arch}.attention.key_length"), "hidden_size": m.get(f"{arch}.embedding_length"),
                "vocab_size": m.get(f"{arch}.vocab_size") or m.get("tokenizer.ggml.tokens"),
                "max_position_embeddings": m.get(f"{arch}.context_length")}


def is_gguf(path: Path) -> bool:
    return path.suffix.lower() == ".gguf" and not path.is_dir()


def read_gguf(path: Path) -> GgufFile:
    """The header of a GGUF file, checked: its magic, its structure, and that the file holds every tensor."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            if not head:
                raise ModelLoadError(f"{path.name} is empty (0 bytes): an interrupted download?")
            if head != MAGIC:
                raise ModelLoadError(f"{path.name} is not a GGUF file: it starts with {head!r}, not {MAGIC!r}")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse(path, buf)
    except OSError as e:
        raise ModelLoadError(f"cannot read {path}: {e.strerror or e}") from e
    except _HeaderError as e:
        raise ModelLoadError(f"{path.name} has a damaged or truncated header: {e} ({path.stat().st_size:,} bytes "
                             "on disk; an interrupted download?)") from None


def check_gguf(path: Path) -> GgufFile:
    """`read_gguf`, then what loading needs: an architecture transformers reads, its dimensions, a tokenizer."""
    gguf = read_gguf(path)
    problem = _problem(gguf)
    if problem:
        raise ModelLoadError(problem)
    return gguf


def _problem(gguf: GgufFile) -> str | None:
    """Why transformers cannot load this (well-formed) file, or None."""
    name, arch = gguf.path.name, gguf.architecture
    if gguf.model_type is None:
        return (f"{name} is a {arch!r:.40} model: transformers cannot load GGUF files of that architecture (it reads "
                f"{', '.join(sorted(TRANSFORMERS_TYPES))})")
    if SPLIT.search(name):
        return (f"{name} is one part of a split GGUF, and transformers loads whole files only: merge the parts "
                "with llama.cpp's llama-gguf-split --merge")
    return _shape_problem(gguf)


def llama_cpp_problem(gguf: GgufFile) -> str | None:
    """Why llama.cpp cannot load this (well-formed) file, as far as its header tells (an architecture it does not
    know shows only as it loads), or None."""
    split = SPLIT.search(gguf.path.name)
    if split and not split.group().lower().startswith("-00001-"):
        return (f"{gguf.path.name} is a later part of a split GGUF: open its first part (…-00001-of-….gguf), which "
                "names the others")
    return _shape_problem(gguf)


def _shape_problem(gguf: GgufFile) -> str | None:
    """A tokenizer and a decoder's dimensions, which every loader needs, missing from the header: why, or None."""
    name, arch = gguf.path.name, gguf.architecture
    if not gguf.has_tokenizer:
        return f"{name} has no tokenizer in its metadata (tokenizer.ggml.*)"
    for key in REQUIRED:
        value = gguf.metadata.get(f"{arch}.{key}")
        if type(value) is not int or value < 1:
            return f"{name}: {arch}.{key} is {value!r:.40}; it must be a whole number of at least 1"
    return None


class _HeaderError(ValueError):
    """What is wrong in a header, in words (read_gguf names the file)."""


class _Cursor:
    """Reads little-endian GGUF values from a buffer, each read checked against the bytes left."""

    def __init__(self, buf: Any) -> None:
        self.buf, self.pos = buf, 4

    def left(self) -> int:
        return len(self.buf) - self.pos

    def take(self, n: int, what: str) -> int:
        """Step over n bytes of `what`; the position they start at."""
        if n > self.left():
            raise _HeaderError(f"{what} runs past the end of the file")
        self.pos += n
        return self.pos - n

    def scalar(self, code: str, what: str) -> Any:
        return struct.unpack_from("<" + code, self.buf, self.take(struct.calcsize(code), what))[0]

    def count(self, code: str, each: int, what: str) -> int:
        """A count of items of at least `each` bytes, no more than the bytes left can hold."""
        n = self.scalar(code, f"the count of {what}")
        if n * each > self.left():
            raise _HeaderError(f"it counts {n:,} {what}, more than its {self.left():,} bytes left can hold")
        return n

    def string(self, what: str) -> str:
        n = self.scalar("Q", f"the length of {what}")
        at = self.take(n, what)
        try:
            return bytes(self.buf[at : at + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise _HeaderError(f"{what} is not UTF-8 text") from None

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype in SCALARS:
            return self.scalar(SCALARS[vtype], what)
        if vtype == STRING:
            return self.string(what)
        if vtype == ARRAY:
            return self.skip_array(what, depth + 1)
        raise _HeaderError(f"{what} has an unknown value type {vtype}")

    def skip_array(self, what: str, depth: int) -> int:
        """Steps over an array and returns its length (a vocabulary is not needed to list or check a file)."""
        if depth > MAX_NESTING:
            raise _HeaderError(f"{what} holds arrays nested more than {MAX_NESTING} deep")
        etype = self.scalar("I", f"the type of {what}'s items")
        if etype in SCALARS:
            size = struct.calcsize(SCALARS[etype])
            n = self.count("Q", size, f"items of {what}")
            self.take(n * size, what)
        elif etype == STRING:  # a vocabulary: each string stepped over by its length, not decoded
            n = self.count("Q", 8, f"items of {what}")
            buf, pos, end = self.buf, self.pos, len(self.buf)
            for _ in range(n):
                if pos + 8 > end:
                    raise _HeaderError(f"{what} runs past the end of the file")
                pos += 8 + struct.unpack_from("<Q", buf, pos)[0]
            self.pos = pos
            if pos > end:
                raise _HeaderError(f"{what} runs past the end of the file")
        elif etype == ARRAY:
            n = self.count("Q", 12, f"items of {what}")
            for _ in range(n):
                self.skip_array(what, depth + 1)
        else:
            raise _HeaderError(f"{what} is an array of an unknown value type {etype}")
        return n


def _parse(path: Path, buf: Any) -> GgufFile:
    cur = _Cursor(buf)
    version = cur.scalar("I", "the version")
    if version not in (2, 3):
        raise ModelLoadError(f"{path.name} is GGUF version {version}; versions 2 and 3 are supported")
    n_tensors = cur.scalar("Q", "the count of tensors")
    n_kv = cur.count("Q", 13, "metadata entries")  # at least a key's length, a type and a byte
    metadata = {}
    for i in range(n_kv):
        key = cur.string(f"the key of metadata entry {i}")
        what = f"metadata {key!r:.60}"
        metadata[key] = cur.value(cur.scalar("I", f"the type of {what}"), what)
    if n_tensors * 24 > cur.left():  # each at least a name's length, its dimensions, type and offset
        raise _HeaderError(f"it counts {n_tensors:,} tensors, more than its {cur.left():,} bytes left can hold")
    tensors = []
    for i in range(n_tensors):
        name = cur.string(f"the name of tensor {i}")
        what = f"tensor {name!r:.60}"
        dims = cur.scalar("I", f"the dimensions of {what}")
        if dims > MAX_DIMS:
            raise _HeaderError(f"{what} has {dims:,} dimensions (at most {MAX_DIMS})")
        shape = tuple(cur.scalar("Q", f"the shape of {what}") for _ in range(dims))
        tensors.append(GgufTensor(name, shape, cur.scalar("I", f"the type of {what}"),
                                  cur.scalar("Q", f"the offset of {what}")))
    align = metadata.get("general.alignment", 32)
    if type(align) is not int or align < 1 or align & (align - 1):
        raise _HeaderError(f"general.alignment is {repr(align)[:40]}; it must be a power of two such as 32")
    data_start = -(-cur.pos // align) * align
    _check_length(path, len(buf), data_start, tensors)
    return GgufFile(path, metadata, tuple(tensors))


def _check_length(path: Path, size: int, data_start: int, tensors: list[GgufTensor]) -> None:
    end = data_start
    for t in tensors:
        if t.type in GGML_TYPES:
            _, per_block, nbytes = GGML_TYPES[t.type]
            end = max(end, data_start + t.offset + math.prod(t.shape) // per_block * nbytes)
    if end > size:
        raise ModelLoadError(f"{path.name} is truncated: its tensors need {end:,} bytes and the file has {size:,} "
                             "(an interrupted download?)")


def loadable_by(gguf: GgufFile) -> list[str]:
    """Backends (of those installed) that can load this file: llama.cpp, where llama-cpp-python is installed and
    `llama_cpp_problem` finds none; torch, where transformers reads its architecture and the gguf and accelerate
    packages its GGUF loader needs are installed (a file `check_gguf` would refuse loads nowhere); never MLX."""
    out = ["llamacpp"] if importlib.util.find_spec("llama_cpp") and not llama_cpp_problem(gguf) else []
    if _problem(gguf) or not all(importlib.util.find_spec(m) for m in ("gguf", "accelerate")):
        return out
    return [*out, "torch"] if torch_supports(str(gguf.model_type).removesuffix("_text")) else out
