"""The HTTP layer under attack, on loopback: each finding of the Beast
rewrite's issue (#25) as a regression test against a real `vpod serve`.
Every socket has a timeout and every loop a bound; memory is read from
/proc/<pid>/status (VmRSS now, VmHWM the peak)."""

import concurrent.futures
import gzip
import json
import pathlib
import resource
import select
import shutil
import socket
import subprocess
import time

import httpx
import pytest

from conftest import MAX_BODY, MODEL_NAME, VPOD_BIN, Server, wait_for

TOKENIZE = json.dumps({"prompt": "hello world"}).encode()


def host_port(url):
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def connect(url, timeout=10):
    s = socket.create_connection(host_port(url), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def request(method, path, body=b"", headers=()):
    head = [f"{method} {path} HTTP/1.1", "Host: x"]
    if body or method == "POST":
        head.append("Content-Type: application/json")
        head.append(f"Content-Length: {len(body)}")
    head.extend(headers)
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def read_responses(s, count, timeout=10):
    """Reads `count` whole responses (Content-Length bodies, or chunked);
    returns [(status, headers, body)]. Interim 1xx answers are skipped."""
    s.settimeout(timeout)
    buf = b""
    out = []
    deadline = time.monotonic() + timeout

    def fill():
        nonlocal buf
        if time.monotonic() > deadline:
            raise TimeoutError("no complete response")
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} responses; pending {buf[:200]!r}")
        buf += chunk

    while len(out) < count:
        while b"\r\n\r\n" not in buf:
            fill()
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        if 100 <= status < 200:
            continue
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                while b"\r\n" not in buf:
                    fill()
                size_line, buf = buf.split(b"\r\n", 1)
                size = int(size_line, 16)
                while len(buf) < size + 2:
                    fill()
                body += buf[:size]
                buf = buf[size + 2:]
                if size == 0:
                    break
        else:
            length = int(headers.get("content-length", "0"))
            while len(buf) < length:
                fill()
            body, buf = buf[:length], buf[length:]
        out.append((status, headers, body))
    return out


def send_until_answered(s, head, chunks, limit_bytes):
    """Sends `head` then `chunks` (an iterator of bytes) until the server
    answers or closes, at most `limit_bytes`; returns (bytes sent, answer)."""
    s.sendall(head)
    sent = 0
    s.setblocking(False)
    answer = b""
    try:
        for chunk in chunks:
            if sent > limit_bytes:
                break
            try:
                got = s.recv(65536)
                if got:
                    answer += got
                    break
                break  # closed
            except BlockingIOError:
                pass
            try:
                s.sendall(chunk)
            except (BlockingIOError, InterruptedError):
                time.sleep(0.001)
            except OSError:
                break
            sent += len(chunk)
    finally:
        s.setblocking(True)
    s.settimeout(10)
    try:
        while b"\r\n\r\n" not in answer:
            got = s.recv(65536)
            if not got:
                break
            answer += got
    except OSError:
        pass
    return sent, answer


def status_of(answer):
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split()[1])


def rss_kib(pid, field="VmRSS"):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


@pytest.fixture(scope="module")
def hard(model_dir, tmp_path_factory):
    """A server with short timeouts, so slow clients are visibly dropped."""
    s = Server(model_dir, tmp_path_factory.mktemp("hard") / "serve.log", "--header-timeout", "3",
               "--body-timeout", "3", "--keep-alive-timeout", "5", "--drain-timeout", "5")
    yield s
    assert s.stop() == 0, s.log()


def healthy(url):
    r = httpx.post(url + "/tokenize", content=TOKENIZE, timeout=10,
                   headers={"Content-Type": "application/json"})
    return r.status_code == 200 and r.json()["count"] > 0


# ---- F1: body limits ---------------------------------------------------------

def test_f1_chunked_body_over_the_limit_is_413(hard):
    idle = rss_kib(hard.proc.pid)
    s = connect(hard.url)
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    piece = b"x" * 65536
    chunks = (b"%x\r\n" % len(piece) + piece + b"\r\n" for _ in range(1024))  # 64 MiB
    sent, answer = send_until_answered(s, head, chunks, 64 << 20)
    s.close()
    assert status_of(answer) == 413, answer[:300]
    # What was sent beyond the limit sits in socket buffers (loopback's grow
    # to several MB), not in the server.
    assert sent < 16 << 20, f"{sent} bytes were taken before the 413"
    assert rss_kib(hard.proc.pid) < 1.5 * idle
    assert healthy(hard.url)


