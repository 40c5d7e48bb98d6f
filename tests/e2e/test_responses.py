"""POST /v1/responses (OpenAI's Responses API) against `vpod serve`, through
the official openai client and LiteLLM's `litellm.responses` (in LiteLLM's own
virtual env, conftest.litellm_call): whole and streamed responses,
instructions, previous_response_id chaining, GET/DELETE of stored responses,
function tools (named, required and auto calls, streamed and not, round trips
through previous_response_id and through explicit input items), structured
output through text.format (responses.parse with a Pydantic model,
json_object streamed), and the 400s and 404s.

The tool tests steer the tiny random model as test_tools_grammar.py does:
the grammar of a required or named tool_choice decides what may be written,
logit_bias (+100 on the tokens the calls need) what is."""

import json

import httpx
import openai
import pytest

from conftest import MAX_MODEL_LEN, MODEL_NAME, litellm_call
from test_structured_output import STEER, Weather
from test_tools_grammar import check_arguments, start_llama31_tools, steer_bias


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", timeout=120, max_retries=0)


def create(client, **kwargs):
    kwargs.setdefault("model", MODEL_NAME)
    kwargs.setdefault("input", "The capital of France is")
    kwargs.setdefault("temperature", 0)
    return client.responses.create(**kwargs)


def chat_prompt_tokens(url, messages):
    """What the chat template + tokenizer make of `messages` (via /tokenize)."""
    r = httpx.post(url + "/tokenize", json={"model": MODEL_NAME, "messages": messages},
                   timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["count"]


def test_create_matches_chat_completions(client, url):
    r = create(client, max_output_tokens=8, extra_body={"ignore_eos": True})
    assert r.id.startswith("resp_")
    assert r.object == "response"
    assert r.model == MODEL_NAME
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.max_output_tokens == 8
    assert r.temperature == 0
    assert r.store is True
    assert len(r.output) == 1
    item = r.output[0]
    assert item.type == "message" and item.role == "assistant" and item.id.startswith("msg_")
    assert [c.type for c in item.content] == ["output_text"]
    assert r.usage.output_tokens == 8
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    assert r.usage.total_tokens == r.usage.input_tokens + 8
    # The same conversation through /v1/chat/completions: the same prompt, the same text.
    messages = [{"role": "user", "content": "The capital of France is"}]
    assert r.usage.input_tokens == chat_prompt_tokens(url, messages)
    chat = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=8,
                                          temperature=0, extra_body={"ignore_eos": True})
    assert r.output_text == chat.choices[0].message.content
    assert r.output_text  # openai-python's convenience, from output[0].content


def test_instructions_are_a_system_message_first(client, url):
    r = create(client, instructions="Answer in one word.", max_output_tokens=4,
               metadata={"k": "v"}, user="tester")
    assert r.instructions == "Answer in one word."
    assert r.metadata == {"k": "v"}
    assert r.user == "tester"
    messages = [{"role": "system", "content": "Answer in one word."},
                {"role": "user", "content": "The capital of France is"}]
    assert r.usage.input_tokens == chat_prompt_tokens(url, messages)


def test_message_items_input(client, url):
    items = [{"role": "developer", "content": "Be brief."},
             {"role": "user", "content": [{"type": "input_text", "text": "Hi there"}]}]
    r = create(client, input=items, max_output_tokens=4)
    assert r.usage.input_tokens == chat_prompt_tokens(
        url, [{"role": "developer", "content": "Be brief."},
              {"role": "user", "content": "Hi there"}])


