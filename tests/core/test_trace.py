"""A run's trace: saved as JSON Lines, loaded back equal; newer or damaged files refused with file and line."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from app.core.metrics import Metrics
from app.core.sampling import History, sample
from app.core.settings import SamplerSettings
from app.core.trace import RunTrace, Sample, StepTrace
from app.core.trace_file import TraceFormatError
from backends.ops import NUMPY

SETTINGS = SamplerSettings(temperature=0.5, top_k=12, top_p=0.8, min_p=0.1, repetition_penalty=1.2, seed=9)
CLI_KEYS = {"step", "token_id", "text", "prob", "logprob", "raw_prob", "raw_logprob", "rank", "entropy",
            "final_entropy", "stages", "kept_counts", "u", "seconds", "top"}


def make_run(steps: int = 6, settings: SamplerSettings = SETTINGS) -> RunTrace:
    """A run of real sampler records over seeded random logits (some -inf), and one step a server reported."""
    rng = np.random.default_rng(0)
    vocab, prompt = 200, [3, 1, 4, 1, 5]  # under RECORD_K: the -inf logits are among those kept
    run = RunTrace(prompt_ids=prompt, settings=settings, seed=9)
    history = History.start(NUMPY, vocab, prompt)
    for i in range(steps):
        x = (rng.normal(size=vocab) * 3).astype(np.float32)
        x[rng.integers(0, vocab, 3)] = -np.inf
        s = sample(NUMPY, x, settings, float(rng.random()), history=history)
        run.steps.append(StepTrace(i, s, f"t{i} ", tuple(f"c{int(t)}" for t in s.top_ids[:20]), 0.01 * i))
    reported = Sample.partial(7, math.log(0.5), [7, 8, 9], [math.log(0.5), math.log(0.3), math.log(0.2)])
    run.steps.append(StepTrace(steps, reported, "é", ("é", "b", "c"), 0.5))
    run.run_id, run.parent, run.finish_reason, run.branch = 4, (2, 17), "length", "fork"
    run.model = {"name": "tiny", "backend": "torch", "source": "/models/tiny"}
    run.prompt_text = "<|user|>π ≈ 3.14\n"
    run.metrics = Metrics(prompt_tokens=5, generated_tokens=steps + 1, ttft_s=0.1, decode_s=0.3, kv_cache_bytes=4096)
    return run


def test_a_trace_saves_and_loads_back_equal(tmp_path: Path):
    run = make_run()
    path = tmp_path / "run.jsonl"
    run.save(path)
    back = RunTrace.load(path)
    assert back == run
    for name in ("prompt_ids", "prompt_text", "settings", "seed", "run_id", "parent", "model", "finish_reason",
                 "metrics", "branch"):
        assert getattr(back, name) == getattr(run, name), name
    for a, b in zip(run.steps, back.steps, strict=True):
        assert (a.step, a.text, a.top_texts, a.seconds) == (b.step, b.text, b.top_texts, b.seconds)
        sa, sb = a.sample, b.sample
        assert (sa.token, sa.rank, sa.u, sa.stage_names, sa.reported) == (sb.token, sb.rank, sb.u, sb.stage_names,
                                                                          sb.reported)
        for name in ("top_ids", "kept", "values"):  # every float32 bit, NaN and -inf included
            x, y = getattr(sa, name), getattr(sb, name)
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name
    assert not np.isfinite(run.steps[0].sample.top_logits).all()  # -inf logits made the trip
    assert np.isnan(run.steps[0].sample.thresholds).any()  # and so did the NaN of a stage without a line


def test_the_file_is_a_header_one_line_per_step_and_a_footer(tmp_path: Path):
    run = make_run(steps=3)
    run.save(tmp_path / "run.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "run.jsonl").read_text(encoding="utf-8").splitlines()]
    header, *steps, footer = lines
    assert header["format"] == "logitlab-trace" and header["version"] == 1 and header["parent"] == [2, 17]
    assert header["settings"]["top_k"] == 12 and header["prompt_ids"] == [3, 1, 4, 1, 5]
    assert [s["step"] for s in steps] == [0, 1, 2, 3] and footer["end"] is True and footer["steps"] == 4
    assert footer["metrics"]["kv_cache_bytes"] == 4096 and footer["finish_reason"] == "length"
    assert "-Infinity" in steps[0]["top_logits"] and "prob" in steps[0]  # JSON has no infinity: a string stands for it


def test_a_loaded_trace_resamples_like_the_original(tmp_path: Path):
    run = make_run(settings=SamplerSettings(temperature=1.0, seed=1))
    run.save(tmp_path / "run.jsonl")
    back = RunTrace.load(tmp_path / "run.jsonl")
    other = SamplerSettings(temperature=0.7, top_k=5)
    assert back.resample(2, other) == run.resample(2, other)
    with pytest.raises(ValueError, match="reported by a server"):
        back.resample(len(back.steps) - 1, other)


def test_saving_replaces_the_file_atomically_and_leaves_no_temporary_file(tmp_path: Path, monkeypatch):
    path = tmp_path / "run.jsonl"
    path.write_text("the old trace\n")
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    make_run(steps=2).save(path)
    assert synced and RunTrace.load(path).token_ids == make_run(steps=2).token_ids
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


def test_a_failed_save_keeps_the_old_file(tmp_path: Path):
    path = tmp_path / "run.jsonl"
    make_run(steps=2).save(path)
    before = path.read_bytes()
    broken = make_run(steps=2)
    broken.metrics = object()  # not serializable: the write fails after the steps were written
    with pytest.raises(TypeError):
        broken.save(path)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


def saved_lines(tmp_path: Path) -> tuple[Path, list[str]]:
    path = tmp_path / "run.jsonl"
    make_run(steps=3).save(path)
    return path, path.read_text(encoding="utf-8").splitlines()


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path


def test_a_file_from_a_newer_version_is_refused_with_file_and_line(tmp_path: Path):
    path, lines = saved_lines(tmp_path)
    header = json.loads(lines[0])
    header["version"] = 2
    write(path, [json.dumps(header), *lines[1:]])
    with pytest.raises(TraceFormatError, match=rf"{path}:1: written by a newer Logit Lab \(trace format 2"):
        RunTrace.load(path)


@pytest.mark.parametrize(("damage", "line", "message"), [
    (lambda ls: ls[:-1], 6, "ends before the trace's last line"),  # truncated: header, 4 steps, no footer
    (lambda ls: [*ls[:2], ls[2][:40], *ls[3:]], 3, "damaged trace line"),  # half a line
    (lambda ls: [*ls, ls[1]], 7, "after the trace's last line"),
    (lambda ls: [ls[0], ls[2], *ls[2:]], 2, "step 1 where step 0 was expected"),
    (lambda ls: [*ls[:2], ls[2].replace('"probs": [[', '"probs": [["x", '), *ls[3:]], 3, "damaged trace line"),
    (lambda ls: [*ls[:-1], ls[-1].replace('"steps": 4', '"steps": 9')], 6, "footer counts 9 steps"),
    (lambda ls: ["{}", *ls[1:]], 1, "not a Logit Lab trace"),
    (lambda ls: [], 1, "empty file"),
])
def test_a_damaged_file_is_refused_with_file_and_line_never_half_loaded(tmp_path: Path, damage, line, message):
    path, lines = saved_lines(tmp_path)
    write(path, damage(lines))
    with pytest.raises(TraceFormatError, match=rf"^{path}:{line}: .*{message}"):
        RunTrace.load(path)


def test_bytes_that_are_not_utf8_are_a_format_error(tmp_path: Path):
    path, lines = saved_lines(tmp_path)
    path.write_bytes((lines[0] + "\n").encode() + b"\xff\xfe\n")
    with pytest.raises(TraceFormatError, match=rf"{path}:2: damaged"):
        RunTrace.load(path)


def test_the_command_line_json_keeps_its_keys_and_says_what_was_observed():
    run = make_run(steps=1)
    full, partial = (st.to_json() for st in run.steps)
    assert full.keys() >= CLI_KEYS and partial.keys() >= CLI_KEYS
    assert len(full["top"]) == 20 and full["top"][0].keys() >= {"token_id", "text", "raw_prob", "prob", "cut_by"}
    assert full["stages"] == ["penalties", "temperature", "top_k", "top_p", "min_p"]
    assert full["thresholds"][0] is None and full["thresholds"][3] == pytest.approx(0.8)
    assert partial["stages"] == [] and partial["raw_prob"] is None and partial["reported"] == "final"
    assert partial["top"][0]["raw_prob"] is None and partial["top"][0]["prob"] == pytest.approx(0.5)
    json.dumps(full, allow_nan=False)
    json.dumps(partial, allow_nan=False)
