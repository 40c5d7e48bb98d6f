"""`vpod bench offline` (issue #10's offline makespan) on the CPU backend with
the tiny model: a mode the runtime has runs and reports exact token counts in
its table and JSON; modes it does not have yet are refused with the reason
and no numbers."""

import json
import subprocess

import pytest

from conftest import VPOD_BIN

ARGS = ["--device", "cpu", "--input-len", "48", "--output-len", "5", "--num-requests", "6",
        "--max-num-batched-tokens", "64", "--max-num-seqs", "8"]


def bench(model_dir, *extra, timeout=300):
    return subprocess.run([VPOD_BIN, "bench", "offline", "--model", str(model_dir), *ARGS, *extra],
                          capture_output=True, text=True, timeout=timeout)


def test_vattn_serial_runs_and_reports(model_dir, tmp_path):
    out = tmp_path / "offline.json"
    r = bench(model_dir, "--kv-cache", "vattn", "--attention", "serial", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "Offline Benchmark Result" in r.stdout
    assert "vattn+serial" in r.stdout
    j = json.loads(out.read_text())
    assert j["mode"] == "vattn+serial"
    assert j["num_requests"] == 6
    assert j["prompt_tokens"] == 6 * 48 and j["output_tokens"] == 6 * 5
    assert j["makespan_s"] > 0
    assert j["output_tokens_per_s"] == pytest.approx(30 / j["makespan_s"])
    # 48-token prompts in 64-token steps: prefill is chunked over several steps.
    assert j["num_steps"] >= 5


@pytest.mark.parametrize("mode,flag", [(("vattn", "pod"), "--attention pod"),
                                       (("paged", "serial"), "--kv-cache paged")])
def test_missing_modes_are_refused(model_dir, tmp_path, mode, flag):
    out = tmp_path / "offline.json"
    r = bench(model_dir, "--kv-cache", mode[0], "--attention", mode[1], "--json", str(out),
              timeout=60)
    if r.returncode == 0:
        pytest.fail(f"{flag} ran; this test should then check its result instead:\n{r.stdout}")
    assert flag in r.stderr, r.stderr
    assert "Makespan" not in r.stdout and not out.exists()