def test_f1_compressed_bodies_are_refused_not_inflated(hard):
    idle = rss_kib(hard.proc.pid)
    bomb = gzip.compress(b'{"prompt": "' + b" " * (256 << 20) + b'"}', compresslevel=9)
    assert len(bomb) < MAX_BODY
    for _ in range(3):
        r = httpx.post(hard.url + "/v1/completions", content=bomb, timeout=30,
                       headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
        assert r.status_code == 415, r.text
        assert "Content-Encoding" in r.json()["error"]["message"]
    assert rss_kib(hard.proc.pid) < 1.5 * idle
    assert healthy(hard.url)


# Answers that must come from the head alone are checked on a server whose
# body timeout (600 s) is far longer than any wait here: a server that waited
# for the body (which is never sent) could not answer at all, however fast or
# slow the machine is.
PATIENT = ("--header-timeout", "600", "--body-timeout", "600")


def test_f1_no_key_no_body_read(new_server):
    """Without the API key the answer is 401 from the head alone: a client
    announcing a large body gets it without sending a byte of it."""
    s = new_server("--api-key", "k", *PATIENT)
    c = connect(s.url, timeout=60)
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 1000000\r\n\r\n")
    (status, headers, body), = read_responses(c, 1, timeout=60)
    assert status == 401
    assert headers.get("connection") == "close"
    assert "date" in headers and headers["x-request-id"]
    c.close()
    assert s.stop() == 0


def test_f1_content_length_over_the_limit_is_413_at_once(new_server):
    # F6: from the head, not after a body timeout.
    s = new_server(*PATIENT)
    c = connect(s.url, timeout=60)
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % (64 << 20))
    (status, headers, _), = read_responses(c, 1, timeout=60)
    assert status == 413 and headers.get("connection") == "close"
    c.close()
    assert s.stop() == 0


# ---- F2: connection exhaustion ----------------------------------------------

def raise_client_fd_limit(n):
    soft, hard_limit = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard_limit, max(soft, n))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard_limit))
    return want


def canaries(url, count):
    """`count` rounds of /health and /tokenize on one kept-alive client; each
    must be answered (the 30 s client timeout only bounds a hang)."""
    with httpx.Client(timeout=30) as c:
        for _ in range(count):
            assert c.get(url + "/health").status_code == 200
            r = c.post(url + "/tokenize", content=TOKENIZE,
                       headers={"Content-Type": "application/json"})
            assert r.status_code == 200


def open_slow_connections(url, count):
    """`count` connections: even ones trickle a request head, odd ones sit idle."""
    slow = []
    for i in range(count):
        s = connect(url)
        if i % 2 == 0:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\n")
        slow.append(s)
    return slow


def readable(socks):
    """The descriptors of `socks` with something to read now (data or EOF)."""
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLIN)
    return {fd for fd, _ in poller.poll(0)}


def dropped(s):
    """Whether the server closed `s` (it sends nothing else to these)."""
    s.settimeout(0.01)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def test_f2_1000_slow_connections_do_not_starve_canaries(new_server):
    """Canaries are answered while the server still holds 1,000 slow
    connections open. Its header timeout (600 s) is far beyond the canaries'
    client timeout, so a server that served the slow ones first (one thread
    per connection, a small pool) could not answer them in time: an order,
    not a latency bound."""
    if raise_client_fd_limit(2200) < 2100:
        pytest.skip("the client cannot open 1,000 connections (open-files limit)")
    s = new_server("--header-timeout", "600", "--keep-alive-timeout", "600")
    slow = open_slow_connections(s.url, 1000)
    try:
        for _ in range(5):
            for c in slow[::2]:
                c.sendall(b"X-Slow: 1\r\n")
            canaries(s.url, 2)
        # Nothing to read on any of them: none was answered or closed.
        assert not readable(slow), "slow connections were answered or closed early"
    finally:
        for c in slow:
            c.close()
    assert healthy(s.url)
    assert s.stop() == 0


def test_f2_slow_connections_are_dropped_at_the_header_timeout(hard):
    """Slow heads are dropped at --header-timeout (3 s) from their first byte;
    idle connections too (a new connection must start within it)."""
    if raise_client_fd_limit(2200) < 2100:
        pytest.skip("the client cannot open 1,000 connections (open-files limit)")
    slow = open_slow_connections(hard.url, 1000)
    try:
        for c in slow[::2]:
            try:
                c.sendall(b"X-Slow: 1\r\n")
            except OSError:
                pass
        assert wait_for(lambda: all(dropped(c) for c in slow), 60)
    finally:
        for c in slow:
            c.close()
    assert healthy(hard.url)


def get_on(sock, path, headers=()):
    """One request on a kept-alive raw connection; its (status, headers, body)."""
    sock.sendall(request("GET", path, headers=headers))
    return read_responses(sock, 1, timeout=30)[0]


