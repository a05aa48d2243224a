"""A run's trace: saved as JSON Lines (numbers that are not finite as strings), loaded back equal; newer or damaged
files (bad JSON, JSON nested too deeply, a field of the wrong type, whatever a fuzzer puts in) refused with file,
line and field."""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.metrics import Metrics
from app.core.record.export import candidates_csv, steps_csv, to_markdown
from app.core.record.trace import RunTrace, Sample, StepTrace, from_lines, to_lines
from app.core.record.trace_file import TraceFormatError
from app.core.sampler.pipeline import History
from app.core.sampler.sampling import sample
from app.core.sampler.step_view import resample_step
from app.core.settings import SamplerSettings
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


def test_a_step_that_ran_dynamic_temperature_loads_back(tmp_path: Path):
    """Every name a record can give a stage is one a file may hold (the stage table's), dynamic temperature's too."""
    run = make_run(3, SamplerSettings(temperature=0.9, dynatemp_range=0.3, top_k=12, seed=9))
    assert "dynatemp" in run.steps[0].sample.stage_names
    run.save(tmp_path / "run.jsonl")
    assert RunTrace.load(tmp_path / "run.jsonl") == run


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
    assert resample_step(back, 2, other) == resample_step(run, 2, other)
    with pytest.raises(ValueError, match="reported by a server"):
        resample_step(back, len(back.steps) - 1, other)


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


# -- what a careless or hostile file holds: one line naming the field, never a traceback -----------------------


def lines_of(run: RunTrace) -> list[str]:
    """The file's lines, as `save` writes them."""
    return [json.dumps(obj, ensure_ascii=False, allow_nan=False) for obj in to_lines(run)]


def strict_json(line: str) -> object:
    """A line parsed as standard JSON: NaN and Infinity, which Python's json also reads, refused."""
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(line, parse_constant=refuse)


def assert_usable(run: RunTrace) -> None:
    """A trace every part of the app can use: it saves and reads back to the same lines, and exports."""
    lines = lines_of(run)
    assert lines_of(from_lines(lines)) == lines
    for text in (steps_csv(run), candidates_csv(run), to_markdown(run)):
        assert text


DEEP = 100_000


@pytest.mark.parametrize(("damage", "line", "says"), [
    (lambda ls: ["[" * DEEP + "]" * DEEP, *ls[1:]], 1, "nested too deeply"),
    (lambda ls: [ls[0].replace('"model": {', '"model": ' + "[" * DEEP + "]" * DEEP + ', "x": {'), *ls[1:]], 1,
     "nested too deeply"),
    (lambda ls: [*ls[:2], '{"step": 1, "probs": ' + "[" * DEEP + "]" * DEEP + "}", *ls[3:]], 3, "nested too deeply"),
    (lambda ls: [*ls[:-1], '{"end": true, "metrics": ' + "{\"a\": " * DEEP + "1" + "}" * DEEP + "}"], 6,
     "nested too deeply"),
])
def test_json_nested_too_deeply_is_refused_in_one_line(tmp_path: Path, damage, line, says):
    path, lines = saved_lines(tmp_path)
    write(path, damage(lines))
    with pytest.raises(TraceFormatError, match=rf"^{path}:{line}: damaged trace line \({says}") as e:
        RunTrace.load(path)
    assert "\n" not in str(e.value)


DROP = object()


def edit(lines: list[str], i: int, **changes: object) -> list[str]:
    """Line i with some fields replaced (DROP: removed)."""
    obj = json.loads(lines[i])
    for k, v in changes.items():
        obj.pop(k) if v is DROP else obj.__setitem__(k, v)
    return [*lines[:i], json.dumps(obj), *lines[i + 1:]]


