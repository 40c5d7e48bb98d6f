"""Structured output end to end against `vpod serve` (CPU backend, tiny
random-weight model, Llama-3 vocabulary): response_format json_schema and
json_object, openai-python's chat.completions.parse() with a Pydantic model,
vLLM's structured_outputs / guided_* (json, regex, choice, EBNF grammar), a
corpus of real-world-shaped JSON schemas (tests/e2e/data/json_schemas) whose
every output must finish and validate (jsonschema), streaming with n > 1,
logprobs and seeds, and the 400s for what cannot be compiled or enforced.

A random-weight model wanders: inside a free string it would rarely pick a
closing quote among ~128k allowed tokens. The tests steer it with logit_bias
(+30 on `"`, `}`, `]`, `,` and `:`), which changes only which *allowed* token is
likely: the grammar's mask comes first, so a biased token the grammar forbids
(a `}` before the required properties, a `"` inside a pattern) never appears.
Every corpus schema must get an output that ends by the grammar (finish_reason
"stop"; up to ATTEMPTS seeds) and every such output must validate."""

import concurrent.futures
import json
import pathlib
import re
from typing import Literal

import httpx
import jsonschema
import openai
import pydantic
import pytest

from conftest import MODEL_NAME

DATA = pathlib.Path(__file__).resolve().parent / "data" / "json_schemas"
# Llama-3 ids of '"', '}', ']', ',' and ':'.
STEER = {"1": 30, "92": 30, "60": 30, "11": 30, "25": 30}
MAX_TOKENS = 300
PROMPT = "Reply in JSON."
MESSAGES = [{"role": "user", "content": "Reply in JSON."}]


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", timeout=300, max_retries=0)


def corpus():
    schemas = []
    for path in sorted(DATA.glob("*.json")):
        for entry in json.loads(path.read_text()):
            schemas.append((f"{path.stem}/{entry['name']}", entry["schema"]))
    return schemas


def test_corpus_is_large_and_well_formed():
    schemas = corpus()
    assert len(schemas) >= 100
    assert len({name for name, _ in schemas}) == len(schemas)
    for name, schema in schemas:
        jsonschema.validators.validator_for(schema).check_schema(schema)


def post(url, path, body, timeout=300):
    return httpx.post(url + path, json=body, timeout=timeout)


def generate(url, i, name, schema, seed):
    """Even entries through chat + response_format, odd ones through
    completions + structured_outputs.json (both paths, every kind of schema)."""
    common = {"model": MODEL_NAME, "max_tokens": MAX_TOKENS, "temperature": 1.0, "seed": seed,
              "logit_bias": STEER}
    if i % 2 == 0:
        body = {**common, "messages": MESSAGES,
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": name.replace("/", "_"),
                                                    "schema": schema, "strict": True}}}
        r = post(url, "/v1/chat/completions", body)
        assert r.status_code == 200, (name, r.text)
        choice = r.json()["choices"][0]
        return choice["message"]["content"], choice["finish_reason"]
    body = {**common, "prompt": PROMPT, "structured_outputs": {"json": schema}}
    r = post(url, "/v1/completions", body)
    assert r.status_code == 200, (name, r.text)
    choice = r.json()["choices"][0]
    return choice["text"], choice["finish_reason"]


# Seeds tried per schema. Steered or not, a random-weight model can still
# wander inside what a grammar allows (a run of whitespace, an email's local
# part, digits of an unbounded number) past max_tokens; such an output is cut
# ("length") and proves nothing either way, so the schema is tried with the
# next seed. Every output that finishes must validate, and every schema must
# finish with one of its seeds. The CPU backend is exact and the seeds fixed,
# so the run is deterministic.
ATTEMPTS = 3


def generate_until_finished(url, i, name, schema):
    outputs = []
    for attempt in range(ATTEMPTS):
        text, finish = generate(url, i, name, schema, seed=1000 * (attempt + 1) + i)
        outputs.append((text, finish))
        if finish == "stop":
            break
    return outputs


