"""`logitlab probe` as a user runs it: against the scripted sampling server (a real HTTP server on 127.0.0.1) and
against a real mlx_lm.server on the built-in model, started here. The verb is also run through `add_parser` on a
fresh set of subcommands, as `logitlab`'s own parser registers it."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from app.cli.arguments import Parser
from app.cli.probe import add_parser
from app.core.models.sources import BUILTIN_PATH
from app.core.remote.probe import CHECKS
from tests.remote_fake import fake_server, sampling_server


def probe_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli.probe", *args], capture_output=True, text=True, timeout=120)


def in_process(*args: str) -> int:
    parser = Parser(prog="logitlab")
    add_parser(parser.add_subparsers(parser_class=Parser))
    parsed = parser.parse_args(["probe", *args])
    return parsed.run(parsed)


def test_json_names_exactly_the_fields_a_server_ignores():
    with fake_server(sampling_server({"top_k", "min_p"}, reports="sampled")) as server:
        r = probe_cli("--base-url", server.url, "--json", "--budget", "150")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["ignored"] == ["min_p", "top_k"] and report["logprobs"] == "after sampling"
    assert report["requests"] <= 150 and len(server.bodies) == report["requests"]
    assert {c["verdict"] for c in report["checks"] if c["check"] not in ("top_k", "min_p", "log-probs")} == {
        "honoured"}


def test_the_table_has_a_row_per_check_under_a_heading(capsys):
    with fake_server(sampling_server({"echo"})) as server:
        assert in_process("--base-url", server.url) == 0
    out = capsys.readouterr().out
    head, sums, blank, *table = out.splitlines()
    assert "fake-model at http://127.0.0.1:" in head and "false alarms ≤ 1e-06" in head
    assert sums == "ignored: echo; log-probabilities: raw" and not blank
    assert table[0].split("|")[1:6] and [c.strip() for c in table[0].split("|")[1:6]] == [
        "check", "verdict", "sent", "seen", "confidence"]
    rows = {r.split("|")[1].strip(): r.split("|")[2].strip() for r in table[2:]}
    assert rows["echo"] == "ignored" and rows["top_k"] == "honoured" and list(rows) == [c.name for c in CHECKS]


@pytest.mark.parametrize(("args", "says"), [((), "give the server's --base-url"),
                                           (("--base-url", "ftp://x"), "must start with http"),
                                           (("--base-url", "http://127.0.0.1:9/v1", "--alpha", "0.5"),
                                            "must be from 1e-12 to 0.01")])
def test_bad_flags_are_one_line_and_exit_2(args: tuple[str, ...], says: str):
    r = probe_cli(*args)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_server_that_is_not_there_is_one_line_and_exit_1():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = probe_cli("--base-url", f"http://127.0.0.1:{port}/v1")
    assert r.returncode == 1 and "connection refused" in r.stderr and len(r.stderr.strip().splitlines()) == 1


# a real server -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mlx_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """mlx_lm.server on the built-in model, on a free port of 127.0.0.1, once it answers (stopped after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path_factory.mktemp("hf-cache")), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "mlx_lm.server", "--model", str(BUILTIN_PATH), "--host",
                             "127.0.0.1", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        if proc.poll() is not None:
            pytest.fail(f"mlx_lm.server exited: {proc.stderr.read().decode()[-500:]}")
        if time.monotonic() >= deadline:
            pytest.fail("mlx_lm.server did not answer within 90 s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()


@pytest.mark.needs("mlx")
def test_mlx_lm_server_applies_every_sampling_field_but_n_and_echo(mlx_server: str, capsys):
    """mlx_lm.server 0.32 honours seeds, so the probe's draws are the same on every run."""
    assert in_process("--base-url", mlx_server, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dialect"] == "mlx_lm.server" and report["logprobs"] == "raw"
    assert report["ignored"] == ["echo", "n"]
    verdicts = {c["check"]: c["verdict"] for c in report["checks"]}
    assert {v for c, v in verdicts.items() if c not in ("n", "echo", "log-probs")} == {"honoured"}
    bias = next(c for c in report["checks"] if c["check"] == "logit_bias")
    assert "includes the bias" in bias["detail"]  # mlx-lm's log-probabilities come after its logits processors


def test_the_verb_registers_on_any_subparsers():
    parser = argparse.ArgumentParser(prog="logitlab")
    p = add_parser(parser.add_subparsers())
    args = parser.parse_args(["probe", "--base-url", "http://127.0.0.1:1/v1", "--budget", "30"])
    assert p.prog.endswith("probe") and args.budget == 30 and args.run.__module__ == "app.cli.probe"
