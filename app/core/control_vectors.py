"""Steering vectors: made from contrastive prompt pairs, kept in llama.cpp's control-vector GGUF (so a vector made here
runs in llama.cpp with `--control-vector`), read back checked. Layers are numbered as llama.cpp numbers them:
`direction.L` is added to the output of decoder layer L (0-based), and layer 0 never has one (llama.cpp refuses the
file). Numbers only (numpy and the `gguf` package): the hidden states come from the caller (`decoding.steering`).
"""

from __future__ import annotations

import math
import struct
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.core.files import write_atomic

ARCH = "controlvector"  # llama.cpp's (and repeng's export_gguf's) architecture name for these files
METHODS = ("mean", "pca")
BREAKS = 2.0  # a strength near this many times the layer's residual norm typically breaks a model's fluency


class VectorError(ValueError):
    """A vector file that cannot be read or written, or pairs that make none; the message is one line."""


@dataclass(frozen=True)
class ControlVector:
    """A direction per layer, (hidden,) float32 each; `norms` the residual stream's mean norm at each layer over the
    prompts it was made from (absent for a file made elsewhere), which a strength is shown relative to."""

    directions: Mapping[int, np.ndarray]
    model_hint: str = ""
    method: str = ""
    pairs: int = 0
    norms: Mapping[int, float] = field(default_factory=dict)

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(sorted(self.directions))

    @property
    def hidden(self) -> int:
        return len(next(iter(self.directions.values())))

    def relative(self, layer: int, strength: float, norm: float | None = None) -> float | None:
        """strength × the direction's norm ÷ the residual norm at `layer` (`norm`, else the one recorded); None where
        neither is known."""
        norm = norm if norm is not None else self.norms.get(layer)
        if not norm:
            return None
        return abs(strength) * float(np.linalg.norm(self.directions[layer])) / norm


def make_vector(positive: np.ndarray, negative: np.ndarray, layers: Sequence[int], method: str = "mean",
                model_hint: str = "") -> ControlVector:
    """A vector from the residual streams of P contrastive pairs at their last token, (P, layers, hidden) each
    (`layers` naming the second axis): per layer the mean of the differences (positive - negative), or their first
    principal component (of the differences themselves, not centred: the direction that explains them best), signed
    to agree with them and scaled to their mean projection on it, so a strength of 1 is one typical difference."""
    if method not in METHODS:
        raise VectorError(f"the method is {' or '.join(METHODS)}, got {method!r}")
    if positive.shape != negative.shape or positive.ndim != 3 or positive.shape[0] < 1:
        raise VectorError(f"pairs disagree: positive {positive.shape}, negative {negative.shape}")
    if 0 in layers:
        raise VectorError("layer 0 cannot be steered in llama.cpp's control vectors (they start at layer 1)")
    diffs = (positive - negative).astype(np.float64)  # (P, layers, hidden)
    directions = {int(layer): _direction(diffs[:, i], method).astype(np.float32) for i, layer in enumerate(layers)}
    states = np.concatenate([positive, negative]).astype(np.float64)
    norms = {int(layer): float(np.linalg.norm(states[:, i], axis=-1).mean()) for i, layer in enumerate(layers)}
    return ControlVector(directions, model_hint, method, positive.shape[0], norms)


def _direction(diffs: np.ndarray, method: str) -> np.ndarray:
    """(P, hidden) differences -> (hidden,) direction."""
    mean = diffs.mean(axis=0)
    if method == "mean" or len(diffs) == 1:
        return mean
    pc = np.linalg.svd(diffs, full_matrices=False)[2][0]  # the first right singular vector: unit norm
    proj = diffs @ pc
    if proj.mean() < 0:
        pc, proj = -pc, -proj
    return pc * proj.mean()


