"""The new stages and the order as each server dialect and each View code snippet takes them: sent where the
dialect knows them (off as its neutral value), said where an engine has no such stage; View code's llama.cpp body
and the run's request to llama.cpp are one mapping (top-n-sigma off is -1 in both)."""

from __future__ import annotations

import json
import re

import pytest

from app.core.codegen.engine_notes import missing_note
from app.core.codegen.snippets import CodeRequest, llama_cpp, llama_cpp_body, mlx_lm, openai_json, transformers
from app.core.remote.server_request import DIALECTS, OPENAI, request_fields
from app.core.settings import SamplerSettings, parse_order
from app.core.stage_table import ROWS

MORE = SamplerSettings(temperature=0.7, top_k=30, typical_p=0.9, xtc_probability=0.3, xtc_threshold=0.15,
                       top_n_sigma=1.5, dynatemp_range=0.2, logit_bias=((5, -3.0), (9, 2.0)),
                       chain=parse_order("top_k,xtc,temperature,typical_p,top_n_sigma")[1])


def test_llama_cpp_gets_every_new_stage_and_its_samplers_in_the_app_s_order():
    sent = request_fields(MORE, 1, dialect=DIALECTS["llama.cpp"])
    assert (sent["typical_p"], sent["top_n_sigma"], sent["xtc_probability"], sent["xtc_threshold"]) == (
        0.9, 1.5, 0.3, 0.15)
    assert (sent["dynatemp_range"], sent["dynatemp_exponent"]) == (0.2, 1.0)
    assert sent["samplers"] == ["penalties", "top_k", "xtc", "temperature", "typ_p", "top_n_sigma"]
    assert sent["logit_bias"] == {"5": -3.0, "9": 2.0}
    off = request_fields(SamplerSettings(), 1, dialect=DIALECTS["llama.cpp"])
    assert (off["typical_p"], off["xtc_probability"]) == (1.0, 0.0) and "logit_bias" not in off  # off, still sent


def test_other_dialects_get_only_what_they_know():
    vllm = request_fields(MORE, 1, dialect=DIALECTS["vllm"])
    assert not {"typical_p", "xtc_probability", "samplers"} & set(vllm) and vllm["logit_bias"] == {"5": -3.0,
                                                                                                  "9": 2.0}
    mlx = request_fields(MORE, 1, dialect=DIALECTS["mlx_lm"])
    assert (mlx["xtc_probability"], mlx["xtc_threshold"]) == (0.3, 0.15) and "typical_p" not in mlx
    plain = request_fields(MORE, 1, dialect=OPENAI)
    assert "logit_bias" in plain and not {"typical_p", "xtc_probability", "samplers"} & set(plain)


def heredoc_json(code: str) -> dict:
    return json.loads(re.search(r"<<'JSON'\n(.*)\nJSON\n", code, re.S).group(1))


def test_view_code_writes_each_engine_s_own_parameters_and_says_what_it_lacks():
    req = CodeRequest(MORE, "import ")
    body = heredoc_json(llama_cpp(req).code)
    assert body == llama_cpp_body(req) and body["logit_bias"] == [[5, -3.0], [9, 2.0]]
    assert body["samplers"] == ["penalties", "top_k", "xtc", "temperature", "typ_p", "top_n_sigma"]
    mlx = mlx_lm(req).code
    assert "xtc_probability=0.3" in mlx and "logit_bias={5: -3.0, 9: 2.0}" in mlx
    assert "mlx-lm has no typical_p, top_n_sigma, dynatemp" in mlx
    hf = transformers(req).code
    assert "typical_p=0.9" in hf and "sequence_bias={(5,): -3.0, (9,): 2.0}" in hf
    assert "transformers has no xtc, top_n_sigma, dynatemp" in hf
    assert any("the server has no xtc, typical_p, top_n_sigma" in n for n in openai_json(req).notes)
    for code in (mlx, hf):
        compile(code, "<snippet>", "exec")
    plain = CodeRequest(SamplerSettings(temperature=0.7, top_k=30), "import ")
    assert "has no" not in mlx_lm(plain).code + transformers(plain).code  # nothing said where nothing is missing


