"""A constraint sent to a server in its own dialect (OpenAI's response_format, vLLM's structured_outputs, llama.cpp's
json_schema and grammar), refused in one line where the dialect has no way to say it, and recorded as sent."""

from __future__ import annotations

import json
import threading
from contextlib import closing

import pytest

from app.core.codegen.snippets import CodeRequest, llama_cpp_body, openai_body, snippets
from app.core.decoding.generation import generate
from app.core.events import Finished, Request
from app.core.models.sources import ModelSpec
from app.core.remote.remote_run import load_remote
from app.core.remote.server_constraint import ServerConstraintError, choices_gbnf, constraint_fields
from app.core.remote.server_request import DIALECTS, OPENAI, request_fields
from app.core.settings import SamplerSettings
from app.core.stage_inputs import Constraint
from tests.remote_fake import LLAMACPP_MODELS, fake_server, llamacpp_like

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
JSON_SCHEMA = Constraint("json_schema", json.dumps(SCHEMA))
CHOICES = Constraint("choices", 'yes\nno\nsay "maybe"')


def sent(c: Constraint, dialect: str, chat: bool = False) -> dict:
    return request_fields(SamplerSettings(constraint=c), 1, dialect=DIALECTS[dialect], chat=chat)


def test_openai_compatible_servers_get_a_schema_as_response_format():
    fmt = {"type": "json_schema", "json_schema": {"name": "logitlab", "schema": SCHEMA}}
    assert sent(JSON_SCHEMA, "openai")["response_format"] == fmt == sent(JSON_SCHEMA, "vllm")["response_format"]
    assert sent(Constraint("json_object"), "openai")["response_format"] == {"type": "json_object"}


def test_vllm_gets_regex_choices_and_gbnf_as_structured_outputs():
    assert sent(Constraint("regex", r"\d{4}"), "vllm")["structured_outputs"] == {"regex": r"\d{4}"}
    assert sent(CHOICES, "vllm")["structured_outputs"] == {"choice": ["yes", "no", 'say "maybe"']}
    assert sent(Constraint("gbnf", 'root ::= "a"'), "vllm")["structured_outputs"] == {"grammar": 'root ::= "a"'}


def test_llama_cpp_gets_json_schema_and_grammar_fields_and_choices_as_gbnf():
    assert sent(JSON_SCHEMA, "llama.cpp")["json_schema"] == SCHEMA
    assert sent(Constraint("json_object"), "llama.cpp")["json_schema"] == {"type": "object"}
    assert sent(CHOICES, "llama.cpp")["grammar"] == 'root ::= "yes" | "no" | "say \\"maybe\\""\n'
    assert choices_gbnf(("a\nb", "c\\")) == 'root ::= "a\\nb" | "c\\\\"\n'


def test_llama_cpp_python_takes_a_schema_only_in_a_chat():
    assert sent(JSON_SCHEMA, "llama-cpp-python", chat=True)["response_format"] == {"type": "json_object",
                                                                                    "schema": SCHEMA}
    assert "root   ::= object" in sent(Constraint("json_object"), "llama-cpp-python")["grammar"]
    with pytest.raises(ServerConstraintError, match=r"llama-cpp-python takes no JSON schema: .*in a chat"):
        sent(JSON_SCHEMA, "llama-cpp-python")


@pytest.mark.parametrize(("c", "dialect", "words"), [
    (Constraint("regex", "a+"), "openai", "takes no regular expression"),
    (Constraint("regex", "a+"), "llama.cpp", "takes no regular expression: it takes a JSON schema, GBNF or choices"),
    (Constraint("lark", "start: \"a\""), "llama.cpp", "no Lark grammar"),
    (CHOICES, "openai", "takes no list of choices"),
    (JSON_SCHEMA, "mlx_lm", "mlx_lm.server takes no constraint"),
])
def test_what_a_dialect_cannot_say_is_refused_in_one_line(c, dialect, words):
    with pytest.raises(ServerConstraintError, match=words) as e:
        sent(c, dialect)
    assert "\n" not in str(e.value)


def test_no_constraint_sends_nothing_more():
    assert constraint_fields(None, "none", "x") == {}
    assert request_fields(SamplerSettings(), 1) == request_fields(SamplerSettings(constraint=None), 1, dialect=OPENAI)


def test_view_code_sends_what_the_run_sends_and_says_what_it_leaves_out():
    req = CodeRequest(SamplerSettings(constraint=JSON_SCHEMA), "x")
    assert openai_body(req)[0]["response_format"]["json_schema"]["schema"] == SCHEMA
    assert llama_cpp_body(req)["json_schema"] == SCHEMA
    regex = CodeRequest(SamplerSettings(constraint=Constraint("regex", "a+")), "x")
    assert "response_format" not in openai_body(regex)[0]
    said = [s.title for s in snippets(regex) if "takes no regular expression" in s.code + " ".join(s.notes)]
    assert said == ["OpenAI JSON", "OpenAI Python", "curl", "llama.cpp"]


def run(spec: ModelSpec, settings: SamplerSettings) -> Finished:
    with closing(load_remote(spec)) as model:
        events = list(generate(model, Request(model=spec, prompt="hi", settings=settings), threading.Event()))
    (end,) = [e for e in events if isinstance(e, Finished)]
    return end


def test_a_run_sends_the_grammar_and_its_trace_records_it():
    with fake_server(llamacpp_like(n=3), LLAMACPP_MODELS) as srv:
        end = run(ModelSpec(source="", backend="remote", base_url=srv.url),
                  SamplerSettings(max_tokens=3, seed=1, constraint=CHOICES))
    assert srv.bodies[0]["grammar"] == end.trace.model["sent"]["grammar"] == choices_gbnf(CHOICES.choices)


def test_a_run_with_a_constraint_the_server_cannot_take_ends_before_sending_it():
    with fake_server(llamacpp_like(n=3), LLAMACPP_MODELS) as srv:
        end = run(ModelSpec(source="", backend="remote", base_url=srv.url),
                  SamplerSettings(max_tokens=3, seed=1, constraint=Constraint("regex", "a+")))
    assert end.reason == "error" and "llama-cpp-python takes no regular expression" in end.message
    assert srv.bodies == []
