"""CPU threads: the rule (one thread for a small model, torch's default for a larger one), the user's override
(`--threads`, OMP_NUM_THREADS), and that the torch backend applies them at load time."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.base import LoadOptions
from backends.threads import MAX_THREADS, SMALL_MODEL, ThreadsError, choose_threads

NO_ENV: dict[str, str] = {}


def test_a_small_model_runs_on_one_thread():
    assert choose_threads(5_500_000, None, 8, NO_ENV) == 1
    assert choose_threads(SMALL_MODEL - 1, None, 8, NO_ENV) == 1


def test_a_larger_model_keeps_torchs_default():
    assert choose_threads(SMALL_MODEL, None, 8, NO_ENV) == 8
    assert choose_threads(7_000_000_000, None, 2, NO_ENV) == 2


def test_the_users_count_wins_over_the_rule():
    assert choose_threads(5_500_000, 4, 8, NO_ENV) == 4
    assert choose_threads(7_000_000_000, 1, 8, NO_ENV) == 1


def test_omp_num_threads_counts_as_the_users_choice_unless_threads_is_given():
    assert choose_threads(5_500_000, None, 8, {"OMP_NUM_THREADS": "3"}) == 3
    assert choose_threads(5_500_000, 2, 8, {"OMP_NUM_THREADS": "3"}) == 2
    assert choose_threads(5_500_000, None, 8, {"OMP_NUM_THREADS": "lots"}) == 1  # not a number: the rule


@pytest.mark.parametrize("n", [0, -1, MAX_THREADS + 1])
def test_a_count_out_of_range_is_refused_with_the_range(n: int):
    with pytest.raises(ThreadsError, match=f"from 1 to {MAX_THREADS}"):
        choose_threads(5_500_000, n, 8, NO_ENV)


@pytest.fixture
def torch_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """torch, its thread count restored after the test (the count is process-wide); no OMP_NUM_THREADS."""
    torch = pytest.importorskip("torch")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    yield torch
    torch.set_num_threads(before)


def load(path: Path, **options: object) -> object:
    from backends.torch.backend import TorchBackend

    return TorchBackend().load(path, LoadOptions(device="cpu", dtype="float32", **options))


def test_loading_a_small_model_sets_one_thread(tiny_path: Path, torch_threads):
    torch_threads.set_num_threads(2)
    model = load(tiny_path)
    assert torch_threads.get_num_threads() == 1
    assert model.info.threads == 1


def test_loading_with_threads_sets_that_count(tiny_path: Path, torch_threads):
    model = load(tiny_path, threads=2)
    assert torch_threads.get_num_threads() == 2
    assert model.info.threads == 2


def test_a_model_above_the_line_gets_torchs_default(tiny_path: Path, torch_threads,
                                                    monkeypatch: pytest.MonkeyPatch):
    import backends.threads
    from backends.torch.backend import DEFAULT_THREADS

    monkeypatch.setattr(backends.threads, "SMALL_MODEL", 1_000)  # the tiny model counts as large
    torch_threads.set_num_threads(1)
    model = load(tiny_path)
    assert torch_threads.get_num_threads() == DEFAULT_THREADS == model.info.threads


def test_the_command_line_refuses_a_bad_count_in_one_line():
    for bad, says in (("0", f"threads must be from 1 to {MAX_THREADS}"), ("two", "not a whole number: 'two'")):
        r = subprocess.run([sys.executable, "-m", "app", "generate", "--threads", bad, "--prompt", "x"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2
        assert says in r.stderr and "Traceback" not in r.stderr


def test_the_command_line_passes_threads_to_the_load_options():
    from app.cli.flags import spec_from
    from app.cli.generate import parser as generate_parser

    assert spec_from(generate_parser().parse_args(["--threads", "3"])).options.threads == 3
    assert spec_from(generate_parser().parse_args([])).options.threads is None
