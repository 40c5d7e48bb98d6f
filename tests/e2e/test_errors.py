"""Raw HTTP against `vpod serve`: every error status the server documents,
always in OpenAI's shape {"error": {"message", "type", "param", "code"}},
and the server keeps serving after each."""

import json
import signal
import socket
import threading
import time

import httpx
import pytest

from conftest import MAX_BODY, MAX_MODEL_LEN, MODEL_NAME, metrics, wait_for

USER = [{"role": "user", "content": "hi"}]


def check_error(r, status, param=None):
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]
    if param is not None:
        assert err["param"] == param, err
    return err


BAD_REQUESTS = [
    # (path, raw body, param)
    ("/v1/completions", b'{"prompt": ', None),
    ("/v1/completions", b'{"prompt": "x",}', None),
    ("/v1/completions", b"[1, 2]", None),
    ("/v1/completions", b"", None),
    ("/v1/completions", b'{"prompt": "caf\xff"}', None),
    ("/v1/completions", b'{"prompt": "\\ud800"}', None),
    ("/v1/completions", b'{"prompt": ""}', "prompt"),
    ("/v1/completions", b'{"prompt": []}', "prompt"),
    ("/v1/completions", b'{"prompt": [[]]}', "prompt"),
    ("/v1/completions", b'{"max_tokens": 5}', "prompt"),
    ("/v1/completions", b'{"prompt": 5}', "prompt"),
    ("/v1/completions", b'{"prompt": [1, "a"]}', "prompt"),
    ("/v1/completions", b'{"prompt": [999999999]}', "prompt"),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": "5"}', "max_tokens"),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 0}', "max_tokens"),
    ("/v1/completions", b'{"prompt": "x", "temperature": -1}', "temperature"),
    ("/v1/completions", b'{"prompt": "x", "temperature": 1e400}', None),
    ("/v1/completions", b'{"prompt": "x", "top_p": 0}', "top_p"),
    ("/v1/completions", b'{"prompt": "x", "top_k": -5}', "top_k"),
    ("/v1/completions", b'{"prompt": "x", "min_p": 2}', "min_p"),
    ("/v1/completions", b'{"prompt": "x", "repetition_penalty": 0}', "repetition_penalty"),
    ("/v1/completions", b'{"prompt": "x", "presence_penalty": 3}', "presence_penalty"),
    ("/v1/completions", b'{"prompt": "x", "frequency_penalty": "a"}', "frequency_penalty"),
    ("/v1/completions", b'{"prompt": "x", "n": 0}', "n"),
    ("/v1/completions", b'{"prompt": "x", "logprobs": 21}', "logprobs"),
    ("/v1/completions", b'{"prompt": "x", "stop": 5}', "stop"),
    ("/v1/completions", b'{"prompt": "x", "seed": "a"}', "seed"),
    ("/v1/completions", b'{"prompt": "x", "stream": "yes"}', "stream"),
    ("/v1/completions", b'{"prompt": "x", "stream_options": {"include_usage": true}}',
     "stream_options"),
    ("/v1/completions", b'{"prompt": "x", "min_tokens": 10, "max_tokens": 5}', "min_tokens"),
    ("/v1/completions", b'{"prompt": "x", "stop_token_ids": [-1]}', "stop_token_ids"),
    ("/v1/completions", b'{"prompt": "x", "ignore_eos": 1}', "ignore_eos"),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 600}', "max_tokens"),
    ("/v1/completions", b'{"prompt": "x", "response_format": {"type": "yaml"}}',
     "response_format.type"),
    ("/v1/chat/completions", b'{"messages": []}', "messages"),
    ("/v1/chat/completions", b'{"model": "tiny"}', "messages"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user"}]}', "messages"),
    ("/v1/chat/completions", b'{"messages": [{"role": "robot", "content": "x"}]}', "messages"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": 3}]}', "messages"),
    ("/v1/chat/completions",
     b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}',
     "messages"),
    ("/v1/chat/completions",
     b'{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",'
     b' "function": {"name": "f"}}]}', "tools"),
    ("/v1/chat/completions",
     b'{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": '
     b'"json_schema"}}', "response_format.json_schema"),
    ("/v1/chat/completions",
     b'{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}', "top_logprobs"),
    ("/v1/chat/completions",
     b'{"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -3}',
     "max_completion_tokens"),
    ("/tokenize", b'{"prompt": 3}', "prompt"),
    ("/tokenize", b"{}", None),
    ("/detokenize", b'{"tokens": "abc"}', "tokens"),
]