def test_every_corpus_output_finishes_and_validates(url):
    schemas = corpus()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(generate_until_finished, url, i, name, schema)
                   for i, (name, schema) in enumerate(schemas)]
        results = [f.result() for f in futures]
    failures = []
    first_try = 0
    for (name, schema), outputs in zip(schemas, results):
        first_try += outputs[0][1] == "stop"
        text, finish = outputs[-1]
        if finish != "stop":
            failures.append(f"{name}: no seed finished; last {finish}: {text[:200]!r}")
            continue
        try:
            jsonschema.validate(json.loads(text), schema)
        except (ValueError, jsonschema.ValidationError) as e:
            failures.append(f"{name}: {type(e).__name__}: {str(e)[:200]} in {text[:300]!r}")
    print(f"{first_try} of {len(schemas)} schemas finished with their first seed")
    assert not failures, "\n".join(failures)


class Weather(pydantic.BaseModel):
    city: str
    temperature_c: int = pydantic.Field(ge=-50, le=60)
    conditions: Literal["sunny", "cloudy", "rain", "snow"]
    warnings: list[str] = pydantic.Field(max_length=2)


def test_pydantic_parse(client):
    completion = client.chat.completions.parse(
        model=MODEL_NAME, messages=MESSAGES, response_format=Weather, max_tokens=MAX_TOKENS,
        seed=3, logit_bias=STEER)
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(choice.message.parsed, Weather)
    assert -50 <= choice.message.parsed.temperature_c <= 60
    assert Weather.model_validate_json(choice.message.content) == choice.message.parsed


def test_json_object(client):
    r = client.chat.completions.create(
        model=MODEL_NAME, messages=MESSAGES, response_format={"type": "json_object"},
        max_tokens=MAX_TOKENS, seed=4, logit_bias=STEER)
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    # structured_outputs.json_object on completions.
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=MAX_TOKENS, seed=4,
                                  logit_bias=STEER,
                                  extra_body={"structured_outputs": {"json_object": True}})
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].text), dict)


@pytest.mark.parametrize("extra", [{"structured_outputs": {"regex": "[A-Z]{2}-[0-9]{3}"}},
                                   {"guided_regex": "[A-Z]{2}-[0-9]{3}"}])
def test_regex(client, extra):
    for seed in range(3):
        r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=20, seed=seed,
                                      extra_body=extra)
        assert r.choices[0].finish_reason == "stop"
        assert re.fullmatch("[A-Z]{2}-[0-9]{3}", r.choices[0].text), r.choices[0].text


@pytest.mark.parametrize("extra", [{"structured_outputs": {"choice": ["alpha", "beta", "gamma"]}},
                                   {"guided_choice": ["alpha", "beta", "gamma"]}])
def test_choice(client, extra):
    seen = set()
    for seed in range(8):
        r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=10,
                                           seed=seed, extra_body=extra)
        assert r.choices[0].finish_reason == "stop"
        seen.add(r.choices[0].message.content)
    assert seen <= {"alpha", "beta", "gamma"} and seen


SQL_GRAMMAR = 'root ::= "SELECT " col (", " col)* " FROM t;"\ncol ::= "a" | "b" | "c"'


@pytest.mark.parametrize("extra", [{"structured_outputs": {"grammar": SQL_GRAMMAR}},
                                   {"guided_grammar": SQL_GRAMMAR}])
def test_ebnf_grammar(client, extra):
    for seed in range(3):
        r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=60, seed=seed,
                                      logit_bias={"2": 30}, extra_body=extra)  # '#': not allowed
        assert r.choices[0].finish_reason == "stop", r.choices[0].text
        assert re.fullmatch(r"SELECT [abc](, [abc])* FROM t;", r.choices[0].text), r.choices[0].text


SCHEMA = {"type": "object",
          "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999},
                         "label": {"type": "string", "maxLength": 12},
                         "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3}},
          "required": ["id", "label", "tags"], "additionalProperties": False}