# Line 1 is the header, lines 2-4 the full records of steps 0-2, line 5 the step a server reported, 6 the footer.
@pytest.mark.parametrize(("damage", "line", "says"), [
    (lambda ls: edit(ls, -1, metrics=[1, 2]), 6, "metrics must be an object or null, got [1, 2]"),
    (lambda ls: edit(ls, -1, metrics={"ttft_s": "fast"}), 6, 'metrics.ttft_s must be a number or null, got "fast"'),
    (lambda ls: edit(ls, -1, metrics={"generated_tokens": 2.5}), 6, "metrics.generated_tokens must be a whole"),
    (lambda ls: edit(ls, -1, finish_reason=7), 6, "finish_reason must be text or null, got 7"),
    (lambda ls: edit(ls, -1, steps="4"), 6, 'steps must be a whole number, got "4"'),
    (lambda ls: edit(ls, 0, settings=[]), 1, "settings must be an object, got"),
    (lambda ls: edit(ls, 0, settings={"stop": "abc"}), 1, 'settings.stop must be a list of text, got "abc"'),
    (lambda ls: edit(ls, 0, settings={"top_k": [[1]]}), 1, "settings.top_k must be a number, got [[1]]"),
    (lambda ls: edit(ls, 0, settings={"order": "sideways"}), 1, "settings.order must be temperature-first or"),
    (lambda ls: edit(ls, 0, settings={"top_p": 7}), 1, "settings: top_p must be a number from 0 to 1"),
    (lambda ls: edit(ls, 0, parent=[1]), 1, "parent must be [run id, step] or null"),
    (lambda ls: edit(ls, 0, model=3), 1, "model must be an object of text or null, got 3"),
    (lambda ls: edit(ls, 0, prompt_ids=[1, -2]), 1, "prompt_ids must be a list of token ids"),
    (lambda ls: edit(ls, 0, seed=DROP), 1, "no seed"),
    (lambda ls: edit(ls, 1, token="x"), 2, 'token must be a token id, got "x"'),
    (lambda ls: edit(ls, 1, token=2**40), 2, "token must be a token id"),
    (lambda ls: edit(ls, 1, text=DROP), 2, "no text"),
    (lambda ls: edit(ls, 1, seconds=[0.1]), 2, "seconds must be a number, got [0.1]"),
    (lambda ls: edit(ls, 1, u="NaNx"), 2, "u must be a number"),
    (lambda ls: edit(ls, 1, rank=None), 2, "rank must be a whole number, got null"),
    (lambda ls: edit(ls, 1, stages="top_k"), 2, "stages must be a list of stage names (penalties"),
    (lambda ls: edit(ls, 1, stages=["top_k", "warp"]), 2, "stages must be a list of stage names"),
    (lambda ls: edit(ls, 1, top_ids=[1.5]), 2, "top_ids must be a list of whole numbers, got [1.5]"),
    (lambda ls: edit(ls, 1, probs=[[0.5], [0.1, 0.2]]), 2, "probs must be a list of equally long lists of numbers"),
    (lambda ls: edit(ls, 1, probs=[0.5]), 2, "probs must be a list of equally long lists"),
    (lambda ls: edit(ls, 1, kept=[[2]]), 2, "kept must be a row of 0 and 1 per stage"),
    (lambda ls: edit(ls, 1, top_logits=[1.0]), 2, "top_ids (200) and top_logits (1) must be as long"),
    (lambda ls: edit(ls, 1, top_p_cumulative=[0.5]), 2, "top_p_cumulative holds 1 numbers for 20 candidates"),
    (lambda ls: edit(ls, 1, top_texts=["a", 1]), 2, "top_texts must be a list of text"),
    (lambda ls: edit(ls, 1, top_texts=["a"]), 2, "1 candidate texts (top_texts) for 20 candidates"),
    (lambda ls: edit(ls, 1, kept_counts=["NaN"] * 5), 2, "kept_counts must be a list of whole numbers"),
    (lambda ls: edit(ls, 4, reported="both"), 5, 'reported must be "raw" or "final" or null, got "both"'),
    (lambda ls: edit(ls, 4, prob={}), 5, "prob must be a number"),
    (lambda ls: edit(ls, 4, step=True), 5, "step must be a whole number, got true"),
])
def test_a_field_of_the_wrong_type_is_refused_with_its_name(tmp_path: Path, damage, line, says):
    path, lines = saved_lines(tmp_path)
    write(path, damage(lines))
    with pytest.raises(TraceFormatError) as e:
        RunTrace.load(path)
    message = str(e.value)
    assert message.startswith(f"{path}:{line}: damaged trace line (") and says in message, message
    assert "\n" not in message and len(message) < len(str(path)) + 150