def write_vector(path: str | Path, vector: ControlVector) -> None:
    """`vector` as llama.cpp's control-vector GGUF (repeng's layout: `controlvector.model_hint`, `.layer_count`,
    F32 tensors `direction.L`), written atomically; how it was made under `logitlab.*` keys (llama.cpp reads none)."""
    import gguf

    if not vector.directions or 0 in vector.directions:
        raise VectorError("a control vector needs directions for layers from 1 on (llama.cpp refuses layer 0)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "vector.gguf"
        w = gguf.GGUFWriter(str(out), ARCH)
        w.add_string(f"{ARCH}.model_hint", vector.model_hint)
        w.add_uint32(f"{ARCH}.layer_count", len(vector.directions))
        w.add_string("logitlab.method", vector.method)
        w.add_uint32("logitlab.pairs", vector.pairs)
        for layer, norm in sorted(vector.norms.items()):
            w.add_float32(f"logitlab.residual_norm.{layer}", norm)
        for layer in vector.layers:
            w.add_tensor(f"direction.{layer}", np.ascontiguousarray(vector.directions[layer], dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        write_atomic(path, out.read_bytes())


def read_vector(path: str | Path) -> ControlVector:
    """The control vector in `path` (llama.cpp's format, from here or repeng or llama.cpp's tools), checked as
    llama.cpp checks it: `direction.L` tensors, L ≥ 1, 1-D, F32, all one size. A VectorError names the file."""
    import gguf

    name = Path(path).name
    try:
        reader = gguf.GGUFReader(str(path))
    except FileNotFoundError:
        raise VectorError(f"{name}: no such file") from None
    except (ValueError, OSError, KeyError, IndexError, TypeError, OverflowError, struct.error) as e:  # damaged
        raise VectorError(f"{name} is not a GGUF control vector ({(str(e) or repr(e)).splitlines()[0]})") from None
    directions = {}
    for t in reader.tensors:
        layer = _layer_of(name, t.name)
        if t.tensor_type != gguf.GGMLQuantizationType.F32 or len(t.shape) != 1:
            raise VectorError(f"{name}: {t.name} must be a 1-D F32 tensor")
        directions[layer] = np.array(t.data, dtype=np.float32).reshape(-1)
    if not directions:
        raise VectorError(f"{name} holds no direction tensors: not a control vector")
    if len({len(d) for d in directions.values()}) > 1:
        raise VectorError(f"{name}: its direction tensors are not all one size")
    fields = {k: _value(f) for k, f in reader.fields.items()}
    norms = {int(k.rsplit(".", 1)[1]): float(v) for k, v in fields.items()
             if k.startswith("logitlab.residual_norm.") and isinstance(v, float) and math.isfinite(v)}
    return ControlVector(directions, str(fields.get(f"{ARCH}.model_hint") or ""), str(fields.get("logitlab.method")
                         or ""), int(fields.get("logitlab.pairs") or 0), norms)


def _layer_of(name: str, tensor: str) -> int:
    head, _, tail = tensor.partition(".")
    if head != "direction" or not tail.isdigit():
        raise VectorError(f"{name}: {tensor!r} is not a direction tensor (direction.LAYER)")
    if int(tail) == 0:
        raise VectorError(f"{name}: direction.0 is refused by llama.cpp (control vectors start at layer 1)")
    return int(tail)


def _value(f: object) -> object:
    """A scalar or string metadata value of a GGUFReader field (None for arrays and anything else)."""
    parts, data = getattr(f, "parts", None), getattr(f, "data", None)
    if not parts or not data or len(data) != 1:
        return None
    raw = parts[data[0]]
    if raw.dtype == np.uint8 and len(raw) != 1:
        return bytes(raw).decode("utf-8", "replace")
    value = raw[0] if len(raw) == 1 else None
    return float(value) if isinstance(value, np.floating) else int(value) if isinstance(value, np.integer) else value


def parse_layers(text: str, count: int | None = None) -> tuple[int, ...]:
    """Layers as typed: `3`, `3,4`, `2-5`, or a mix (`1,3-4`); each once, in order. A ValueError says what is wrong,
    and, given the model's `count`, names a layer past it."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        lo, sep, hi = part.partition("-")
        if not lo.strip().isdigit() or (sep and not hi.strip().isdigit()):
            raise ValueError(f"layers are numbers, ranges or both with commas (3,4 or 2-5), got {text!r}")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ValueError(f"the range {part} runs backwards")
        out += [n for n in range(a, b + 1) if n not in out]
    if count is not None and (past := [n for n in out if n >= count]):
        raise ValueError(f"layer {past[0]} is past this model's last layer ({count - 1})")
    return tuple(out)


def parse_strengths(text: str) -> tuple[float, ...]:
    """Strengths as typed, with commas (`0, 0.5, 1, 2`); a ValueError says what is wrong."""
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"strengths are numbers with commas (1,2,4), got {text!r}") from None
    if any(not math.isfinite(v) for v in values):
        raise ValueError("strengths are finite numbers")
    return values


def parse_layer_sets(text: str) -> list[tuple[int, ...]]:
    """The grid's rows as typed: sets of layers (`parse_layers`) apart by semicolons (`1; 2-3; 1,3`)."""
    sets = [parse_layers(part) for part in text.split(";") if part.strip()]
    if not sets:
        raise ValueError("type at least one set of layers (3, 2-5; sets apart by semicolons)")
    return sets
