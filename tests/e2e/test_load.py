"""Load on `vpod serve`: 32 concurrent streams, a client that disconnects
mid-stream (checked through /metrics), the /metrics page itself, and a soak
of 2,000 mixed requests that must all succeed and leave no KV usage behind.
Every loop is bounded in time."""

import concurrent.futures
import json
import random
import socket
import threading
import time

import httpx
import openai

from conftest import MODEL_NAME, metrics, scrape, wait_for

REQUIRED_METRICS = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:gpu_cache_usage_perc": "gauge",
    "vllm:prompt_tokens_total": "counter",
    "vllm:generation_tokens_total": "counter",
    "vllm:num_preemptions_total": "counter",
    "vllm:prefix_cache_queries_total": "counter",
    "vllm:prefix_cache_hits_total": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:time_per_output_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_inference_time_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:request_max_num_generation_tokens": "histogram",
    "vllm:request_params_max_tokens": "histogram",
    "vllm:iteration_tokens_total": "histogram",
}

# Every sample vLLM's Grafana dashboard queries (its 12 panels and its
# model_name variable: examples/online_serving/prometheus_grafana/grafana.json
# in vLLM), each with {model_name="$model_name"}; a _bucket also by le.
GRAFANA_SAMPLES = [
    "vllm:e2e_request_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_sum",
    "vllm:e2e_request_latency_seconds_count", "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total", "vllm:time_per_output_token_seconds_bucket",
    "vllm:time_per_output_token_seconds_sum", "vllm:time_per_output_token_seconds_count",
    "vllm:num_requests_running", "vllm:num_requests_waiting",
    "vllm:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count", "vllm:gpu_cache_usage_perc",
    "vllm:request_prompt_tokens_bucket", "vllm:request_generation_tokens_bucket",
    "vllm:request_success_total", "vllm:request_queue_time_seconds_sum",
    "vllm:request_prefill_time_seconds_sum", "vllm:request_decode_time_seconds_sum",
    "vllm:request_max_num_generation_tokens_sum",
]


def idle(url):
    m = metrics(url)
    return m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0


def test_metrics_page(url):
    # Some traffic first, so the histograms have observations.
    httpx.post(url + "/v1/completions", timeout=60,
               json={"prompt": "metrics", "max_tokens": 3, "ignore_eos": True})
    families = {f.name: f for f in scrape(url)}
    for name, kind in REQUIRED_METRICS.items():
        # The parser names a counter's family without its _total suffix.
        family = families.get(name.removesuffix("_total") if kind == "counter" else name)
        assert family is not None, f"{name} missing"
        assert family.type == kind, f"{name}: {family.type}, not {kind}"
        assert family.samples, f"{name} has no samples"
        if kind != "histogram":
            continue
        buckets = sorted((float(s.labels["le"]), s.value) for s in family.samples
                         if s.name == name + "_bucket")
        assert buckets[-1][0] == float("inf")
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), f"{name} buckets are not cumulative"
        total = {s.name: s.value for s in family.samples}
        assert counts[-1] == total[name + "_count"] >= 1
        assert total[name + "_sum"] >= 0
    m = metrics(url)
    assert 0 <= m["vllm:kv_cache_usage_perc"] <= 1
    assert m["vllm:generation_tokens_total"] >= 3
    assert m['vllm:request_success_total{finished_reason="length"}'] >= 1
    assert m["vllm:request_prefill_time_seconds_count"] >= 1
    # vLLM's names for the engine, vpod_ for vpod's own series (steps, HTTP).
    assert all(name.startswith(("vllm:", "vpod_")) for name in families)
    # The engine's series carry vLLM's labels: the served model name and engine="0".
    samples = [s for f in families.values() for s in f.samples]
    for s in samples:
        if s.name.startswith("vllm:") and s.name != "vllm:cache_config_info":
            assert s.labels.get("model_name") == MODEL_NAME and s.labels.get("engine") == "0", s
    # vLLM's info gauge: the KV cache's settings as labels (no model_name, as in vLLM).
    info = [s for s in samples if s.name == "vllm:cache_config_info"]
    assert len(info) == 1 and info[0].value == 1, info
    assert info[0].labels["enable_prefix_caching"] in ("True", "False")
    assert info[0].labels["engine"] == "0"
    # `le` printed as Prometheus clients print it, so {le="0.1"} finds 0.1's bucket.
    les = {s.labels["le"] for s in samples if s.name == "vllm:time_to_first_token_seconds_bucket"}
    assert {"0.001", "0.1", "1.0", "2560.0", "+Inf"} <= les, les
    for name in GRAFANA_SAMPLES:
        assert any(s.name == name and s.labels.get("model_name") == MODEL_NAME and
                   ("le" in s.labels) == name.endswith("_bucket") for s in samples), name
    assert any(s.name == "vllm:request_success_total" and "finished_reason" in s.labels
               for s in samples)


def test_32_concurrent_streams(url):
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", timeout=300, max_retries=0)
    before = metrics(url)

    def one(i):
        chunks = list(client.completions.create(
            model=MODEL_NAME, prompt=f"Stream number {i}:", max_tokens=24, temperature=0.8,
            seed=i, stream=True, stream_options={"include_usage": True},
            extra_body={"ignore_eos": True}))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        return text, finish, chunks[-1].usage.completion_tokens

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        results = list(pool.map(one, range(32), timeout=600))
    assert all(finish == "length" and n == 24 for _, finish, n in results)
    # The same requests one at a time give the same text (seeded sampling is
    # independent of batching).
    for i in (0, 17, 31):
        alone = client.completions.create(model=MODEL_NAME, prompt=f"Stream number {i}:",
                                          max_tokens=24, temperature=0.8, seed=i,
                                          extra_body={"ignore_eos": True})
        assert alone.choices[0].text == results[i][0]
    after = metrics(url)
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] >= 32 * 24
    assert wait_for(lambda: idle(url), 30)


