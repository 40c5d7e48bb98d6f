"""Prompt logprobs through the real server on the CPU backend: completions'
echo + logprobs (OpenAI's legacy scoring, with max_tokens 0 for scoring
only), vLLM's prompt_logprobs on completions and chat, and the rules around
them (no streaming of prompt_logprobs, max_tokens 0 only for scoring, no
prefix-cache hit for a scored prompt). The values are checked against the
sampler's own logprobs: position i's prompt logprob is the logprob the model
gives that token when it generates it greedily after tokens [0, i)."""

import math

import httpx
import pytest

from conftest import MAX_MODEL_LEN, MODEL_NAME

PROMPT = "The quick brown fox jumps over the lazy dog while the cat watches"


def post(url, path, body):
    return httpx.post(url + path, json={"model": MODEL_NAME, **body}, timeout=60)


def completion(url, **body):
    r = post(url, "/v1/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


def prompt_ids(url, text):
    r = httpx.post(url + "/tokenize", json={"model": MODEL_NAME, "prompt": text}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def test_prompt_logprobs_match_greedy_generation(url):
    ids = prompt_ids(url, PROMPT)
    assert len(ids) >= 8
    body = completion(url, prompt=ids, max_tokens=1, temperature=0, prompt_logprobs=2)
    scored = body["choices"][0]["prompt_logprobs"]
    assert len(scored) == len(ids)
    assert scored[0] is None
    for i in range(1, len(ids)):
        entry = scored[i]
        assert str(ids[i]) in entry, (i, entry)
        mine = entry[str(ids[i])]
        assert mine["rank"] >= 1
        assert math.isfinite(mine["logprob"]) and mine["logprob"] <= 0
        ranks = sorted(v["rank"] for k, v in entry.items() if k != str(ids[i]))
        # The top 2 are there with ranks 1 and 2, unless the prompt token is one of them.
        assert ranks == [1, 2] or (mine["rank"] <= 2 and len(entry) == 2)
        for v in entry.values():
            assert isinstance(v["decoded_token"], str)
    # Position i against generation: greedy from ids[:i] with logprobs gives
    # the top token's logprob, which is prompt position i's top-1 entry.
    for i in (1, len(ids) // 2, len(ids) - 1):
        gen = completion(url, prompt=ids[:i], max_tokens=1, temperature=0, logprobs=1)
        lp = gen["choices"][0]["logprobs"]
        top_token_logprob = lp["token_logprobs"][0]
        rank1 = [v for v in scored[i].values() if v["rank"] == 1]
        assert rank1, scored[i]
        assert abs(rank1[0]["logprob"] - top_token_logprob) < 1e-4, (i, rank1, top_token_logprob)


def test_echo_logprobs_score_the_prompt_with_max_tokens_zero(url):
    ids = prompt_ids(url, PROMPT)
    body = completion(url, prompt=PROMPT, max_tokens=0, echo=True, logprobs=1, temperature=0)
    choice = body["choices"][0]
    assert choice["text"] == PROMPT
    assert choice["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 0
    assert body["usage"]["prompt_tokens"] == len(ids)
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(ids) == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert lp["text_offset"][0] == 0
    assert lp["text_offset"] == sorted(lp["text_offset"])
    # Each position's top dict holds the prompt token and the most likely one.
    for tok, value, top in zip(lp["tokens"][1:], lp["token_logprobs"][1:], lp["top_logprobs"][1:]):
        assert top[tok] == value
        assert max(top.values()) >= value
    # The same numbers as vLLM's prompt_logprobs field.
    scored = completion(url, prompt=ids, max_tokens=0, prompt_logprobs=0)["choices"][0]
    assert scored["text"] == ""
    for i in range(1, len(ids)):
        assert abs(scored["prompt_logprobs"][i][str(ids[i])]["logprob"] -
                   lp["token_logprobs"][i]) < 1e-6


def test_echo_logprobs_then_generated_tokens_streamed(url):
    ids = prompt_ids(url, PROMPT)
    whole = completion(url, prompt=PROMPT, max_tokens=4, echo=True, logprobs=2, temperature=0)
    lp = whole["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(ids) + 4
    chunks = []
    with httpx.stream("POST", url + "/v1/completions", timeout=60,
                      json={"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 4, "echo": True,
                            "logprobs": 2, "temperature": 0, "stream": True}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(httpx.Response(200, content=line[6:]).json())
    tokens, values = [], []
    for c in chunks:
        got = c["choices"][0].get("logprobs")
        if got:
            tokens += got["tokens"]
            values += got["token_logprobs"]
    assert tokens == lp["tokens"]
    assert values[0] is None
    for a, b in zip(values[1:], lp["token_logprobs"][1:]):
        assert abs(a - b) < 1e-6
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert text == whole["choices"][0]["text"] and text.startswith(PROMPT)


def test_chat_prompt_logprobs_at_the_top_level(url):
    r = post(url, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Say something."}],
        "max_tokens": 2, "temperature": 0, "prompt_logprobs": 1})
    assert r.status_code == 200, r.text
    body = r.json()
    scored = body["prompt_logprobs"]
    assert scored[0] is None
    assert len(scored) == body["usage"]["prompt_tokens"]
    assert all(1 <= len(p) <= 2 for p in scored[1:])


def test_prompt_logprobs_take_no_prefix_cache_hit(url):
    ids = prompt_ids(url, " ".join([PROMPT] * 40))[:MAX_MODEL_LEN - 64]  # several full blocks
    plain = completion(url, prompt=ids, max_tokens=1, temperature=0)
    again = completion(url, prompt=ids, max_tokens=1, temperature=0)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    first = completion(url, prompt=ids, max_tokens=1, temperature=0, prompt_logprobs=0)
    second = completion(url, prompt=ids, max_tokens=1, temperature=0, prompt_logprobs=0)
    for body in (first, second):
        assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert first["choices"][0]["prompt_logprobs"] == second["choices"][0]["prompt_logprobs"]
    assert first["choices"][0]["text"] == plain["choices"][0]["text"]


@pytest.mark.parametrize("body, field", [
    ({"prompt": "hi", "prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
    ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": 0, "echo": True}, "max_tokens"),
    ({"prompt": "hi", "prompt_logprobs": -1}, "prompt_logprobs"),
    ({"prompt": "hi", "prompt_logprobs": 10000}, "prompt_logprobs"),
    ({"prompt": "hi", "prompt_logprobs": "3"}, "prompt_logprobs"),
])
def test_bad_prompt_logprobs_requests(url, body, field):
    r = post(url, "/v1/completions", body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field, r.text


def test_chat_prompt_logprobs_cannot_stream(url):
    r = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                           "prompt_logprobs": 0, "stream": True})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "prompt_logprobs"
