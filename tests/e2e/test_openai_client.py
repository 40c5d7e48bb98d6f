"""The official openai client against `vpod serve`: completions and chat,
streamed and not, n=2, seeds, stop strings, logprobs, exact usage."""

import httpx
import openai
import pytest

from conftest import MAX_MODEL_LEN, MODEL_NAME


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", timeout=120, max_retries=0)


def complete(client, **kwargs):
    kwargs.setdefault("model", MODEL_NAME)
    kwargs.setdefault("prompt", "The capital of France is")
    return client.completions.create(**kwargs)


def test_models(client):
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL_NAME]
    card = models[0].model_dump()
    assert card["object"] == "model"
    assert card["owned_by"] == "vpod"
    assert card["max_model_len"] == MAX_MODEL_LEN
    assert isinstance(card["root"], str) and card["root"]  # the model folder
    assert isinstance(card["created"], int)


def test_completion_usage_is_exact(client, url):
    r = complete(client, max_tokens=12, temperature=0,
                 extra_body={"ignore_eos": True, "return_token_ids": True})
    assert r.object == "text_completion"
    assert r.model == MODEL_NAME
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    token_ids = choice.model_extra["token_ids"]
    prompt_ids = choice.model_extra["prompt_token_ids"]
    assert len(token_ids) == 12
    assert r.usage.completion_tokens == 12
    assert r.usage.prompt_tokens == len(prompt_ids)
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12
    # The prompt is what /tokenize makes of it (BOS included).
    tok = httpx.post(url + "/tokenize", json={"prompt": "The capital of France is"},
                     timeout=30).json()
    assert tok["tokens"] == prompt_ids


def test_completion_stream_equals_whole(client):
    whole = complete(client, max_tokens=16, temperature=0, extra_body={"ignore_eos": True})
    chunks = list(complete(client, max_tokens=16, temperature=0, stream=True,
                           stream_options={"include_usage": True},
                           extra_body={"ignore_eos": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 16
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_chat_whole_and_streamed(client):
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Say something."}]
    whole = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=10,
                                           temperature=0, extra_body={"ignore_eos": True})
    assert whole.object == "chat.completion"
    assert whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 10
    stream = list(client.chat.completions.create(
        model=MODEL_NAME, messages=messages, max_tokens=10, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    content_chunks = [c for c in stream if c.choices and c.choices[0].delta.content]
    # The role comes with the first token, then only content.
    assert content_chunks[0].choices[0].delta.role == "assistant"
    assert all(c.choices[0].delta.role is None for c in content_chunks[1:])
    assert "".join(c.choices[0].delta.content for c in content_chunks) == \
        whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in stream if c.choices][-1] == "length"
    assert stream[-1].choices == [] and stream[-1].usage.completion_tokens == 10
    assert stream[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_chat_content_parts(client):
    r = client.chat.completions.create(
        model=MODEL_NAME, max_tokens=3,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                {"type": "text", "text": "there"}]}])
    assert r.choices[0].finish_reason in ("length", "stop")


def test_seeds_and_n(client):
    kw = dict(max_tokens=12, temperature=1.0, extra_body={"ignore_eos": True})
    a = complete(client, seed=1234, **kw).choices[0].text
    b = complete(client, seed=1234, **kw).choices[0].text
    c = complete(client, seed=4321, **kw).choices[0].text
    assert a == b
    assert a != c
    two = complete(client, seed=1234, n=2, **kw)
    assert [ch.index for ch in two.choices] == [0, 1]
    assert two.choices[0].text == a  # choice 0 keeps the seed
    assert two.choices[1].text != a
    assert two.usage.completion_tokens == 24
    streamed = list(complete(client, seed=1234, n=2, stream=True, **kw))
    by_index = {0: "", 1: ""}
    for chunk in streamed:
        for ch in chunk.choices:
            by_index[ch.index] += ch.text
    assert by_index == {0: two.choices[0].text, 1: two.choices[1].text}


def test_stop_strings(client):
    base = complete(client, max_tokens=40, temperature=0, extra_body={"ignore_eos": True})
    text = base.choices[0].text
    assert len(text) > 12, text
    stop = text[8:11]
    expected = text[:text.find(stop)]
    r = complete(client, max_tokens=40, temperature=0, stop=[stop],
                 extra_body={"ignore_eos": True})
    assert r.choices[0].text == expected
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].model_extra["stop_reason"] == stop
    kept = complete(client, max_tokens=40, temperature=0, stop=stop,
                    extra_body={"ignore_eos": True, "include_stop_str_in_output": True})
    assert kept.choices[0].text == expected + stop
    streamed = "".join(c.choices[0].text for c in complete(
        client, max_tokens=40, temperature=0, stop=[stop], stream=True,
        extra_body={"ignore_eos": True}) if c.choices)
    assert streamed == expected


