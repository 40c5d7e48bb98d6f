"""Tool calls a random model makes only when the grammar holds it to them
(`vpod serve`, CPU, the tiny model): tool_choice required and named (the
schemas vLLM builds), auto parsing of text that a response format or a regex
makes a call (llama3_json, hermes), Qwen3 reasoning, round trips that send the
calls and their results back in, streamed and not, through openai-python and
LiteLLM (in its own virtual env, conftest.litellm_call).

JSON lets whitespace go between tokens, and the random weights happen to
prefer whitespace tokens, so a constrained JSON answer would be blank to
max_tokens. A real model writes the JSON; here `logit_bias` (+100 on the
tokens of the names, values and punctuation the calls need) steers the
random model to them. The grammar still decides what is allowed: a biased
token wins only where the grammar allows it."""

import json
import re

import httpx
import openai
import pydantic
import pytest

from conftest import MODEL_NAME, REPO, Server, litellm_call

TEMPLATES = REPO / "tests" / "tokenizer" / "data" / "chat" / "templates"

# Enum-valued arguments keep the constrained JSON short whatever the random
# weights prefer.
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo"]},
                                  "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a time zone",
    "parameters": {"type": "object",
                   "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}},
                   "required": ["tz"], "additionalProperties": False}}}
TOOLS = [WEATHER, CLOCK]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
MAX_TOKENS = 160
TOOL_CALL_REGEX = (r'<tool_call>\n\{"name": "get_weather", "arguments": '
                   r'\{"city": "(Paris|Tokyo)"\}\}\n</tool_call>')


# What the calls are written with (each string's tokens get +100).
STEER_STRINGS = ["{", "}", "[", "]", "\"", ":", ",", "name", "parameters", "get", "_weather", "_time",
                 "city", "Paris", "tz", "UTC", "GetWeather"]


def start(model_dir, tmp_path_factory, *args):
    return Server(model_dir, tmp_path_factory.mktemp("tools") / "serve.log", *args)


def start_llama31_tools(model_dir, tmp_path_factory):
    """A server with the Llama 3.1-style tool template (one call per assistant
    turn) and auto parsing with llama3_json (also test_tools.py's and
    test_responses.py's)."""
    return start(model_dir, tmp_path_factory,
                 "--chat-template", str(TEMPLATES / "llama31_style_tools.jinja"),
                 "--enable-auto-tool-choice", "--tool-call-parser", "llama3_json")


def steer_bias(url):
    """logit_bias +100 on every token of STEER_STRINGS, as the server's
    tokenizer splits them."""
    bias = {}
    for text in STEER_STRINGS:
        r = httpx.post(url + "/tokenize",
                       json={"model": MODEL_NAME, "prompt": text, "add_special_tokens": False},
                       timeout=60)
        assert r.status_code == 200, r.text
        for t in r.json()["tokens"]:
            bias[str(t)] = 100
    return bias


@pytest.fixture(scope="module")
def llama_server(model_dir, tmp_path_factory):
    s = start_llama31_tools(model_dir, tmp_path_factory)
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def hermes_server(model_dir, tmp_path_factory):
    s = start(model_dir, tmp_path_factory,
              "--chat-template", str(TEMPLATES / "hermes_style_tools.jinja"),
              "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
              "--reasoning-parser", "qwen3")
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def steer(llama_server):
    return steer_bias(llama_server.url)


def client_for(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=300,
                         max_retries=0)


