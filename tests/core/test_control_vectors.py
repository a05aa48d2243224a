"""Steering vectors as numbers and files: the mean and principal difference of hand-made states, llama.cpp's
control-vector GGUF read back by the `gguf` package's own reader (llama.cpp's layout: arch "controlvector", F32
`direction.L` tensors, no layer 0), files that are not one refused in one line, layers as typed, and the strength ×
layer grid's cells, baseline and fluency marks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.core.compare.steer_grid import CellResult, GridRun, SteerGridPlan, make_grid, mark_broken
from app.core.control_vectors import ControlVector, VectorError, make_vector, parse_layers, read_vector, write_vector
from app.core.events import Request
from app.core.settings import SamplerSettings

gguf = pytest.importorskip("gguf")


def states(*rows: list[float]) -> np.ndarray:
    """(P, 1 layer, hidden) from each pair's row."""
    return np.array(rows, dtype=np.float32)[:, None, :]


def test_the_mean_method_is_the_mean_difference_and_the_norms_those_of_the_states():
    pos, neg = states([3, 0], [5, 2]), states([1, 0], [1, 0])
    v = make_vector(pos, neg, (4,), "mean", "llama")
    assert np.allclose(v.directions[4], [3, 1]) and v.layers == (4,) and v.pairs == 2
    assert v.norms[4] == pytest.approx(np.mean([3, np.hypot(5, 2), 1, 1]))
    assert v.relative(4, 2.0) == pytest.approx(2 * np.hypot(3, 1) / v.norms[4])


def test_the_pca_method_is_the_differences_principal_axis_scaled_to_their_mean_projection():
    pos, neg = states([2, 0], [4, 0], [-1, 0]), states([0, 0], [0, 0], [0, 0])  # differences along x, one reversed
    v = make_vector(pos, neg, (1,), "pca")
    assert np.allclose(v.directions[1], [5 / 3, 0], atol=1e-6)  # signed to agree with them, (2 + 4 - 1) / 3 long
    one = make_vector(states([1, 2]), states([0, 0]), (1,), "pca")
    assert np.allclose(one.directions[1], [1, 2])  # one pair: its difference


def test_a_vector_round_trips_through_the_gguf_package_s_reader_in_llama_cpp_s_layout(tmp_path: Path):
    rng = np.random.default_rng(1)
    v = make_vector(rng.normal(size=(3, 2, 8)), rng.normal(size=(3, 2, 8)), (2, 5), "pca", "tiny-llama")
    path = tmp_path / "v.gguf"
    write_vector(path, v)
    r = gguf.GGUFReader(str(path))
    assert bytes(r.fields["general.architecture"].parts[-1]).decode() == "controlvector"
    assert bytes(r.fields["controlvector.model_hint"].parts[-1]).decode() == "tiny-llama"
    assert int(r.fields["controlvector.layer_count"].parts[-1][0]) == 2
    tensors = {t.name: t for t in r.tensors}
    assert sorted(tensors) == ["direction.2", "direction.5"]
    for layer in (2, 5):
        t = tensors[f"direction.{layer}"]
        assert t.tensor_type == gguf.GGMLQuantizationType.F32 and list(t.shape) == [8]
        assert np.array_equal(np.array(t.data), v.directions[layer])
    back = read_vector(path)
    assert back.layers == (2, 5) and back.method == "pca" and back.pairs == 3 and back.model_hint == "tiny-llama"
    assert all(np.array_equal(back.directions[n], v.directions[n]) for n in (2, 5))
    assert back.norms == pytest.approx(v.norms)