@pytest.mark.parametrize("path,body,param", BAD_REQUESTS)
def test_400(url, path, body, param):
    r = httpx.post(url + path, content=body, headers={"Content-Type": "application/json"},
                   timeout=30)
    err = check_error(r, 400, param)
    assert err["type"] == "invalid_request_error"


def test_400_unsupported_features_say_so(url):
    r = httpx.post(url + "/v1/chat/completions", timeout=30, json={
        "model": MODEL_NAME, "messages": USER, "tools": [{"type": "function",
                                                          "function": {"name": "f"}}]})
    # Tools mean tool_choice "auto", which needs the server's parser flags (as in vLLM).
    assert "--enable-auto-tool-choice" in check_error(r, 400, "tools")["message"]
    r = httpx.post(url + "/v1/completions", timeout=30, json={
        "prompt": "x", "structured_outputs": {"regex": "a+", "whitespace_pattern": " "}})
    assert "not supported" in check_error(
        r, 400, "structured_outputs.whitespace_pattern")["message"]


def test_400_context_length(url):
    long_prompt = " hello" * (MAX_MODEL_LEN - 10)
    r = httpx.post(url + "/v1/completions", timeout=30,
                   json={"prompt": long_prompt, "max_tokens": 16})
    assert "maximum context length" in check_error(r, 400, "max_tokens")["message"]
    r = httpx.post(url + "/v1/chat/completions", timeout=30, json={
        "messages": [{"role": "user", "content": " hello" * MAX_MODEL_LEN}]})
    check_error(r, 400)
    # Exactly at the limit is fine.
    ids = [128000] + [9906] * (MAX_MODEL_LEN - 3)
    r = httpx.post(url + "/v1/completions", timeout=60,
                   json={"prompt": ids, "max_tokens": 2, "ignore_eos": True})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["total_tokens"] == MAX_MODEL_LEN


def test_unknown_fields_are_ignored(url):
    r = httpx.post(url + "/v1/completions", timeout=30, json={
        "prompt": "x", "max_tokens": 1, "frobnicate": {"a": [1, 2]}, "metadata": None})
    assert r.status_code == 200, r.text


def test_404(url):
    err = check_error(httpx.post(url + "/v1/completions", timeout=30,
                                 json={"model": "gpt-9", "prompt": "x"}), 404, "model")
    assert err["code"] == "model_not_found"
    check_error(httpx.post(url + "/v1/chat/completions", timeout=30,
                           json={"model": "gpt-9", "messages": USER}), 404, "model")
    check_error(httpx.get(url + "/v1/nope", timeout=30), 404)
    check_error(httpx.get(url + "/v1/completions", timeout=30), 404)
    check_error(httpx.post(url + "/v2/completions", json={}, timeout=30), 404)


def test_413_then_still_serving(url):
    big = json.dumps({"prompt": "x" * (MAX_BODY + 10)}).encode()
    check_error(httpx.post(url + "/v1/completions", content=big, timeout=30,
                           headers={"Content-Type": "application/json"}), 413)
    r = httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=30)
    assert r.status_code == 200


def test_garbage_never_crashes(url):
    """Random bytes and truncated requests on raw sockets; the server answers
    (or closes) and keeps serving."""
    import random
    rng = random.Random(7)
    host, port = url.removeprefix("http://").split(":")
    for i in range(60):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.settimeout(5)
            if i % 3 == 0:
                payload = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
            elif i % 3 == 1:
                body = json.dumps({"prompt": "x", "max_tokens": 1}).encode()
                cut = rng.randrange(len(body))
                payload = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                           + str(len(body)).encode() + b"\r\n\r\n" + body[:cut])
            else:
                body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
                payload = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                           + str(len(body)).encode() + b"\r\n\r\n" + body)
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)  # the server sees the end of what we send
            try:
                s.recv(4096)
            except (socket.timeout, ConnectionResetError):
                pass
    r = httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=30)
    assert r.status_code == 200
    assert httpx.get(url + "/health", timeout=30).status_code == 200