def test_stream_events(client):
    whole = create(client, max_output_tokens=10, extra_body={"ignore_eos": True})
    events = list(create(client, max_output_tokens=10, stream=True,
                         extra_body={"ignore_eos": True}))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.incomplete"]
    assert set(types[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text
    assert events[-4].text == text
    final = events[-1].response
    assert final.id == events[0].response.id
    assert final.status == "incomplete"
    assert final.output_text == text
    assert final.usage.output_tokens == 10


def test_stream_helper_final_response(client):
    # A stop string taken from a greedy answer makes the streamed one end
    # "completed" (stop), which responses.stream() needs for its final response.
    probe = create(client, max_output_tokens=8, extra_body={"ignore_eos": True})
    assert probe.output_text
    stop = probe.output_text[-1]
    with client.responses.stream(model=MODEL_NAME, input="The capital of France is",
                                 temperature=0, max_output_tokens=8,
                                 extra_body={"ignore_eos": True, "stop": [stop]}) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed"
    assert final.output_text == "".join(deltas)
    assert probe.output_text.startswith(final.output_text)
    assert stop not in final.output_text


def test_previous_response_id_continues_the_conversation(client, url):
    first = create(client, input="Tell me a story.", instructions="Be kind.",
                   max_output_tokens=6, extra_body={"ignore_eos": True})
    second = create(client, input="Go on.", previous_response_id=first.id, max_output_tokens=6,
                    extra_body={"ignore_eos": True})
    assert second.previous_response_id == first.id
    # Instructions are not carried over (as OpenAI does); the turns are.
    messages = [{"role": "user", "content": "Tell me a story."},
                {"role": "assistant", "content": first.output_text},
                {"role": "user", "content": "Go on."}]
    assert second.usage.input_tokens == chat_prompt_tokens(url, messages)
    assert second.usage.input_tokens > first.usage.input_tokens
    # A third turn holds both earlier ones.
    third = create(client, input="The end.", previous_response_id=second.id,
                   max_output_tokens=2)
    assert third.usage.input_tokens == chat_prompt_tokens(
        url, messages + [{"role": "assistant", "content": second.output_text},
                         {"role": "user", "content": "The end."}])


def test_store_false_is_not_kept(client):
    r = create(client, max_output_tokens=2, store=False)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        create(client, input="again", previous_response_id=r.id, max_output_tokens=2)


def test_retrieve_and_delete(client):
    r = create(client, max_output_tokens=3)
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text
    assert got.usage.output_tokens == r.usage.output_tokens
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


def test_unknown_previous_response_id_is_404(client, url):
    with pytest.raises(openai.NotFoundError) as e:
        create(client, previous_response_id="resp_does_not_exist", max_output_tokens=2)
    assert "resp_does_not_exist" in str(e.value)
    r = httpx.post(url + "/v1/responses",
                   json={"input": "x", "previous_response_id": "resp_nope"}, timeout=30)
    assert r.status_code == 404
    assert r.json() == {"error": {
        "message": "Previous response with id 'resp_nope' not found.",
        "type": "invalid_request_error", "param": "previous_response_id",
        "code": "previous_response_not_found"}}


@pytest.mark.parametrize("field,value", [
    ("tools", [{"type": "web_search"}]),
    ("tool_choice", {"type": "file_search"}),
    ("max_tool_calls", 2),
    ("text", {"verbosity": "low"}),
    ("reasoning", {"effort": "low"}),
    ("include", ["message.output_text.logprobs"]),
    ("truncation", "auto"),
    ("background", True),
])
def test_unsupported_fields_are_400(client, field, value):
    with pytest.raises(openai.BadRequestError) as e:
        create(client, max_output_tokens=2, extra_body={field: value})
    param = "text.verbosity" if field == "text" else field
    assert e.value.body["param"] == param
    assert param in e.value.body["message"]


def test_text_format_pydantic_parse(client):
    """openai-python's responses.parse: text.format json_schema (strict), the
    output parsed into the model; the random model steered as in
    test_structured_output.py (same prompt, seed and schema as its chat test)."""
    r = client.responses.parse(model=MODEL_NAME, input="Reply in JSON.", text_format=Weather,
                               max_output_tokens=300, extra_body={"seed": 3, "logit_bias": STEER})
    assert r.status == "completed", r.output_text
    assert isinstance(r.output_parsed, Weather)
    assert Weather.model_validate_json(r.output_text) == r.output_parsed
    assert r.text.format.type == "json_schema"
    assert r.text.format.name == "Weather"
    # The same request through chat gives the same text.
    chat = client.chat.completions.parse(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Reply in JSON."}],
        response_format=Weather, max_tokens=300, seed=3, logit_bias=STEER)
    assert chat.choices[0].message.content == r.output_text


def test_text_format_json_object_streamed(client):
    with client.responses.stream(model=MODEL_NAME, input="Reply in JSON.",
                                 text={"format": {"type": "json_object"}}, max_output_tokens=300,
                                 extra_body={"seed": 4, "logit_bias": STEER}) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed"
    assert "".join(deltas) == final.output_text
    assert isinstance(json.loads(final.output_text), dict)
    assert final.text.format.type == "json_object"


def test_text_format_errors_are_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        create(client, max_output_tokens=2,
               text={"format": {"type": "json_schema", "name": "x",
                                "schema": {"type": "array", "contains": {}}}})
    assert "contains" in e.value.body["message"]


def test_bad_input_is_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        create(client, input=[{"role": "user", "content": [{"type": "input_image",
                                                             "image_url": "http://x"}]}])
    assert e.value.body["param"] == "input"
    with pytest.raises(openai.BadRequestError) as e:
        create(client, max_output_tokens=0)
    assert e.value.body["param"] == "max_output_tokens"
    # The conversation and max_output_tokens must fit in --max-model-len.
    with pytest.raises(openai.BadRequestError) as e:
        create(client, max_output_tokens=MAX_MODEL_LEN - 1)
    assert e.value.body["param"] == "max_output_tokens"
    assert "maximum context length" in e.value.body["message"]


def test_litellm_responses(url):
    # LiteLLM raises max_output_tokens to OpenAI's minimum, 16.
    r = litellm_call("responses", model="openai/" + MODEL_NAME,
                     input="The capital of France is", api_base=url + "/v1", api_key="unused",
                     max_output_tokens=16, temperature=0)
    assert r["status"] in ("completed", "incomplete")
    assert r["max_output_tokens"] == 16
    assert 0 < r["usage"]["output_tokens"] <= 16
    text = "".join(c["text"] for item in r["output"] if item["type"] == "message"
                   for c in item["content"])
    assert text


def test_store_bound_evicts_oldest(new_server):
    s = new_server("--responses-store-max", "2")
    c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", timeout=120, max_retries=0)
    ids = [create(c, input=f"turn {i}", max_output_tokens=2).id for i in range(3)]
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(ids[0])  # the oldest went when the third came
    for kept in ids[1:]:
        assert create(c, input="more", previous_response_id=kept, max_output_tokens=2,
                      store=False).previous_response_id == kept
    assert s.stop() == 0


# --- Function tools -------------------------------------------------------

# The Responses API's flat function tools (chat's nest them under "function").
# Enum-valued arguments keep the constrained JSON short.
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city",
           "parameters": {"type": "object",
                          "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo"]},
                                         "unit": {"type": "string", "enum": ["c", "f"]}},
                          "required": ["city"], "additionalProperties": False}}