def test_a_file_made_elsewhere_without_our_keys_reads_with_no_norms(tmp_path: Path):
    path = tmp_path / "repeng.gguf"
    w = gguf.GGUFWriter(str(path), "controlvector")  # as repeng's export_gguf writes one
    w.add_string("controlvector.model_hint", "mistral")
    w.add_uint32("controlvector.layer_count", 1)
    w.add_tensor("direction.3", np.arange(4, dtype=np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    v = read_vector(path)
    assert v.layers == (3,) and v.norms == {} and v.relative(3, 1.0) is None and v.model_hint == "mistral"


def _with_tensors(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    w = gguf.GGUFWriter(str(path), "controlvector")
    for name, t in tensors.items():
        w.add_tensor(name, t)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return path


@pytest.mark.parametrize(("tensors", "says"), [
    ({"direction.0": np.ones(4, np.float32)}, "direction.0 is refused by llama.cpp"),
    ({"token_embd.weight": np.ones((2, 4), np.float32)}, "not a direction tensor"),
    ({"direction.1": np.ones((2, 4), np.float32)}, "1-D F32"),
    ({"direction.1": np.ones(4, np.float16)}, "1-D F32"),
    ({"direction.1": np.ones(4, np.float32), "direction.2": np.ones(5, np.float32)}, "not all one size"),
    ({}, "holds no direction tensors"),
])
def test_a_file_that_is_not_a_control_vector_is_refused_in_one_line(tmp_path: Path, tensors, says: str):
    with pytest.raises(VectorError, match=says) as e:
        read_vector(_with_tensors(tmp_path / "bad.gguf", tensors))
    assert "\n" not in str(e.value) and "bad.gguf" in str(e.value)


def test_bytes_that_are_not_gguf_are_refused_in_one_line(tmp_path: Path):
    for data in (b"", b"GGUF\x03\x00\x00\x00", b"not a gguf file at all"):
        (tmp_path / "x.gguf").write_bytes(data)
        with pytest.raises(VectorError, match=r"x\.gguf") as e:
            read_vector(tmp_path / "x.gguf")
        assert "\n" not in str(e.value)


def test_layer_0_and_empty_vectors_are_never_written(tmp_path: Path):
    with pytest.raises(VectorError, match="layer 0"):
        make_vector(states([1, 0]), states([0, 0]), (0,))
    with pytest.raises(VectorError, match="layer 0"):
        write_vector(tmp_path / "v.gguf", ControlVector({0: np.ones(2, np.float32)}))
    assert not (tmp_path / "v.gguf").exists()


def test_layers_as_typed():
    assert parse_layers("3") == (3,) and parse_layers("2-5") == (2, 3, 4, 5) and parse_layers("1, 3-4,3") == (1, 3, 4)
    for bad, says in [("", "numbers, ranges"), ("a", "numbers, ranges"), ("5-2", "backwards"), ("1-", "numbers")]:
        with pytest.raises(ValueError, match=says):
            parse_layers(bad)
    with pytest.raises(ValueError, match="past this model's last layer \\(5\\)"):
        parse_layers("4-7", count=6)


def test_the_grid_puts_the_unsteered_baseline_first_and_marks_where_fluency_broke():
    cells = make_grid(SamplerSettings(seed=1), "v.gguf", [(2,), (3, 4)], [4, 1, 0])
    assert [(c.row, c.col, c.strength) for c in cells] == [(0, 0, 0.0), (0, 1, 1.0), (0, 2, 4.0),
                                                            (1, 0, 0.0), (1, 1, 1.0), (1, 2, 4.0)]
    assert cells[4].settings.steering.layers == (3, 4) and cells[4].settings.steering.strength == 1.0
    ppl = [10.0, 15.0, 20.0, 8.0, 17.0, None]
    marked = mark_broken([CellResult(c, "", p, 0.0, None, None) for c, p in zip(cells, ppl, strict=True)])
    assert [r.broken for r in marked] == [False, False, True, False, True, False]
    with pytest.raises(ValueError, match="strength other than 0"):
        make_grid(SamplerSettings(), "v.gguf", [(1,)], [0])
    vector = ControlVector({n: np.ones(2, np.float32) for n in (2, 3)})
    assert len(make_grid(SamplerSettings(), "v.gguf", [(2,), (2, 3)], [1], vector)) == 4
    with pytest.raises(ValueError, match=r"no direction for layer 4 \(it has 2, 3\)"):
        make_grid(SamplerSettings(), "v.gguf", [(2,), (3, 4)], [1], vector)


def test_the_grid_plan_gives_one_cell_a_job_under_the_base_request():
    cells = make_grid(SamplerSettings(seed=1), "v.gguf", [(1,)], [2, 4])
    plan = SteerGridPlan(cells=[GridRun(c) for c in cells], base=Request(prompt="Hi", top_n=7), n=2)
    jobs = [plan.next_job() for _ in range(4)]
    assert [len(j) for j in jobs] == [1, 1, 1, 0]
    assert [j[0].settings.steering.strength if j[0].settings.steering else 0 for j in jobs[:3]] == [0, 2, 4]
    assert all(j[0].prompt == "Hi" and j[0].top_n == 7 and j[0].n == 2 for j in jobs[:3])