def test_error_responses_are_counted(url):
    before = metrics(url).get('vpod_http_responses_total{status="400"}', 0)
    httpx.post(url + "/v1/completions", content=b"{", timeout=30)
    after = metrics(url)['vpod_http_responses_total{status="400"}']
    assert after == before + 1


def test_401_api_key(new_server):
    s = new_server("--api-key", "sekrit-key")
    body = {"model": MODEL_NAME, "prompt": "x", "max_tokens": 1}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sekrit-key"},
                    {"Authorization": "Basic sekrit-key"}, {"Authorization": "Bearer sekrit-ke"}):
        err = check_error(httpx.post(s.url + "/v1/completions", json=body, headers=headers,
                                     timeout=30), 401)
        assert err["code"] == "invalid_api_key"
    check_error(httpx.get(s.url + "/v1/models", timeout=30), 401)
    check_error(httpx.post(s.url + "/tokenize", json={"prompt": "x"}, timeout=30), 401)
    ok = httpx.post(s.url + "/v1/completions", json=body, timeout=30,
                    headers={"Authorization": "Bearer sekrit-key"})
    assert ok.status_code == 200, ok.text
    import openai
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="sekrit-key", max_retries=0)
    assert client.models.list().data[0].id == MODEL_NAME
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=s.url + "/v1", api_key="nope", max_retries=0).models.list()
    # Probes stay open.
    assert httpx.get(s.url + "/health", timeout=30).status_code == 200
    assert httpx.get(s.url + "/metrics", timeout=30).status_code == 200
    assert s.stop() == 0


def test_503_while_draining_then_exit_0(new_server):
    s = new_server("--drain-timeout", "2")
    results = {}

    def long_stream():
        with httpx.stream("POST", s.url + "/v1/completions", timeout=60, json={
                "prompt": "x", "max_tokens": 500, "ignore_eos": True, "stream": True}) as r:
            results["status"] = r.status_code
            results["body"] = "".join(r.iter_text())

    t = threading.Thread(target=long_stream)
    t.start()
    assert wait_for(lambda: metrics(s.url)["vllm:num_requests_running"] == 1, 30)
    s.proc.send_signal(signal.SIGTERM)
    # Draining: new work and health get 503 while the stream is still going.
    assert wait_for(lambda: httpx.get(s.url + "/health", timeout=5).status_code == 503, 10)
    check_error(httpx.post(s.url + "/v1/completions", json={"prompt": "x"}, timeout=10), 503)
    t.join(60)
    assert not t.is_alive()
    assert results["status"] == 200
    events = [e.removeprefix("data: ") for e in results["body"].split("\n\n") if e]
    assert events[-1] == "[DONE]"
    # 500 tokens do not fit in the 2 s drain: the stream ends aborted.
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "abort"
    assert s.proc.wait(30) == 0


def test_drain_lets_in_flight_requests_finish(new_server):
    """SIGINT: the stream in flight runs to its end, new requests get 503
    meanwhile, then the listener closes (connection refused) and exit is 0."""
    s = new_server("--drain-timeout", "60")
    results = {}

    def stream():
        with httpx.stream("POST", s.url + "/v1/completions", timeout=60, json={
                "prompt": "x", "max_tokens": 200, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}) as r:
            results["status"] = r.status_code
            results["body"] = "".join(r.iter_text())

    t = threading.Thread(target=stream)
    t.start()
    assert wait_for(lambda: metrics(s.url)["vllm:num_requests_running"] == 1, 30)
    s.proc.send_signal(signal.SIGINT)
    assert wait_for(lambda: httpx.get(s.url + "/health", timeout=5).status_code == 503, 10)
    assert t.is_alive(), "the request ended before the drain began; the test proves nothing"
    check_error(httpx.post(s.url + "/v1/chat/completions", json={"messages": USER}, timeout=10),
                503)
    t.join(60)
    assert not t.is_alive()
    assert results["status"] == 200
    events = [e.removeprefix("data: ") for e in results["body"].split("\n\n") if e]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-3])["choices"][0]["finish_reason"] == "length"
    assert json.loads(events[-2])["usage"]["completion_tokens"] == 200
    assert s.proc.wait(30) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(s.url + "/health", timeout=5)