CLOCK = {"type": "function", "name": "get_time", "description": "Local time in a time zone",
         "parameters": {"type": "object",
                        "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}},
                        "required": ["tz"], "additionalProperties": False}}
TOOLS = [WEATHER, CLOCK]
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
              for t in TOOLS]
ASK = "What is the weather in Paris?"
MAX_TOOL_TOKENS = 160
LLAMA3_CALL_REGEX = r'\{"name": "get_weather", "parameters": \{"city": "(Paris|Tokyo)"\}\}'


@pytest.fixture(scope="module")
def tool_server(model_dir, tmp_path_factory):
    """Llama 3.1-style tool template (one call per assistant turn), auto
    parsing with llama3_json."""
    s = start_llama31_tools(model_dir, tmp_path_factory)
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def tool_client(tool_server):
    return openai.OpenAI(base_url=tool_server.url + "/v1", api_key="unused", timeout=300,
                         max_retries=0)


@pytest.fixture(scope="module")
def steer(tool_server):
    return steer_bias(tool_server.url)


def tool_create(client, steer=None, **kwargs):
    kwargs.setdefault("model", MODEL_NAME)
    kwargs.setdefault("input", ASK)
    kwargs.setdefault("tools", TOOLS)
    kwargs.setdefault("temperature", 0)
    kwargs.setdefault("max_output_tokens", MAX_TOOL_TOKENS)
    if steer is not None:
        kwargs["extra_body"] = {**kwargs.get("extra_body", {}), "logit_bias": steer}
    return client.responses.create(**kwargs)


def calls_of(response):
    return [item for item in response.output if item.type == "function_call"]


def check_call_item(item):
    assert item.type == "function_call" and item.status == "completed"
    assert item.id.startswith("fc_") and item.call_id.startswith("call_")
    check_arguments(item.name, item.arguments)