def call(client, stream, **kwargs):
    """(message-like dict, finish_reason) from a request, streamed or not.
    Streamed deltas are checked against OpenAI's shapes and reassembled."""
    kwargs.setdefault("model", MODEL_NAME)
    kwargs.setdefault("messages", ASK)
    kwargs.setdefault("max_tokens", MAX_TOKENS)
    kwargs.setdefault("temperature", 0)
    if not stream:
        r = client.chat.completions.create(**kwargs)
        m = r.choices[0].message
        calls = [{"id": c.id, "type": c.type, "name": c.function.name,
                  "arguments": c.function.arguments} for c in (m.tool_calls or [])]
        reasoning = (m.model_extra or {}).get("reasoning_content")
        return {"content": m.content, "calls": calls, "reasoning": reasoning}, \
            r.choices[0].finish_reason
    content, reasoning, calls, finish = None, None, [], None
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for c in chunk.choices:
            d = c.delta
            if d.content:
                content = (content or "") + d.content
            extra = (d.model_extra or {}).get("reasoning_content")
            if extra:
                reasoning = (reasoning or "") + extra
            for t in d.tool_calls or []:
                if t.id is not None:
                    # A call's first delta: index, id, type, name, empty arguments.
                    assert t.index == len(calls)
                    assert t.type == "function" and t.function.name
                    assert t.function.arguments == ""
                    calls.append({"id": t.id, "type": t.type, "name": t.function.name,
                                  "arguments": ""})
                else:
                    assert t.function.name is None and t.type is None
                    calls[t.index]["arguments"] += t.function.arguments
            finish = c.finish_reason or finish
    return {"content": content, "calls": calls, "reasoning": reasoning}, finish


def check_arguments(name, arguments):
    args = json.loads(arguments)
    if name == "get_weather":
        assert args["city"] in ("Paris", "Tokyo") and set(args) <= {"city", "unit"}
    else:
        assert name == "get_time" and args["tz"] in ("UTC", "CET") and set(args) == {"tz"}


@pytest.mark.parametrize("stream", [False, True])
def test_named(llama_server, steer, stream):
    client = client_for(llama_server)
    m, finish = call(client, stream, tools=TOOLS, logit_bias=steer,
                     tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert finish == "stop"  # OpenAI: a forced call finishes with "stop"
    assert len(m["calls"]) == 1 and not m["content"]
    c = m["calls"][0]
    assert c["name"] == "get_time" and c["type"] == "function"
    assert c["id"].startswith("chatcmpl-tool-")
    check_arguments("get_time", c["arguments"])


@pytest.mark.parametrize("stream", [False, True])
def test_required_single(llama_server, steer, stream):
    client = client_for(llama_server)
    m, finish = call(client, stream, tools=TOOLS, tool_choice="required", logit_bias=steer,
                     parallel_tool_calls=False)
    assert finish == "tool_calls"
    assert len(m["calls"]) == 1 and not m["content"]
    check_arguments(m["calls"][0]["name"], m["calls"][0]["arguments"])


def test_required_streams_what_it_answers(llama_server, steer):
    """Parallel calls allowed: sampled (seeded), streamed and whole agree."""
    client = client_for(llama_server)
    kwargs = dict(tools=TOOLS, tool_choice="required", seed=3, temperature=1.0, max_tokens=MAX_TOKENS,
                  logit_bias=steer)
    whole, finish = call(client, False, **kwargs)
    streamed, streamed_finish = call(client, True, **kwargs)
    assert finish == streamed_finish
    strip = [{k: v for k, v in c.items() if k != "id"} for c in whole["calls"]]
    assert strip == [{k: v for k, v in c.items() if k != "id"} for c in streamed["calls"]]
    if finish == "tool_calls":
        assert whole["calls"]
        for c in whole["calls"]:
            check_arguments(c["name"], c["arguments"])


@pytest.mark.parametrize("stream", [False, True])
def test_auto_parses_llama3_json(llama_server, steer, stream):
    """The response format makes the text a Llama 3 JSON call; auto parses it."""
    schema = {"type": "object",
              "properties": {"name": {"type": "string", "enum": ["get_weather"]},
                             "parameters": WEATHER["function"]["parameters"]},
              "required": ["name", "parameters"], "additionalProperties": False}
    m, finish = call(client_for(llama_server), stream, tools=TOOLS, logit_bias=steer,
                     response_format={"type": "json_schema",
                                      "json_schema": {"name": "call", "schema": schema}})
    assert finish == "tool_calls"
    assert [c["name"] for c in m["calls"]] == ["get_weather"]
    check_arguments("get_weather", m["calls"][0]["arguments"])
    assert m["content"] is None


@pytest.mark.parametrize("stream", [False, True])
def test_auto_parses_hermes_after_reasoning(hermes_server, stream):
    pattern = r"<think>\n(yes|no)\n</think>\n\n" + TOOL_CALL_REGEX
    m, finish = call(client_for(hermes_server), stream, tools=TOOLS,
                     extra_body={"structured_outputs": {"regex": pattern}})
    assert finish == "tool_calls"
    assert m["reasoning"] in ("\nyes\n", "\nno\n")
    assert m["content"] is None
    assert [c["name"] for c in m["calls"]] == ["get_weather"]
    assert json.loads(m["calls"][0]["arguments"])["city"] in ("Paris", "Tokyo")


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_then_content(hermes_server, stream):
    m, finish = call(client_for(hermes_server), stream,
                     extra_body={"structured_outputs": {
                         "regex": r"<think>\n(hm|ok)\n</think>\n\nIt is (sunny|rainy)\."}})
    assert finish == "stop"
    assert m["reasoning"] in ("\nhm\n", "\nok\n")
    assert re.fullmatch(r"\n\nIt is (sunny|rainy)\.", m["content"])
    assert m["calls"] == []


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_round_trip(hermes_server, steer, stream, choice):
    """A call made, run, and sent back with its result; the model answers."""
    client = client_for(hermes_server)
    if choice == "auto":
        first, finish = call(client, stream, tools=TOOLS,
                             extra_body={"structured_outputs": {"regex": TOOL_CALL_REGEX}})
    elif choice == "required":
        first, finish = call(client, stream, tools=TOOLS, tool_choice="required",
                             parallel_tool_calls=False, logit_bias=steer)
    else:
        first, finish = call(client, stream, tools=TOOLS, logit_bias=steer, tool_choice={
            "type": "function", "function": {"name": "get_weather"}})
    assert finish == ("stop" if choice == "named" else "tool_calls")
    assert first["calls"]
    messages = ASK + [{"role": "assistant", "content": first["content"], "tool_calls": [
        {"id": c["id"], "type": "function",
         "function": {"name": c["name"], "arguments": c["arguments"]}} for c in first["calls"]]}]
    for c in first["calls"]:
        messages.append({"role": "tool", "tool_call_id": c["id"], "content": "18 C, sunny"})
    answer, finish = call(client, stream, messages=messages, tools=TOOLS, tool_choice="none",
                          max_tokens=8, extra_body={"ignore_eos": True})
    assert finish == "length" and answer["content"] and answer["calls"] == []
    # The history went into the prompt: the call and its result.
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, tools=TOOLS,
                                       tool_choice="none", max_tokens=1)
    plain = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=TOOLS,
                                           tool_choice="none", max_tokens=1)
    assert r.usage.prompt_tokens > plain.usage.prompt_tokens


