"""Tool calling and reasoning through openai-python against `vpod serve` (CPU,
the tiny random model): the 400s for bad tools and tool_choice; tools and
earlier calls rendered through the chat template (also with tool_choice
"none"); "auto" without --enable-auto-tool-choice refused as vLLM does; auto
parsing that leaves plain text alone; round trips with earlier tool_calls and
tool results. A random model writes no calls by itself, so the tests that
need calls force them with the grammar (required, named, or a response format
that makes the text a call) - see test_tools_grammar.py."""


import httpx
import openai
import pytest

from conftest import MODEL_NAME
from test_tools_grammar import start_llama31_tools


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string"},
                                  "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a time zone",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}},
                   "required": ["tz"]}}}
TOOLS = [WEATHER, CLOCK]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# A conversation that replays a call and its result.
ROUND_TRIP = ASK + [
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
]


@pytest.fixture(scope="module")
def tool_server(model_dir, tmp_path_factory):
    """Llama-3.1-style template with tools, llama3_json parser, auto enabled."""
    s = start_llama31_tools(model_dir, tmp_path_factory)
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def client(tool_server):
    return openai.OpenAI(base_url=tool_server.url + "/v1", api_key="unused", timeout=120,
                         max_retries=0)


def post(url, body):
    return httpx.post(url + "/v1/chat/completions", json={"model": MODEL_NAME, **body},
                      timeout=120)


def rendered(url, messages, tools=None):
    """The prompt text the template made (via /tokenize and /detokenize)."""
    body = {"model": MODEL_NAME, "messages": messages}
    if tools is not None:
        body["tools"] = tools
    r = httpx.post(url + "/tokenize", json=body, timeout=60)
    assert r.status_code == 200, r.text
    tokens = r.json()["tokens"]
    d = httpx.post(url + "/detokenize", json={"model": MODEL_NAME, "tokens": tokens}, timeout=60)
    assert d.status_code == 200, d.text
    return d.json()["prompt"], len(tokens)


BAD = [
    ({"tools": "get_weather"}, "tools"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "file_search", "function": {"name": "f"}}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
     "tools[0].function.parameters"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function"}}, "tool_choice.function.name"),
    ({"tools": TOOLS, "parallel_tool_calls": "no"}, "parallel_tool_calls"),
    ({"functions": [{"name": "f"}]}, "functions"),
]


@pytest.mark.parametrize("extra,param", BAD)
def test_bad_tools_are_400s_naming_the_field(tool_server, extra, param):
    r = post(tool_server.url, {"messages": ASK, **extra})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param, error
    assert error["type"] == "invalid_request_error"


def test_auto_needs_the_server_flags(url):
    # Tools alone mean tool_choice "auto": vLLM answers 400 without the flags.
    r = post(url, {"messages": ASK, "tools": TOOLS, "max_tokens": 2})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "tools"
    assert "--enable-auto-tool-choice" in error["message"]
    r = post(url, {"messages": ASK, "tools": TOOLS, "tool_choice": "auto", "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
    # "none" needs no parser.
    r = post(url, {"messages": ASK, "tools": TOOLS, "tool_choice": "none", "max_tokens": 2})
    assert r.status_code == 200, r.text


def test_serve_refuses_bad_parser_flags(new_server):
    for args, what in [(["--enable-auto-tool-choice"], "--tool-call-parser"),
                       (["--tool-call-parser", "nonsense"], "hermes"),
                       (["--reasoning-parser", "nonsense"], "qwen3")]:
        with pytest.raises(RuntimeError) as e:
            new_server(*args)
        assert what in str(e.value)


def test_tools_are_rendered(tool_server):
    text, n_with = rendered(tool_server.url, ASK, TOOLS)
    assert "Environment: ipython" in text
    assert '"name": "get_weather"' in text and '"name": "get_time"' in text
    plain, n_without = rendered(tool_server.url, ASK)
    assert "get_weather" not in plain and n_without < n_with
    # The prompt a chat request renders is the same, also under tool_choice "none".
    for choice in ["none", "auto"]:
        r = post(tool_server.url, {"messages": ASK, "tools": TOOLS, "tool_choice": choice,
                                   "max_tokens": 1})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens"] == n_with


def test_round_trip_is_rendered(tool_server):
    text, _ = rendered(tool_server.url, ROUND_TRIP, TOOLS)
    assert '{"name": "get_weather", "parameters": {"city": "Paris"}}' in text
    # (this template tojson's the result: a string is iterable in Jinja)
    assert '<|start_header_id|>ipython<|end_header_id|>\n\n"18 C, sunny"' in text


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["none", "auto"])
def test_plain_text_stays_content(client, stream, choice):
    """The random model writes no call: auto parsing gives the text unchanged,
    exactly as tool_choice none (which parses nothing) does."""
    def run(tool_choice):
        kwargs = dict(model=MODEL_NAME, messages=ROUND_TRIP, tools=TOOLS, tool_choice=tool_choice,
                      max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
        if not stream:
            r = client.chat.completions.create(**kwargs)
            m = r.choices[0].message
            return m.content, m.tool_calls, r.choices[0].finish_reason
        content, calls, finish = "", None, None
        for chunk in client.chat.completions.create(stream=True, **kwargs):
            for c in chunk.choices:
                content += c.delta.content or ""
                calls = calls or c.delta.tool_calls
                finish = c.finish_reason or finish
        return content, calls, finish

    content, calls, finish = run(choice)
    reference, _, _ = run("none")
    assert calls is None
    assert finish == "length"
    if not content.lstrip().startswith(("{", "<|python_tag|>")):
        assert content == reference