def test_a_session_file_opened_as_a_trace_says_what_it_is(tmp_path: Path):
    path = write(tmp_path / "s.jsonl", ['{"format": "logitlab-session", "version": 1}'])
    with pytest.raises(TraceFormatError, match=rf"^{path}:1: a Logit Lab session file, not a trace file$"):
        RunTrace.load(path)


def test_numbers_that_are_not_finite_are_written_as_strings_and_read_back_bit_for_bit(tmp_path: Path):
    run = make_run(steps=2)
    full = run.steps[0]
    run.steps[0] = replace(full, seconds=math.nan, sample=replace(full.sample, u=math.inf))
    with np.errstate(over="ignore"):  # a server's nonsense: a log-probability of 1000
        overflowing = Sample.partial(7, 1000.0, [7, 8], [1000.0, -math.inf], reported="raw")
    run.steps.append(StepTrace(len(run.steps), overflowing, "x", ("x", "y"), -math.inf))
    run.metrics = replace(run.metrics, ttft_s=math.inf, decode_s=math.nan)
    run.save(tmp_path / "run.jsonl")
    lines = (tmp_path / "run.jsonl").read_text(encoding="utf-8").splitlines()
    objs = [strict_json(line) for line in lines]  # standard JSON, every line
    assert objs[1]["seconds"] == "NaN" and objs[1]["u"] == "Infinity" and objs[-1]["metrics"]["ttft_s"] == "Infinity"
    back = RunTrace.load(tmp_path / "run.jsonl")
    assert lines_of(back) == lines and back.metrics == replace(run.metrics, decode_s=back.metrics.decode_s)
    assert math.isnan(back.steps[0].seconds) and back.steps[0].sample.u == math.inf
    assert back.steps[-1].sample.raw_logprob == 1000.0 and back.steps[-1].seconds == -math.inf
    assert_usable(back)


# Any JSON a field can hold, NaN and the infinities' strings and deep nests among it.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6) | st.sampled_from(["NaN", "Infinity", "-Infinity", "raw", "final", "top_p", "temperature"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10)


def mutate(data: st.DataObject, objs: list) -> list[str]:
    """The lines `objs` with one value somewhere in them (a line, a field, an item, up to three levels down)
    replaced by any JSON, or removed; as text."""
    objs = copy.deepcopy(objs)
    node, key = objs, data.draw(st.integers(0, len(objs) - 1))
    for _ in range(data.draw(st.integers(0, 3))):
        child = node[key]
        if not child or not isinstance(child, (dict, list)):
            break
        node, key = child, data.draw(st.sampled_from(sorted(child) if isinstance(child, dict) else range(len(child))))
    if data.draw(st.booleans()):
        node[key] = data.draw(JSON)
    else:
        del node[key]
    return [json.dumps(o, ensure_ascii=False) for o in objs]


TRACE_OBJS = [json.loads(line) for line in lines_of(make_run(steps=2))]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_whatever_a_trace_file_holds_it_is_read_whole_or_refused_in_one_line(data):
    lines = mutate(data, TRACE_OBJS)
    try:
        run = from_lines(lines, "f.jsonl")
    except TraceFormatError as e:
        assert str(e).startswith("f.jsonl:") and "\n" not in str(e)
    else:
        assert_usable(run)
