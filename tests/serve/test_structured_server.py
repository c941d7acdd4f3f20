"""Structured outputs through a real server and the official `openai` client: `response_format`
json_schema (and the client's own `chat.completions.parse` with a pydantic model), json_object
streamed, vLLM's `guided_*` / `structured_outputs` extras on /v1/completions, with and without
n-gram speculation; the tokens equal the in-process engine's; malformed constraints are 400s that
name the field."""
from __future__ import annotations

import json
import re

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

from turbospec import SamplingParams

from .server_process import API_KEY, MODEL_NAME

MESSAGES = [{"role": "user", "content": "Write a person as JSON.\ndef person():\n    return "}]
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 150}}}
PROMPT = "def parse(data):\n    return "


class Person(BaseModel):
    name: str = Field(max_length=12)
    age: int = Field(ge=0, le=150)


def test_json_schema_equals_the_engine_and_parses(client, llm):
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
    r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=96, temperature=0,
                                       response_format=rf)
    text = r.choices[0].message.content
    obj = json.loads(text)
    assert set(obj) == {"name", "age"} and isinstance(obj["age"], int) and 0 <= obj["age"] <= 150
    assert r.choices[0].finish_reason == "stop"
    want = llm.chat(MESSAGES, SamplingParams(temperature=0, max_tokens=96, structured_outputs={"json": SCHEMA}))
    assert text == want[0].outputs[0].text


def test_the_clients_parse_helper_gets_a_pydantic_object(client):
    r = client.chat.completions.parse(model=MODEL_NAME, messages=MESSAGES, max_tokens=96, temperature=0.7,
                                      seed=3, response_format=Person)
    person = r.choices[0].message.parsed
    assert isinstance(person, Person) and len(person.name) <= 12


def test_json_object_streamed_is_one_json_object(client):
    chunks = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=96, temperature=0.9,
                                            seed=1, stream=True, response_format={"type": "json_object"})
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert isinstance(json.loads(text), dict)


@pytest.mark.parametrize("extra,check", [
    ({"guided_choice": ["True", "False"]}, lambda t: t in ("True", "False")),
    ({"guided_regex": "[a-z]{3}_[0-9]{2}"}, lambda t: re.fullmatch("[a-z]{3}_[0-9]{2}", t)),
    ({"guided_json": SCHEMA}, lambda t: set(json.loads(t)) == {"name", "age"}),
    ({"structured_outputs": {"grammar": 'start: "[" NUM ("," NUM)* "]"\nNUM: /[0-9]{1,3}/'}},
     lambda t: re.fullmatch(r"\[[0-9]{1,3}(,[0-9]{1,3})*\]", t)),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}},
     lambda t: set(json.loads(t)) == {"name", "age"}),
])
def test_completions_extras_plain_and_speculative(client, spec_server, llm, extra, check):
    body = dict(model=MODEL_NAME, prompt=PROMPT, max_tokens=80, temperature=0)
    text = client.completions.create(**body, extra_body=extra).choices[0].text
    assert check(text), text
    with openai.OpenAI(base_url=f"{spec_server.url}/v1", api_key="none", timeout=60, max_retries=0) as spec:
        name = spec.models.list().data[0].id
        assert spec.completions.create(**{**body, "model": name}, extra_body=extra).choices[0].text == text
    key = next(iter(extra))
    so = {"guided_choice": lambda v: {"choice": v}, "guided_regex": lambda v: {"regex": v},
          "guided_json": lambda v: {"json": v}, "structured_outputs": lambda v: v,
          "response_format": lambda v: {"json": v["json_schema"]["schema"]}}[key](extra[key])
    want = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=80, structured_outputs=so))
    assert text == want[0].outputs[0].text


@pytest.mark.parametrize("body,param,words", [
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}}, "response_format", "name"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA, "x": 1}}},
     "response_format", "no field 'x'"),
    ({"guided_json": SCHEMA, "guided_regex": "a"}, "guided_regex", "send one of them"),
    ({"response_format": {"type": "json_object"}, "guided_choice": ["a"]}, "guided_choice", "send one of them"),
    ({"structured_outputs": {"jsn": {}}}, "structured_outputs", "no field 'jsn'"),
    ({"guided_choice": []}, "guided_choice", "non-empty list"),
    ({"guided_decoding_backend": "magic"}, "guided_decoding_backend", "llguidance"),
    ({"guided_json": {"type": "nonsense"}}, "guided_json", "guided_json: the JSON schema does not compile"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "foo"}}}},
     "response_format", "response_format: the JSON schema does not compile"),
    ({"guided_regex": "[a-"}, "guided_regex", "regex does not compile"),
    ({"structured_outputs": {"grammar": "start: foo"}}, "structured_outputs", "grammar does not compile"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "has space", "schema": SCHEMA}}},
     "response_format", "1-64 characters"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA, "strict": "yes"}}},
     "response_format", "strict must be true or false"),
    ({"structured_outputs": {"json_object": 1}}, "structured_outputs", "json_object must be true or false"),
    ({"structured_outputs": {"json_object": True, "disable_any_whitespace": True, "whitespace_pattern": " "}},
     "structured_outputs", "contradict"),
])
def test_malformed_constraints_are_400s_naming_the_field(server, body, param, words):
    with httpx.Client(base_url=server.url, timeout=60, headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        r = c.post("/v1/chat/completions", json={"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 4, **body})
    err = r.json()["error"]
    assert r.status_code == 400, r.text
    assert words in err["message"], err["message"]
    assert err["param"] == param, err


def test_a_large_choice_list_and_vllm_options(client):
    """2,500 choices (an Earley alternation gives up at 2,000: compiled as one regex);
    disable_additional_properties closes open objects; disable_fallback and json: true accepted."""
    words = [f"word{i}" for i in range(2500)] + ["a.b|c (d)"]
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=12, temperature=0.9, seed=2,
                                  extra_body={"guided_choice": words})
    assert r.choices[0].text in words and r.choices[0].finish_reason == "stop"
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=12, temperature=0,
                                  extra_body={"guided_choice": ["a.b|c (d)"]})
    assert r.choices[0].text == "a.b|c (d)"
    open_schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    so = {"json": open_schema, "disable_additional_properties": True, "disable_fallback": True,
          "disable_any_whitespace": True}
    for seed in range(3):
        r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=1.0, seed=seed,
                                      extra_body={"structured_outputs": so})
        assert list(json.loads(r.choices[0].text)) == ["a"]
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=0,
                                  extra_body={"structured_outputs": {"json": True}})
    json.loads(r.choices[0].text)
