"""The modes are flags (--kv-cache vattn|paged, --attention serial|pod) in
`vpod serve` and `vpod bench offline` (issue #10's offline makespan), on the
CPU backend with the tiny model: the paged baseline serves the same greedy
text as the vAttention cache, the offline bench reports exact token counts in
every mode it can run, and a mode the backend does not have (POD on the CPU)
is refused with the reason and no numbers."""

import json
import subprocess

import httpx
import pytest

from conftest import VPOD_BIN

ARGS = ["--device", "cpu", "--input-len", "48", "--output-len", "5", "--num-requests", "6",
        "--max-num-batched-tokens", "64", "--max-num-seqs", "8"]


def bench(model_dir, *extra, timeout=300):
    return subprocess.run([VPOD_BIN, "bench", "offline", "--model", str(model_dir), *ARGS, *extra],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("kv_cache", ["vattn", "paged"])
def test_offline_bench_runs_and_reports(model_dir, tmp_path, kv_cache):
    out = tmp_path / "offline.json"
    r = bench(model_dir, "--kv-cache", kv_cache, "--attention", "serial", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "Offline Benchmark Result" in r.stdout
    assert f"{kv_cache}+serial" in r.stdout
    j = json.loads(out.read_text())
    assert j["mode"] == f"{kv_cache}+serial"
    assert j["num_requests"] == 6
    assert j["prompt_tokens"] == 6 * 48 and j["output_tokens"] == 6 * 5
    assert j["makespan_s"] > 0
    assert j["output_tokens_per_s"] == pytest.approx(30 / j["makespan_s"])
    # 48-token prompts in 64-token steps: prefill is chunked over several steps.
    assert j["num_steps"] >= 5


def test_offline_bench_refuses_pod_on_cpu(model_dir, tmp_path):
    out = tmp_path / "offline.json"
    r = bench(model_dir, "--attention", "pod", "--json", str(out), timeout=60)
    assert r.returncode != 0
    assert "--attention pod needs the CUDA backend" in r.stderr, r.stderr
    assert "Makespan" not in r.stdout and not out.exists()


def test_serve_refuses_pod_on_cpu(model_dir):
    r = subprocess.run([VPOD_BIN, "serve", "--model", str(model_dir), "--device", "cpu",
                        "--port", "0", "--attention", "pod"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "--attention pod needs the CUDA backend" in r.stderr, r.stderr


def greedy(url, prompt, max_tokens):
    r = httpx.post(url + "/v1/completions", timeout=120, json={
        "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
        "return_token_ids": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


def test_paged_cache_serves_the_same_greedy_tokens(url, new_server):
    paged = new_server("--kv-cache", "paged")
    assert "paged, 16-token blocks" in paged.log()
    # Prompts and outputs that cross 16-token block boundaries.
    prompts = ["Hello", "A much longer prompt " * 6, "Numbers: 1 2 3 4 5 6 7 8 9 10 11 12"]
    for prompt in prompts:
        assert greedy(paged.url, prompt, 40) == greedy(url, prompt, 40), prompt
    # Concurrent sequences in one paged batch: each equals its vattn answer.
    r = httpx.post(paged.url + "/v1/completions", timeout=120, json={
        "prompt": prompts, "max_tokens": 24, "temperature": 0, "ignore_eos": True,
        "return_token_ids": True}).json()
    assert [c["token_ids"] for c in r["choices"]] == [greedy(url, p, 24) for p in prompts]
    assert paged.stop() == 0
