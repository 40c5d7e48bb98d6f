"""Fixtures for the server's end-to-end suites: a tiny random-weight model
(`vpod make-model --preset tiny`, the Llama-3 tokenizer) and real `vpod serve`
processes on 127.0.0.1 with the CPU backend. Every wait is bounded.

VPOD_BIN names the binary (ctest sets it); otherwise build/vpod is used.
VPOD_E2E_URL runs the suites that need only a URL against a server already
running there instead (e.g. `make run MODEL=DIR` on the GPU machine), with
VPOD_E2E_MODEL its served model name and VPOD_E2E_MAX_MODEL_LEN its
--max-model-len.

LiteLLM runs in its own virtual env (scripts/install-deps.sh makes it in
$VPOD_DEPS_CACHE/venv-litellm, by default ${XDG_CACHE_HOME:-~/.cache}/vpod;
ctest sets VPOD_DEPS_CACHE to the build's): litellm_call() runs one call
there.
"""

import json
import os
import pathlib
import re
import signal
import subprocess
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

REPO = pathlib.Path(__file__).resolve().parents[2]
VPOD_BIN = os.environ.get("VPOD_BIN", str(REPO / "build" / "vpod"))
EXTERNAL_URL = os.environ.get("VPOD_E2E_URL")
MODEL_NAME = os.environ.get("VPOD_E2E_MODEL", "tiny")
MAX_MODEL_LEN = int(os.environ.get("VPOD_E2E_MAX_MODEL_LEN", "512"))
MAX_BODY = 1 << 20  # --max-request-body 1MiB
STARTUP_TIMEOUT_S = 120
DEPS_CACHE = pathlib.Path(
    os.environ.get("VPOD_DEPS_CACHE")
    or pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "vpod")
LITELLM_PYTHON = DEPS_CACHE / "venv-litellm" / "bin" / "python"
LITELLM_TIMEOUT_S = 300


class Server:
    """A `vpod serve` process; `url` once it printed its ready line."""

    def __init__(self, model_dir, log_path, *extra_args, env=None, model_args=None):
        """`model_args` replaces `--model DIR --served-model-name tiny`."""
        self.log_path = log_path
        if model_args is None:
            model_args = ["--model", str(model_dir), "--served-model-name", MODEL_NAME]
        args = [
            VPOD_BIN, "--log-level", "info", "serve",
            *model_args,
            "--device", "cpu",
            "--host", "127.0.0.1",
            "--port", "0",
            "--max-model-len", str(MAX_MODEL_LEN),
            "--max-num-seqs", "64",
            "--max-num-batched-tokens", "1024",
            "--max-request-body", "1MiB",
            "--cpu-threads", "2",
            *extra_args,
        ]
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._log, text=True,
                                     env={**os.environ, **(env or {})})
        self.url = None
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        if not self._ready.wait(STARTUP_TIMEOUT_S) or self.url is None:
            self.kill()
            raise RuntimeError(f"vpod serve did not become ready; log:\n{self.log()}")

    def _read_stdout(self):
        for line in self.proc.stdout:
            m = re.search(r"ready on (http://127\.0\.0\.1:\d+)", line)
            if m:
                self.url = m.group(1)
                self._ready.set()
        self._ready.set()  # exited

    def log(self):
        self._log.flush()
        return pathlib.Path(self.log_path).read_text(errors="replace")[-20000:]

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signals the server and returns its exit code (bounded wait)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def scrape(url):
    """GET /metrics, parsed by prometheus_client's text parser (it raises on
    anything that is not valid Prometheus text): a list of metric families."""
    r = httpx.get(url + "/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    return list(text_string_to_metric_families(r.text))


# The labels vLLM (and so vpod) puts on every engine series.
ENGINE_LABELS = {"model_name": MODEL_NAME, "engine": "0"}


def metrics(url):
    """Every sample of /metrics: {'name{label="value",...}': value}, keyed
    without ENGINE_LABELS when a sample has exactly those values, so
    'vllm:num_requests_running' reads the served model's gauge
    (test_load.test_metrics_page checks that the labels are there)."""
    samples = {}
    for family in scrape(url):
        for s in family.samples:
            own = dict(s.labels)
            if all(own.get(k) == v for k, v in ENGINE_LABELS.items()):
                for k in ENGINE_LABELS:
                    del own[k]
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(own.items()))
            samples[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return samples


def litellm_call(function, **kwargs):
    """litellm.<function>(**kwargs) in LiteLLM's virtual env: the result as a
    dict (model_dump). Skips, saying why, when the env is absent; a call that
    raises fails the test with LiteLLM's error."""
    if not LITELLM_PYTHON.exists():
        pytest.skip(f"LiteLLM's virtual env is absent ({LITELLM_PYTHON}); "
                    "scripts/install-deps.sh makes it")
    proc = subprocess.run(
        [str(LITELLM_PYTHON), str(pathlib.Path(__file__).with_name("litellm_call.py")),
         json.dumps({"function": function, "kwargs": kwargs})],
        capture_output=True, text=True, timeout=LITELLM_TIMEOUT_S)
    lines = proc.stdout.strip().splitlines()
    assert lines, f"litellm_call.py printed nothing (exit {proc.returncode}): {proc.stderr[-4000:]}"
    result = json.loads(lines[-1])
    assert proc.returncode == 0 and "litellm_error" not in result, (result, proc.stderr[-4000:])
    return result


def wait_for(predicate, timeout_s, interval_s=0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "tiny"
    subprocess.run([VPOD_BIN, "make-model", "--out", str(out), "--preset", "tiny", "--seed", "1"],
                   check=True, timeout=300, stdout=subprocess.DEVNULL)
    return out


@pytest.fixture(scope="session")
def server(tmp_path_factory, request):
    if EXTERNAL_URL:
        yield None
        return
    model = request.getfixturevalue("model_dir")
    s = Server(model, tmp_path_factory.mktemp("logs") / "serve.log", "--drain-timeout", "5")
    yield s
    code = s.stop()
    assert code == 0, s.log()


@pytest.fixture(scope="session")
def url(server):
    if EXTERNAL_URL:
        assert httpx.get(EXTERNAL_URL + "/health", timeout=10).status_code == 200
        return EXTERNAL_URL.rstrip("/")
    return server.url


@pytest.fixture()
def new_server(model_dir, tmp_path):
    """A fresh server for a test that stops it (its own log)."""
    started = []

    def start(*args):
        s = Server(model_dir, tmp_path / f"serve{len(started)}.log", *args)
        started.append(s)
        return s

    yield start
    for s in started:
        s.kill()
