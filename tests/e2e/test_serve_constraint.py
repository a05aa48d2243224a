"""`logitlab serve` takes OpenAI's `response_format` (json_schema, json_object) and the dialects' constraint fields
into the grammar stage of the run: every answer parses and validates against its schema (`jsonschema`), a bad
schema is refused with a 400 that says where. The official `openai` client and raw httpx against the server started
in this process on 127.0.0.1 (the tiny torch model on the CPU); every outcome is seeded."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from app.core.models.sources import ModelSpec
from app.serve.host import Host, Keeper
from app.serve.server import Server
from backends.base import LoadOptions

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")
pytestmark = pytest.mark.needs("torch")
CHAT = [{"role": "user", "content": "A person, please"}]
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def served(tiny_path, tmp_path_factory):
    spec = ModelSpec(source=str(tiny_path), backend="torch", options=LoadOptions(device="cpu", dtype="float32"))
    host = Host(spec, Keeper(tmp_path_factory.mktemp("serve") / "runs.jsonl", spec))
    host.load()
    server = Server(host).start()
    yield server
    server.stop()
    host.close()


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served.url, api_key="none", max_retries=0)


def test_a_json_schema_response_format_gives_json_that_validates(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    r = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=150, seed=1, n=3, response_format=fmt)
    for choice in r.choices:
        jsonschema.validate(json.loads(choice.message.content), PERSON)
        assert choice.finish_reason == "stop"


def test_json_object_gives_an_object_on_completions_too(client):
    r = client.completions.create(model="tiny", prompt="{", max_tokens=200, seed=1, temperature=0.7,
                                  extra_body={"response_format": {"type": "json_object"}})
    text = r.choices[0].text  # (a random model's strings run long: this seed closes its object)
    assert isinstance(json.loads(text), dict) and r.choices[0].finish_reason == "stop", text


def test_the_dialects_fields_are_taken_too(served):
    date = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    body = {"prompt": "Date:", "max_tokens": 32, "seed": 3, "structured_outputs": {"regex": date}}
    text = httpx.post(served.url + "/completions", json=body).json()["choices"][0]["text"]
    assert re.fullmatch(date, text), text
    body = {"prompt": "Answer:", "max_tokens": 8, "seed": 4, "grammar": 'root ::= "yes" | "no"'}
    assert httpx.post(served.url + "/completions", json=body).json()["choices"][0]["text"] in ("yes", "no")


def test_a_bad_schema_is_a_400_that_says_where(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=4, response_format=fmt)
    assert e.value.body["message"] == "the JSON schema: Invalid type: objekt"
    assert e.value.body["param"] == "response_format"


def test_a_malformed_response_format_and_two_constraints_are_400s(served):
    for body, words in [({"response_format": {"type": "xml"}}, 'response_format.type must be "text"'),
                        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema.schema must"),
                        ({"response_format": {"type": "json_object"}, "grammar": 'root ::= "a"'},
                         "give one constraint a request")]:
        r = httpx.post(served.url + "/chat/completions", json={"messages": CHAT, "max_tokens": 2, **body})
        assert r.status_code == 400 and r.json()["error"]["message"].startswith(words)


def test_text_format_on_the_responses_route(served):
    body = {"input": "A person", "max_output_tokens": 150, "seed": 5,
            "text": {"format": {"type": "json_schema", "name": "person", "schema": PERSON}}}
    r = httpx.post(served.url + "/responses", json=body).json()
    jsonschema.validate(json.loads(r["output_text"]), PERSON)