def whitespace_outside_strings(text):
    """The whitespace of a JSON text outside its strings, as (offset, char,
    the char before it)."""
    found, in_string, escaped = [], False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in " \t\n\r":
            found.append((i, ch, text[i - 1] if i else ""))
    return found


@pytest.mark.parametrize("constraint", [{"json_object": True}, {"json": SCHEMA}])
def test_disable_any_whitespace_is_compact(client, constraint):
    """vLLM's disable_any_whitespace: outside strings, only the one space
    xgrammar's compact separators put after ',' and ':'."""
    r = client.completions.create(
        model=MODEL_NAME, prompt=PROMPT, max_tokens=MAX_TOKENS, seed=5, logit_bias=STEER,
        extra_body={"structured_outputs": {**constraint, "disable_any_whitespace": True}})
    text = r.choices[0].text
    assert r.choices[0].finish_reason == "stop", text
    assert isinstance(json.loads(text), dict)
    for i, ch, before in whitespace_outside_strings(text):
        assert ch == " " and before in ",:", (i, text)


def test_streaming_n_logprobs_seed(client):
    kwargs = dict(model=MODEL_NAME, prompt=PROMPT, max_tokens=MAX_TOKENS, n=3, seed=11,
                  logprobs=2, logit_bias=STEER, extra_body={"structured_outputs": {"json": SCHEMA}})
    whole = client.completions.create(**kwargs)
    texts = {c.index: c.text for c in whole.choices}
    streamed = {i: "" for i in range(3)}
    finish = {}
    for chunk in client.completions.create(stream=True, **kwargs):
        for c in chunk.choices:
            streamed[c.index] += c.text
            if c.logprobs is not None:
                for top in c.logprobs.top_logprobs or []:
                    assert len(top) <= 3  # the top 2, and the sampled token when not among them
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    assert streamed == texts  # seeded: the stream is the same generation
    assert finish == {0: "stop", 1: "stop", 2: "stop"}
    for c in whole.choices:
        assert c.finish_reason == "stop"
        jsonschema.validate(json.loads(c.text), SCHEMA)
        assert all(lp <= 0 for lp in c.logprobs.token_logprobs)
    assert len(set(texts.values())) > 1  # n choices drew differently


def test_stop_string_cuts_a_constrained_output(client):
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=MAX_TOKENS, seed=5,
                                  stop=[":"], logit_bias=STEER,
                                  extra_body={"structured_outputs": {"json": SCHEMA}})
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == '{"id"' or r.choices[0].text.rstrip().endswith('"id"'), r.choices[0].text


def error_of(url, path, body):
    r = post(url, path, body)
    assert r.status_code == 400, r.text
    return r.json()["error"]


@pytest.mark.parametrize("body,needle", [
    ({"structured_outputs": {"json": {"type": "array", "uniqueItems": True}}}, "uniqueItems"),
    ({"structured_outputs": {"json": {"type": "object", "properties": {"a": {"not": {}}}}}},
     "'not' at /properties/a"),
    ({"guided_json": "{not json"}, "guided_json"),
    ({"structured_outputs": {"regex": "(unclosed"}}, "regex"),
    ({"guided_grammar": "root ::= missing_rule"}, "grammar"),
    ({"guided_choice": []}, "guided_choice"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "schema"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"response_format": {"type": "json_object"}, "guided_regex": "a+"},
     "only one structured output constraint"),
    ({"structured_outputs": {"json": {"type": "object"}, "regex": "a"}}, "only one"),
    ({"structured_outputs": {"json": {"type": "object"}, "whitespace_pattern": " *"}},
     "whitespace_pattern"),
])
def test_bad_constraints_are_400s(url, body, needle):
    for path, base in (("/v1/completions", {"prompt": PROMPT}),
                       ("/v1/chat/completions", {"messages": MESSAGES})):
        err = error_of(url, path, {"model": MODEL_NAME, "max_tokens": 5, **base, **body})
        assert needle in err["message"], err


def test_text_response_format_is_unconstrained(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=5,
                                       response_format={"type": "text"}, seed=1)
    assert r.choices[0].finish_reason in ("stop", "length")