def streamed(client, steer=None, **kwargs):
    """(events, final response) of a streamed request, with the function-call
    events checked against each other and the final output."""
    events = list(tool_create(client, steer, stream=True, **kwargs))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    added = {e.output_index: e.item for e in events if e.type == "response.output_item.added"}
    done = {e.output_index: e.item for e in events if e.type == "response.output_item.done"}
    assert sorted(added) == sorted(done) == list(range(len(final.output)))
    for index, item in added.items():
        assert item.type == final.output[index].type and item.id == final.output[index].id
        if item.type != "function_call":
            continue
        assert item.arguments == "" and item.status == "in_progress"
        deltas = [e for e in events if e.type == "response.function_call_arguments.delta"
                  and e.output_index == index]
        assert deltas and all(e.item_id == item.id for e in deltas)
        (args_done,) = [e for e in events if e.type == "response.function_call_arguments.done"
                        and e.output_index == index]
        assert "".join(e.delta for e in deltas) == args_done.arguments
        assert done[index].arguments == args_done.arguments == final.output[index].arguments
        assert done[index].call_id == item.call_id == final.output[index].call_id
    return events, final


def without_ids(response):
    return [{k: v for k, v in item.model_dump().items() if k not in ("id", "call_id")}
            for item in response.output]


@pytest.mark.parametrize("stream", [False, True])
def test_named_tool_choice(tool_client, steer, stream):
    choice = {"type": "function", "name": "get_time"}
    if stream:
        _, r = streamed(tool_client, steer, tool_choice=choice)
    else:
        r = tool_create(tool_client, steer, tool_choice=choice)
    assert r.status == "completed"
    assert [item.type for item in r.output] == ["function_call"]
    assert r.output[0].name == "get_time"
    check_call_item(r.output[0])
    assert r.output_text == ""
    # The request's tools and choice echoed in the Responses shape.
    assert [t.name for t in r.tools] == ["get_weather", "get_time"]
    assert r.tools[0].type == "function" and r.tools[0].parameters == WEATHER["parameters"]
    assert r.tool_choice.type == "function" and r.tool_choice.name == "get_time"
    assert r.parallel_tool_calls is True


def test_required_streams_what_it_answers(tool_client, steer):
    kwargs = dict(tool_choice="required", parallel_tool_calls=False)
    whole = tool_create(tool_client, steer, **kwargs)
    events, final = streamed(tool_client, steer, **kwargs)
    assert whole.tool_choice == "required" and whole.parallel_tool_calls is False
    assert len(calls_of(whole)) == 1
    check_call_item(calls_of(whole)[0])
    assert without_ids(final) == without_ids(whole)
    assert final.usage.output_tokens == whole.usage.output_tokens
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert "response.function_call_arguments.done" in types


def test_stream_helper_accumulates_calls(tool_client, steer):
    with tool_client.responses.stream(model=MODEL_NAME, input=ASK, tools=TOOLS,
                                      tool_choice="required", parallel_tool_calls=False,
                                      temperature=0, max_output_tokens=MAX_TOOL_TOKENS,
                                      extra_body={"logit_bias": steer}) as stream:
        arguments = "".join(e.delta for e in stream
                            if e.type == "response.function_call_arguments.delta")
        final = stream.get_final_response()
    (call,) = calls_of(final)
    check_call_item(call)
    assert call.arguments == arguments


@pytest.mark.parametrize("stream", [False, True])
def test_auto_parses_llama3_json(tool_client, stream):
    """A regex makes the text a Llama 3 JSON call; auto parses it."""
    kwargs = dict(extra_body={"structured_outputs": {"regex": LLAMA3_CALL_REGEX}})
    r = streamed(tool_client, **kwargs)[1] if stream else tool_create(tool_client, **kwargs)
    assert r.tool_choice == "auto"
    assert [item.type for item in r.output] == ["function_call"]
    assert r.output[0].name == "get_weather"
    check_call_item(r.output[0])


def test_auto_without_a_call_is_a_message(tool_client):
    r = tool_create(tool_client, max_output_tokens=6, extra_body={"ignore_eos": True})
    assert r.status == "incomplete"
    assert [item.type for item in r.output] == ["message"]
    assert r.output_text


def chat_messages_after_call(call, output):
    return [{"role": "user", "content": ASK},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": call.call_id, "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}]},
            {"role": "tool", "tool_call_id": call.call_id, "content": output}]