def connection_gauges(observer):
    """(open, idle) connections as the server counts them, read over the
    kept-alive `observer`, which is busy (not idle) while it reads them."""
    status, _, body = get_on(observer, "/metrics")
    assert status == 200
    values = {}
    for line in body.decode().splitlines():
        name, _, value = line.partition(" ")
        if name in ("vpod_http_connections", "vpod_http_connections_idle"):
            values[name] = int(float(value))
    return values["vpod_http_connections"], values["vpod_http_connections_idle"]


def hold_busy(sock):
    """Starts a POST whose body is withheld and waits for the server's
    100 Continue: from then on the server is reading this request's body, so
    the connection is busy (never closed for room). The server's 503 instead
    fails the test."""
    sock.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n" % len(TOKENIZE))
    sock.settimeout(30)
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(4096)
        assert chunk, f"closed while waiting for 100 Continue: {got[:200]!r}"
        got += chunk
    assert got.startswith(b"HTTP/1.1 100 "), got[:300]


def test_f2_max_connections_evicts_idle_then_refuses_with_503(new_server):
    """Every step waits for the state the server reports (its connection
    gauges, a 100 Continue), never for time: which connection is idle, and
    since when, decides who is closed for room."""
    s = new_server("--max-connections", "20", "--keep-alive-timeout", "600",
                   "--header-timeout", "600", "--body-timeout", "600")
    observer = connect(s.url, timeout=30)
    kept = []
    busy = []
    try:
        assert get_on(observer, "/health")[0] == 200
        # 19 kept-alive connections, each idle (as the server reports) before
        # the next opens, so they are idle in this order.
        for i in range(19):
            c = connect(s.url, timeout=30)
            assert get_on(c, "/health")[0] == 200
            kept.append(c)
            assert wait_for(lambda: connection_gauges(observer) == (i + 2, i + 1), 30)
        # Full (20 open). A newcomer makes room by closing the longest-idle one.
        newcomer = connect(s.url, timeout=30)
        status, headers, _ = get_on(newcomer, "/health", headers=["Connection: close"])
        assert status == 200 and headers.get("connection") == "close"
        newcomer.close()
        kept[0].settimeout(30)
        try:
            assert kept[0].recv(1) == b"", "the longest-idle connection was not closed"
        except ConnectionResetError:
            pass
        kept[0].close()
        # Both gone from the server's count: 18 idle and the observer.
        assert wait_for(lambda: connection_gauges(observer) == (19, 18), 30)
        # 19 connections busy with a request each: the first takes the free
        # room, each later one closes the longest-idle kept connection.
        for _ in range(19):
            b = connect(s.url, timeout=30)
            hold_busy(b)
            busy.append(b)
        hold_busy(observer)
        # 20 busy connections, none idle to close: a newcomer gets 503.
        c = connect(s.url, timeout=30)
        c.sendall(request("GET", "/health"))
        (status, _, body), = read_responses(c, 1, timeout=30)
        c.close()
        assert status == 503 and b"too many open connections" in body
        # Every busy connection was kept: each finishes its request.
        for b in busy + [observer]:
            b.sendall(TOKENIZE)
            (status, _, body), = read_responses(b, 1, timeout=30)
            assert status == 200, body
        for k in kept[1:]:  # all closed for room by the busy ones
            k.settimeout(30)
            try:
                assert k.recv(1) == b""
            except ConnectionResetError:
                pass
    finally:
        for sock in [observer, *kept, *busy]:
            sock.close()
    assert wait_for(lambda: httpx.get(s.url + "/health", timeout=30).status_code == 200, 30)
    assert s.stop() == 0


# ---- F3: header memory ------------------------------------------------------

def test_f3_huge_request_line_and_headers_are_431_and_bounded(hard):
    idle = rss_kib(hard.proc.pid)
    for case in range(8):
        s = connect(hard.url)
        if case % 2 == 0:  # a 200 MB request line
            head = b"GET /"
            chunks = (b"a" * 65536 for _ in range(3200))
        else:  # endless headers
            head = b"GET /health HTTP/1.1\r\nHost: x\r\n"
            chunks = (b"X-H: v\r\n" * 8192 for _ in range(3200))
        sent, answer = send_until_answered(s, head, chunks, 200 << 20)
        s.close()
        assert status_of(answer) == 431, answer[:300]
        assert sent < 16 << 20, f"{sent} bytes taken before the 431"
    assert rss_kib(hard.proc.pid) < 1.5 * idle
    # Many small headers: the count is limited too.
    c = connect(hard.url)
    c.sendall(request("GET", "/health", headers=[f"X-{i}: v" for i in range(150)]))
    (status, _, body), = read_responses(c, 1)
    assert status == 431 and b"headers" in body
    c.close()