class GetWeather(pydantic.BaseModel):
    city: str = pydantic.Field(json_schema_extra={"enum": ["Paris", "Tokyo"]})


def test_openai_parse_with_pydantic_tool(llama_server, steer):
    client = client_for(llama_server)
    r = client.chat.completions.parse(
        model=MODEL_NAME, messages=ASK, max_tokens=MAX_TOKENS, temperature=0, logit_bias=steer,
        tools=[openai.pydantic_function_tool(GetWeather)],
        tool_choice={"type": "function", "function": {"name": "GetWeather"}})
    call_ = r.choices[0].message.tool_calls[0]
    assert call_.function.name == "GetWeather"
    assert isinstance(call_.function.parsed_arguments, GetWeather)
    assert call_.function.parsed_arguments.city in ("Paris", "Tokyo")


def test_litellm_tool_calling(llama_server, steer):
    r = litellm_call(
        "completion", model="hosted_vllm/" + MODEL_NAME, api_base=llama_server.url + "/v1",
        api_key="unused", messages=ASK, tools=TOOLS, tool_choice="required",
        parallel_tool_calls=False, max_tokens=MAX_TOKENS, temperature=0, logit_bias=steer)
    choice = r["choices"][0]
    calls = choice["message"]["tool_calls"]
    assert choice["finish_reason"] == "tool_calls" and len(calls) == 1
    check_arguments(calls[0]["function"]["name"], calls[0]["function"]["arguments"])