def test_completion_logprobs(client):
    r = complete(client, max_tokens=6, temperature=0, logprobs=3,
                 extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    assert len(lp.text_offset) == 6
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert logprob <= 0
        assert 1 <= len(top) <= 4  # top 3, plus the sampled token when not among them
        # Greedy: the sampled token is the most likely one.
        assert logprob >= max(top.values()) - 1e-4
    assert "".join(lp.tokens) == r.choices[0].text


def test_chat_logprobs(client):
    r = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Hello"}], max_tokens=5,
        temperature=0, logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 5
    for entry in content:
        assert entry.logprob <= 0
        assert isinstance(entry.bytes, list) and all(0 <= b < 256 for b in entry.bytes)
        assert len(entry.top_logprobs) == 2
        assert entry.logprob >= entry.top_logprobs[0].logprob - 1e-4
    streamed = list(client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Hello"}], max_tokens=5,
        temperature=0, logprobs=True, top_logprobs=2, stream=True,
        extra_body={"ignore_eos": True}))
    tokens = [e.token for c in streamed if c.choices and c.choices[0].logprobs
              for e in c.choices[0].logprobs.content]
    assert tokens == [e.token for e in content]


def test_chat_default_max_tokens_fills_context(client):
    r = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "x"}], temperature=0,
        extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.total_tokens == MAX_MODEL_LEN


def test_batched_prompts(client):
    r = complete(client, prompt=["One", "Two", "Three"], max_tokens=4, temperature=0,
                 extra_body={"ignore_eos": True})
    assert [c.index for c in r.choices] == [0, 1, 2]
    alone = complete(client, prompt="Two", max_tokens=4, temperature=0,
                     extra_body={"ignore_eos": True})
    assert r.choices[1].text == alone.choices[0].text
    ids = complete(client, prompt=[[128000, 791, 6864], [128000, 9906]], max_tokens=2,
                   temperature=0)
    assert len(ids.choices) == 2 and ids.usage.prompt_tokens == 5


def test_tokenize_detokenize(url):
    t = httpx.post(url + "/tokenize", json={"prompt": "Hello world"}, timeout=30).json()
    assert t["count"] == len(t["tokens"]) and t["max_model_len"] == MAX_MODEL_LEN
    d = httpx.post(url + "/detokenize", json={"tokens": t["tokens"]}, timeout=30).json()
    assert d["prompt"].endswith("Hello world")
    messages = [{"role": "user", "content": "Hello"}]
    chat = httpx.post(url + "/tokenize", json={"messages": messages}, timeout=30).json()
    # The template adds BOS itself: it is there once, not twice.
    assert chat["tokens"][0] == 128000 and 128000 not in chat["tokens"][1:]
    # /tokenize renders exactly what a chat completion prefills.
    r = httpx.post(url + "/v1/chat/completions", timeout=60,
                   json={"messages": messages, "max_tokens": 1}).json()
    assert r["usage"]["prompt_tokens"] == chat["count"]