# ---- F4: Range --------------------------------------------------------------

def test_f4_range_is_ignored_on_generated_responses(hard):
    big = json.dumps({"prompt": "word " * 2000, "return_token_strs": True}).encode()
    plain = httpx.post(hard.url + "/tokenize", content=big, timeout=30,
                       headers={"Content-Type": "application/json", "Accept-Encoding": "identity"})
    ranges = ",".join(f"{i}-{i + 1}" for i in range(0, 4000, 2))
    for auth in ({}, {"Authorization": "Bearer nope"}):
        r = httpx.post(hard.url + "/tokenize", content=big, timeout=30,
                       headers={"Content-Type": "application/json", "Range": f"bytes={ranges}",
                                "Accept-Encoding": "identity", **auth})
        assert r.status_code == 200
        assert "content-range" not in r.headers
        assert len(r.content) == len(plain.content)


# ---- F5: pipelining and smuggling -------------------------------------------

def test_f5_pipelined_requests_are_answered_in_order(hard):
    s = connect(hard.url)
    batch = (request("POST", "/tokenize", json.dumps({"prompt": "a"}).encode())
             + request("GET", "/version")
             + request("POST", "/tokenize", json.dumps({"prompt": "a b c d"}).encode())
             + request("GET", "/health"))
    s.sendall(batch)
    answers = read_responses(s, 4)
    s.close()
    assert [a[0] for a in answers] == [200, 200, 200, 200]
    assert json.loads(answers[0][2])["count"] < json.loads(answers[2][2])["count"]
    assert "version" in json.loads(answers[1][2])


def test_f5_bytes_inside_a_body_are_never_a_request(hard):
    inner = b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n"
    prompt = b"p" * (4096 - len(b'{"prompt": "')) + inner.replace(b"\r\n", b"  ")
    body = b'{"prompt": "' + prompt + b'"}'
    raw = body.replace(b"  ", b"\\r\\n")  # the JSON escapes, not raw CRLFs ...
    raw_crlf = b'{"prompt": "' + b"p" * 4084 + b'", "x": "' + inner + b'"}'  # ... and raw ones
    for payload in (raw, raw_crlf):
        s = connect(hard.url)
        s.sendall(request("POST", "/tokenize", payload) + request("GET", "/health"))
        answers = read_responses(s, 2)
        # A request that the body had smuggled in would be answered before
        # this one: the next answer on the connection must be this /health.
        s.sendall(request("GET", "/health"))
        answers += read_responses(s, 1)
        s.close()
        assert answers[0][0] in (200, 400)
        assert answers[1][0] == 200 and answers[1][2] == b""  # /health, not /version
        assert answers[2][0] == 200 and answers[2][2] == b""


# ---- F6: framing ------------------------------------------------------------

@pytest.mark.parametrize("headers", [
    ["Content-Length: 5", "Content-Length: 6"],
    ["Content-Length: 5, 6"],
    ["Transfer-Encoding: chunked", "Content-Length: 5"],
    ["Content-Length: 5", "Transfer-Encoding: chunked"],
    ["Transfer-Encoding: gzip"],
    ["X-Folded: a", " b", "Content-Length: 5"],
    ["Content-Length: -1"],
])
def test_f6_ambiguous_framing_is_400(hard, headers):
    s = connect(hard.url)
    s.sendall(("POST /tokenize HTTP/1.1\r\nHost: x\r\n" + "\r\n".join(headers)
               + "\r\n\r\n").encode() + b'{"prompt": "hi"}')
    (status, h, body), = read_responses(s, 1)
    s.close()
    assert status == 400, body
    assert h.get("connection") == "close"
    assert json.loads(body)["error"]["message"]


# ---- F7: half-close ---------------------------------------------------------

@pytest.mark.parametrize("path,body", [
    ("/tokenize", TOKENIZE),
    ("/v1/completions", json.dumps({"prompt": "half", "max_tokens": 8}).encode()),
    ("/v1/completions", json.dumps({"prompt": "half", "max_tokens": 8, "stream": True}).encode()),
])
def test_f7_a_half_closed_client_gets_its_answer(hard, path, body):
    s = connect(hard.url)
    s.sendall(request("POST", path, body))
    s.shutdown(socket.SHUT_WR)
    (status, headers, got), = read_responses(s, 1, timeout=30)
    s.settimeout(5)
    assert s.recv(1) == b""  # then the server closes: no more requests can come
    s.close()
    assert status == 200, got
    if b'"stream": true' in body:
        assert got.endswith(b"data: [DONE]\n\n")
    else:
        assert json.loads(got)


