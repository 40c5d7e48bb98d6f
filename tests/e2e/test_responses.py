"""POST /v1/responses (OpenAI's Responses API) against `vpod serve`, through
the official openai client (and LiteLLM's `litellm.responses` when LiteLLM is
installed): whole and streamed responses, instructions, previous_response_id
chaining, GET/DELETE of stored responses, and the 400s and 404s."""

import httpx
import openai
import pytest

from conftest import MAX_MODEL_LEN, MODEL_NAME


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
    ("tools", [{"type": "function", "name": "f", "parameters": {"type": "object"}}]),
    ("tool_choice", "required"),
    ("text", {"format": {"type": "json_object"}}),
    ("reasoning", {"effort": "low"}),
    ("include", ["message.output_text.logprobs"]),
    ("truncation", "auto"),
    ("background", True),
])
def test_unsupported_fields_are_400(client, field, value):
    with pytest.raises(openai.BadRequestError) as e:
        create(client, max_output_tokens=2, extra_body={field: value})
    param = "text.format" if field == "text" else field
    assert e.value.body["param"] == param
    assert param in e.value.body["message"]


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
    try:
        import litellm
    except ImportError:
        pytest.skip("LiteLLM is not installed in this environment: litellm.responses untested")
    r = litellm.responses(model="openai/" + MODEL_NAME, input="The capital of France is",
                          api_base=url + "/v1", api_key="unused", max_output_tokens=4,
                          temperature=0)
    assert r.status in ("completed", "incomplete")
    assert r.usage.output_tokens <= 4
    text = "".join(c.text for item in r.output if item.type == "message" for c in item.content)
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
