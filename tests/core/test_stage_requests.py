"""The new stages and the order as each server dialect and each View code snippet takes them: sent where the
dialect knows them (off as its neutral value), said where an engine has no such stage."""

from __future__ import annotations

import json
import re

from app.core.codegen.snippets import CodeRequest, llama_cpp, llama_cpp_body, mlx_lm, openai_json, transformers
from app.core.remote.server_request import DIALECTS, OPENAI, request_fields
from app.core.settings import SamplerSettings, parse_order

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