# ---- the listener -----------------------------------------------------------

def test_a_port_in_use_is_refused_with_a_clear_error(hard, model_dir):
    _, port = host_port(hard.url)
    p = subprocess.run([VPOD_BIN, "serve", "--model", str(model_dir), "--device", "cpu",
                        "--host", "127.0.0.1", "--port", str(port)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "in use" in p.stderr, p.stderr
    assert healthy(hard.url)


# ---- templates --------------------------------------------------------------

HOSTILE_TEMPLATE = (
    "{% if messages[0]['content'] == 'raise' %}{{ raise_exception('x' * 50000000) }}"
    "{% elif messages[0]['content'] == 'hog' %}"
    "{% set ns = namespace(s='y' * 80000000) %}{% for i in range(4) %}"
    "{% set ns.s = ns.s ~ 'z' %}{% endfor %}{{ ns.s | length }}"
    "{% else %}{{ messages[0]['content'] }}{% endif %}")


@pytest.fixture(scope="module")
def hostile_model(model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile") / "tiny"
    shutil.copytree(model_dir, out)
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = HOSTILE_TEMPLATE
    config_path.write_text(json.dumps(config))
    for extra in out.glob("chat_template.*"):
        extra.unlink()
    return out


def test_template_limits_are_400_bounded_and_share_one_budget(hostile_model, tmp_path):
    s = Server(hostile_model, tmp_path / "serve.log", "--max-template-memory", "600MiB",
               "--http-workers", "4")
    try:
        idle = rss_kib(s.proc.pid)
        r = httpx.post(s.url + "/v1/chat/completions", timeout=60,
                       json={"messages": [{"role": "user", "content": "raise"}]})
        assert r.status_code == 400, r.text
        assert len(r.content) < 4096

        def hog(_):
            return httpx.post(s.url + "/v1/chat/completions", timeout=120,
                              json={"messages": [{"role": "user", "content": "hog"}],
                                    "max_tokens": 1}).status_code

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            statuses = list(pool.map(hog, range(4), timeout=300))
        # Each render charges 400 MB; those that overlap cannot all fit in
        # 600 MiB (which ones overlap is up to the scheduler: 503 is retryable).
        assert set(statuses) <= {200, 503}, statuses
        # Peak memory: the shared budget plus a margin, never 4 renders' worth.
        peak = rss_kib(s.proc.pid, "VmHWM")
        assert peak - idle < 1_200_000, f"peak {peak} KiB vs idle {idle} KiB"
        r = httpx.post(s.url + "/v1/chat/completions", timeout=60,
                       json={"messages": [{"role": "user", "content": "fine"}], "max_tokens": 2})
        assert r.status_code == 200, r.text
    finally:
        assert s.stop() == 0, s.log()


# ---- operations -------------------------------------------------------------

def test_access_log_line_per_request(hard):
    r = httpx.post(hard.url + "/v1/completions", timeout=30,
                   headers={"X-Request-Id": "trace-42"},
                   json={"model": MODEL_NAME, "prompt": "log me", "max_tokens": 3,
                         "ignore_eos": True})
    assert r.status_code == 200
    assert r.headers["x-request-id"] == "trace-42"

    def logged():
        return [line for line in hard.log().splitlines() if "id=trace-42" in line]

    assert wait_for(lambda: logged(), 30)  # logged after the answer is written
    line = logged()[0]
    assert "POST /v1/completions HTTP/1.1 200" in line, line
    assert "completion_tokens=3" in line and "prompt_tokens=" in line, line


def test_large_json_answers_are_gzipped_for_clients_that_accept_it(hard):
    big = json.dumps({"prompt": "word " * 2000, "return_token_strs": True}).encode()
    headers = {"Content-Type": "application/json"}
    packed = httpx.post(hard.url + "/tokenize", content=big, timeout=30,
                        headers={**headers, "Accept-Encoding": "gzip"})
    plain = httpx.post(hard.url + "/tokenize", content=big, timeout=30,
                       headers={**headers, "Accept-Encoding": "identity"})
    assert packed.headers["content-encoding"] == "gzip"
    assert "content-encoding" not in plain.headers
    assert int(packed.headers["content-length"]) < len(plain.content) // 4
    assert packed.json() == plain.json()  # httpx inflates it
    small = httpx.post(hard.url + "/tokenize", content=TOKENIZE, timeout=30,
                       headers={**headers, "Accept-Encoding": "gzip"})
    assert "content-encoding" not in small.headers  # not worth it under 1 KiB