@pytest.mark.parametrize("stream", [False, True])
def test_round_trip(tool_client, tool_server, steer, stream):
    """A call made, run, and its output sent back (through previous_response_id,
    and as explicit input items); the model answers with text, and the prompt
    holds the call and its output as the chat template renders them."""
    first = tool_create(tool_client, steer, tool_choice="required", parallel_tool_calls=False)
    (call,) = calls_of(first)
    output_item = {"type": "function_call_output", "call_id": call.call_id,
                   "output": "18 C, sunny"}
    answer_kwargs = dict(tool_choice="none", max_output_tokens=8,
                         extra_body={"ignore_eos": True})
    if stream:
        _, chained = streamed(tool_client, previous_response_id=first.id, input=[output_item],
                              **answer_kwargs)
    else:
        chained = tool_create(tool_client, previous_response_id=first.id, input=[output_item],
                              **answer_kwargs)
    assert chained.status == "incomplete" and chained.previous_response_id == first.id
    assert [item.type for item in chained.output] == ["message"] and chained.output_text
    # The same conversation as explicit items: the user turn, the response's
    # output items as returned, and the call's output.
    items = [{"role": "user", "content": ASK}]
    items += [item.model_dump(exclude_none=True) for item in first.output]
    items.append(output_item)
    explicit = tool_create(tool_client, input=items, **answer_kwargs)
    assert explicit.usage.input_tokens == chained.usage.input_tokens
    assert explicit.output_text == chained.output_text
    # Both are the chat conversation with the call and the tool message.
    r = httpx.post(tool_server.url + "/tokenize", timeout=30, json={
        "model": MODEL_NAME, "tools": CHAT_TOOLS,
        "messages": chat_messages_after_call(call, "18 C, sunny")})
    assert r.status_code == 200, r.text
    assert chained.usage.input_tokens == r.json()["count"]
    assert chained.usage.input_tokens > first.usage.input_tokens
    # The stored chain goes on: the answer's text follows.
    third = tool_create(tool_client, previous_response_id=chained.id, input="Thanks.",
                        tool_choice="none", max_output_tokens=2)
    r = httpx.post(tool_server.url + "/tokenize", timeout=30, json={
        "model": MODEL_NAME, "tools": CHAT_TOOLS,
        "messages": chat_messages_after_call(call, "18 C, sunny") + [
            {"role": "assistant", "content": chained.output_text},
            {"role": "user", "content": "Thanks."}]})
    assert third.usage.input_tokens == r.json()["count"]


def test_retrieve_keeps_the_call(tool_client, steer):
    r = tool_create(tool_client, steer, tool_choice={"type": "function", "name": "get_weather"})
    got = tool_client.responses.retrieve(r.id)
    assert got.output[0].type == "function_call"
    assert got.output[0].call_id == r.output[0].call_id
    assert got.output[0].arguments == r.output[0].arguments


def test_tool_400s(tool_client, client):
    with pytest.raises(openai.BadRequestError) as e:
        tool_create(tool_client, tools=[WEATHER, {"type": "web_search_preview"}])
    assert e.value.body["param"] == "tools" and "web_search_preview" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        tool_create(tool_client, tools=[{**WEATHER, "parameters": "x"}])
    assert e.value.body["param"] == "tools"
    assert "'tools[0].parameters'" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        tool_create(tool_client, tool_choice={"type": "function", "name": "nope"})
    assert e.value.body["param"] == "tool_choice"
    with pytest.raises(openai.BadRequestError) as e:
        tool_create(tool_client, input=[{"type": "function_call", "call_id": "c",
                                         "name": "get_weather", "arguments": "{oops"}])
    assert e.value.body["param"] == "input" and "input[0].arguments" in e.value.body["message"]
    # auto (tools without tool_choice) needs the server's parser flags.
    with pytest.raises(openai.BadRequestError) as e:
        tool_create(client)
    assert e.value.body["param"] == "tools"
    assert "--enable-auto-tool-choice" in e.value.body["message"]


def test_litellm_responses_with_tools(tool_server, steer):
    r = litellm_call("responses", model="openai/" + MODEL_NAME, input=ASK, tools=TOOLS,
                     tool_choice="required", parallel_tool_calls=False,
                     api_base=tool_server.url + "/v1", api_key="unused",
                     max_output_tokens=MAX_TOOL_TOKENS, temperature=0,
                     extra_body={"logit_bias": steer})
    assert r["status"] == "completed"
    calls = [item for item in r["output"] if item["type"] == "function_call"]
    assert len(calls) == 1 and calls[0]["call_id"].startswith("call_")
    check_arguments(calls[0]["name"], calls[0]["arguments"])
