"""Prefix caching end to end (issue #22) through a real `vpod serve` on the
CPU backend with the tiny model: a prompt sent again finds its leading blocks
in the KV cache (usage.prompt_tokens_details.cached_tokens > 0, the prefix
cache counters on /metrics move) and is answered with the same greedy text;
another cache_salt finds nothing; a server started with
--no-enable-prefix-caching never reports a hit and serves the same text."""

import json
import uuid

import httpx
import pytest

from conftest import MAX_MODEL_LEN, MODEL_NAME, metrics

WORDS = ("river stone cloud lantern copper meadow violet harbor quiet ember "
         "falcon orchard silver thunder maple canyon").split()


def long_prompt(url, target_tokens):
    """A prompt of about `target_tokens` tokens that no earlier request of this
    server shares (it starts with a fresh word), measured with /tokenize."""
    head = f"Session {uuid.uuid4().hex[:12]}:"
    words = []
    i = 0
    while True:
        words.append(WORDS[(i * 7 + i // 16) % len(WORDS)])
        i += 1
        if i % 32 == 0:
            text = head + " " + " ".join(words)
            n = count_tokens(url, text)
            if n >= target_tokens:
                return text, n


def count_tokens(url, text):
    r = httpx.post(url + "/tokenize", json={"model": MODEL_NAME, "prompt": text}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["count"]


def complete(url, prompt, **extra):
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 8, "temperature": 0, **extra}
    r = httpx.post(url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def cached(response):
    return response["usage"]["prompt_tokens_details"]["cached_tokens"]


# Long enough to fill several of the store's blocks, short enough to leave
# room for the output.
PROMPT_TOKENS = MAX_MODEL_LEN - 64


def test_a_repeated_prompt_hits_the_cache_and_answers_the_same(url):
    prompt, n = long_prompt(url, PROMPT_TOKENS)
    before = metrics(url)
    first = complete(url, prompt)
    assert first["usage"]["prompt_tokens"] == n
    assert cached(first) == 0
    second = complete(url, prompt)
    assert second["usage"]["prompt_tokens"] == n
    assert 0 < cached(second) < n
    assert second["choices"][0]["text"] == first["choices"][0]["text"]
    after = metrics(url)
    queries = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
    hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    assert queries >= 2 * n
    assert hits >= cached(second)


def test_another_cache_salt_finds_nothing(url):
    prompt, n = long_prompt(url, PROMPT_TOKENS)
    plain = complete(url, prompt)
    assert cached(plain) == 0
    salted = complete(url, prompt, cache_salt="tenant-a")
    assert cached(salted) == 0  # the same prompt, but another tenant's cache
    assert salted["choices"][0]["text"] == plain["choices"][0]["text"]
    again = complete(url, prompt, cache_salt="tenant-a")
    assert 0 < cached(again) < n
    other = complete(url, prompt, cache_salt="tenant-b")
    assert cached(other) == 0


def test_chat_streamed_usage_reports_cached_tokens(url):
    text, _ = long_prompt(url, PROMPT_TOKENS - 32)
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": text}],
            "max_tokens": 6, "temperature": 0, "cache_salt": "chat-tenant"}
    first = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
    assert first.status_code == 200, first.text
    assert first.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    usage = None
    content = ""
    with httpx.stream("POST", url + "/v1/chat/completions", timeout=120,
                      json={**body, "stream": True,
                            "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk["choices"]:
                content += choice["delta"].get("content") or ""
    assert usage is not None
    assert 0 < usage["prompt_tokens_details"]["cached_tokens"] < usage["prompt_tokens"]
    assert content == first.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("bad", ["", 5, ["a"]])
def test_a_bad_cache_salt_is_a_400_naming_it(url, bad):
    r = httpx.post(url + "/v1/completions",
                   json={"model": MODEL_NAME, "prompt": "hi", "cache_salt": bad}, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "cache_salt"


def test_no_enable_prefix_caching_never_hits_and_serves_the_same_text(new_server, url):
    off = new_server("--no-enable-prefix-caching")
    prompt, n = long_prompt(off.url, PROMPT_TOKENS)
    first = complete(off.url, prompt)
    second = complete(off.url, prompt)
    assert cached(first) == 0 and cached(second) == 0
    assert second["choices"][0]["text"] == first["choices"][0]["text"]
    m = metrics(off.url)
    assert m["vllm:prefix_cache_queries_total"] == 0
    assert m["vllm:prefix_cache_hits_total"] == 0
    # The caching server answers the same prompt with the same text, hit or not.
    on_first = complete(url, prompt)
    on_second = complete(url, prompt)
    assert cached(on_second) > 0
    assert on_first["choices"][0]["text"] == first["choices"][0]["text"]
    assert on_second["choices"][0]["text"] == first["choices"][0]["text"]
