"""logit_bias through the official openai client against `vpod serve` (CPU):
+100 forces a token and -100 bans the greedy choices, on completions and chat,
streamed and not, with n > 1 and logprobs; bad maps are 400s naming the field."""

import openai
import pytest

from conftest import MODEL_NAME

PROMPT = "The capital of France is"
MESSAGES = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", timeout=120, max_retries=0)


def complete(client, **kwargs):
    kwargs.setdefault("model", MODEL_NAME)
    kwargs.setdefault("prompt", PROMPT)
    extra = {"ignore_eos": True, "return_token_ids": True}
    extra.update(kwargs.pop("extra_body", {}))
    return client.completions.create(extra_body=extra, **kwargs)


def chat(client, **kwargs):
    extra = {"ignore_eos": True, "return_token_ids": True}
    extra.update(kwargs.pop("extra_body", {}))
    return client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, extra_body=extra,
                                          **kwargs)


@pytest.fixture(scope="module")
def greedy_ids(client):
    return complete(client, max_tokens=8, temperature=0).choices[0].model_extra["token_ids"]


@pytest.fixture(scope="module")
def forced(greedy_ids):
    # A token the plain greedy run never picks.
    token = 300
    while token in greedy_ids:
        token += 1
    return token


def test_completion_forced_and_banned(client, greedy_ids, forced):
    bias = {str(forced): 100}
    r = complete(client, max_tokens=8, temperature=0, logit_bias=bias, logprobs=1)
    choice = r.choices[0]
    assert choice.model_extra["token_ids"] == [forced] * 8
    # Logprobs are those of the biased distribution: the forced token is ~certain.
    assert all(lp > -1e-3 for lp in choice.logprobs.token_logprobs)

    # Random sampling with n = 2 is forced too.
    two = complete(client, max_tokens=8, temperature=1.0, seed=7, n=2, logit_bias=bias)
    assert [c.model_extra["token_ids"] for c in two.choices] == [[forced] * 8] * 2

    # Streamed: the same text.
    streamed = "".join(c.choices[0].text for c in complete(
        client, max_tokens=8, temperature=0, logit_bias=bias, stream=True) if c.choices)
    assert streamed == choice.text

    ban = {str(t): -100 for t in set(greedy_ids)}
    banned = complete(client, max_tokens=8, temperature=0, logit_bias=ban)
    assert not set(banned.choices[0].model_extra["token_ids"]) & set(greedy_ids)
    # An empty map changes nothing.
    same = complete(client, max_tokens=8, temperature=0, logit_bias={})
    assert same.choices[0].model_extra["token_ids"] == greedy_ids


def test_chat_forced(client, forced):
    bias = {str(forced): 100}
    whole = chat(client, max_tokens=6, temperature=0, logit_bias=bias)
    assert whole.choices[0].model_extra["token_ids"] == [forced] * 6
    plain = complete(client, max_tokens=6, temperature=0, logit_bias=bias)
    assert whole.choices[0].message.content == plain.choices[0].text
    stream = list(chat(client, max_tokens=6, temperature=0, logit_bias=bias, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == whole.choices[0].message.content


@pytest.mark.parametrize("bias, needle", [
    ({"1000000": 5}, "1000000"),
    ({"abc": 5}, "abc"),
    ({"5": 101}, "[-100, 100]"),
    ({str(i): 1 for i in range(301)}, "at most 300"),
])
def test_bad_maps_are_400s(client, bias, needle):
    for call in (lambda: complete(client, max_tokens=2, logit_bias=bias),
                 lambda: chat(client, max_tokens=2, logit_bias=bias)):
        with pytest.raises(openai.BadRequestError) as e:
            call()
        assert needle in str(e.value)
        err = e.value.body
        err = err.get("error", err)  # openai-python unwraps {"error": {...}}
        assert err["param"] == "logit_bias"