# one mapping: View code's llama.cpp body is what the run sends llama.cpp's server --------------------------------
EVERY_STAGE_ON = SamplerSettings(temperature=0.9, top_k=40, top_p=0.95, min_p=0.01, typical_p=0.99, top_n_sigma=3.0,
                                 epsilon_cutoff=0.0001, eta_cutoff=0.0001, xtc_probability=0.5, xtc_threshold=0.3,
                                 dynatemp_range=0.2, dry_multiplier=0.5, mirostat_tau=8.0, logit_bias=((3, 1.0),),
                                 repetition_penalty=1.1, frequency_penalty=0.2, stop=("\n",), seed=4)
SOME = [SamplerSettings(), SamplerSettings(temperature=0.0, top_k=5, min_p=0.1), SamplerSettings(top_p=0.0),
        MORE, EVERY_STAGE_ON, *(SamplerSettings(top_k=9, top_p=0.9, chain=parse_order(e)[1])
                                for e in ("llama.cpp", "mlx-lm", "transformers", "vllm", "openai"))]


@pytest.mark.parametrize("s", SOME)
def test_view_code_sends_llama_cpp_what_the_run_sends_it(s: SamplerSettings):
    req = CodeRequest(s, "import ")
    body, sent = llama_cpp_body(req), request_fields(s, req.seed, dialect=DIALECTS["llama.cpp"])
    assert body["n_predict"] == sent.pop("max_tokens")
    shared = set(body) & set(sent) - {"logit_bias"}  # (/completion takes [id, value] pairs, the same bias)
    assert {k: body[k] for k in shared} == {k: sent[k] for k in shared}
    assert set(sent) - set(body) == set()
    named = {row.engines["llama.cpp"] for row in ROWS if row.engines.get("llama.cpp")}
    assert set(body["samplers"]) <= {"penalties", *named}


@pytest.mark.parametrize("dialect", ["llama.cpp", "llama-cpp-python"])
def test_llama_cpp_is_sent_top_n_sigma_off_as_minus_one_in_the_run_and_in_view_code(dialect: str):
    """llama.cpp reads -1 as off; 0 (ours) can run top-n-sigma in place of its whole chain."""
    off = SamplerSettings(top_k=20, top_p=0.9)
    sent = request_fields(off, 1, dialect=DIALECTS[dialect])
    assert sent.get("top_n_sigma", -1) == -1
    assert llama_cpp_body(CodeRequest(off, "x"))["top_n_sigma"] == -1 == request_fields(
        off, 1, dialect=DIALECTS["llama.cpp"])["top_n_sigma"]
    on = off.with_(top_n_sigma=1.5)
    assert llama_cpp_body(CodeRequest(on, "x"))["top_n_sigma"] == 1.5 == request_fields(
        on, 1, dialect=DIALECTS["llama.cpp"])["top_n_sigma"]


def missing(note: str | None) -> set[str]:
    """The stages a "<engine> has no a, b: left out ..." note names."""
    return set() if note is None else set(note.split(" has no ", 1)[1].split(":", 1)[0].split(", "))


@pytest.mark.parametrize(("engine", "dialect"), [("mlx-lm", "mlx_lm"), ("the server", "vllm"),
                                                 ("llama.cpp", "llama.cpp")])
def test_what_view_code_says_an_engine_lacks_is_what_its_server_is_not_sent(engine: str, dialect: str):
    s = EVERY_STAGE_ON
    sent = DIALECTS[dialect].fields
    not_sent = {row.name for row in ROWS if row.is_on(s) and row.name not in ("logit_bias", "penalties", "greedy")
                and row.fields[0] not in sent}
    assert missing(missing_note(s, engine)) == not_sent