# Tokens the engine may still generate after a client hangs up: the server
# notices on its next failed write or poll (the first write after the close
# only draws the peer's RST), the engine frees the slot at its next step
# boundary, and the metrics scrape taken just before the close races a step
# or two. One sequence makes one token per step, so this is about that many
# steps; a server that does not abort runs on to max_tokens (480).
MAX_TOKENS_AFTER_DISCONNECT = 24


def test_disconnect_aborts_and_frees(url):
    assert wait_for(lambda: idle(url), 30)
    before = metrics(url)
    kv_idle = before["vllm:kv_cache_usage_perc"]
    abort_key = 'vllm:request_success_total{finished_reason="abort"}'
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"prompt": "Tell me a long story", "max_tokens": 480, "ignore_eos": True,
                       "stream": True}).encode()
    s = socket.create_connection((host, int(port)), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data: ") < 3:
        chunk = s.recv(4096)
        assert chunk, "server closed early"
        got += chunk
    at_close = metrics(url)
    assert at_close["vllm:num_requests_running"] == 1
    assert at_close["vllm:kv_cache_usage_perc"] > kv_idle  # the stream holds KV pages
    s.close()
    # The abort lands within a step or so: nothing runs and KV usage is back
    # to its idle value.
    assert wait_for(lambda: idle(url), 5)
    assert wait_for(lambda: metrics(url)["vllm:kv_cache_usage_perc"] == kv_idle, 5)
    assert wait_for(lambda: metrics(url).get(abort_key, 0) == before.get(abort_key, 0) + 1, 5)
    after = metrics(url)
    late = after["vllm:generation_tokens_total"] - at_close["vllm:generation_tokens_total"]
    assert late <= MAX_TOKENS_AFTER_DISCONNECT, f"{late} tokens generated after the disconnect"
    assert after["vpod_num_http_requests_in_flight"] <= 1  # this scrape


# The soak's time bound: 2,000 requests of at most 6 tokens take well under
# two minutes on 2 cores; past the bound the remaining requests are not sent
# and the test fails (a server this slow has regressed).
SOAK_REQUESTS = 2000
SOAK_WORKERS = 32
SOAK_DEADLINE_S = 300


def soak_request(c, kind, max_tokens, seed):
    """One request of the soak on client `c`; "ok" or what went wrong."""
    prompt = f"Request {seed}"
    common = {"max_tokens": max_tokens, "seed": seed, "temperature": 0.7}
    chat = {"messages": [{"role": "user", "content": prompt}], **common}
    if kind == "completion":
        r = c.post("/v1/completions", json={"prompt": prompt, **common})
        ok = r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
    elif kind == "completion_stream":
        with c.stream("POST", "/v1/completions",
                      json={"prompt": prompt, "stream": True, **common}) as r:
            ok = r.status_code == 200 and r.read().endswith(b"data: [DONE]\n\n")
    elif kind == "chat":
        r = c.post("/v1/chat/completions", json=chat)
        ok = r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    elif kind == "chat_stream":
        with c.stream("POST", "/v1/chat/completions", json={
                **chat, "stream": True, "stream_options": {"include_usage": True}}) as r:
            ok = r.status_code == 200 and r.read().endswith(b"data: [DONE]\n\n")
    elif kind == "n2":
        r = c.post("/v1/completions", json={"prompt": prompt, "n": 2, **common})
        ok = r.status_code == 200 and len(r.json()["choices"]) == 2
    elif kind == "tokenize":
        r = c.post("/tokenize", json={"prompt": prompt})
        ok = r.status_code == 200 and r.json()["count"] > 0
    else:  # an invalid request: answered 400, and it disturbs nothing
        r = c.post("/v1/completions", json={"prompt": "", **common})
        ok = r.status_code == 400 and "error" in r.json()
    return "ok" if ok else f"{kind}: {r.status_code} {r.text[:200]}"


def test_soak_2000_mixed_requests(url):
    """2,000 requests of every kind from 32 keep-alive clients, bounded in time;
    all succeed and KV usage is back at its idle value afterwards."""
    rng = random.Random(2024)
    kinds = ["completion", "completion_stream", "chat", "chat_stream", "n2", "tokenize", "error"]
    plan = [(rng.choice(kinds), rng.randrange(1, 7), rng.randrange(1 << 30))
            for _ in range(SOAK_REQUESTS)]
    assert wait_for(lambda: idle(url), 30)
    kv_idle = metrics(url)["vllm:kv_cache_usage_perc"]
    deadline = time.monotonic() + SOAK_DEADLINE_S
    local = threading.local()  # one keep-alive client per worker, as real clients do

    def run(item):
        if time.monotonic() > deadline:
            return "not sent: the soak's time bound passed"
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=url, timeout=120)
        return soak_request(local.client, *item)

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(SOAK_WORKERS) as pool:
        outcomes = list(pool.map(run, plan))
    elapsed = time.monotonic() - start
    failures = [o for o in outcomes if o != "ok"]
    assert not failures, f"{len(failures)} failed in {elapsed:.0f} s, e.g. {failures[:5]}"
    print(f"soak: {SOAK_REQUESTS} requests in {elapsed:.1f} s")
    assert wait_for(lambda: idle(url), 30)
    after = metrics(url)
    assert after["vllm:kv_cache_usage_perc"] == kv_idle
    assert after["vpod_num_http_requests_in_flight"] <= 1  # this scrape
    assert httpx.get(url + "/health", timeout=10).status_code == 200
