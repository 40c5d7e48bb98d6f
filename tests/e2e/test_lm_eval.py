"""lm-eval (0.4.13, `local-completions`) runs a multiple-choice task from a
local jsonl file end to end against `vpod serve` on the CPU backend, and
each choice's loglikelihood equals Hugging Face transformers' on the same
fp32 tiny model within 1e-4 (tests/e2e/data/lm_eval_goldens.json, made by
tools/model/make_lm_eval_goldens.py; the weights are fingerprinted)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import REPO, VPOD_BIN, Server

sys.path.insert(0, str(REPO / "tools" / "model"))
from fingerprint import fingerprint  # noqa: E402  (tools/model is not a package)

DATA = pathlib.Path(__file__).resolve().parent / "data"
GOLDENS = json.loads((DATA / "lm_eval_goldens.json").read_text())
TOLERANCE = 1e-4

TASK_YAML = """task: vpod_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{label}}}}"
metric_list:
  - metric: acc
"""


@pytest.fixture(scope="module")
def fp32_model(tmp_path_factory):
    m = GOLDENS["model"]
    out = tmp_path_factory.mktemp("lm_eval") / "model"
    subprocess.run([VPOD_BIN, "make-model", "--out", str(out), "--preset", m["preset"], "--seed",
                    str(m["seed"]), "--dtype", m["dtype"]], check=True, timeout=300,
                   stdout=subprocess.DEVNULL)
    # Same seed, same bytes: the weights the goldens were computed on.
    assert fingerprint(out / "model.safetensors") == m["weights"]
    return out


def test_lm_eval_multiple_choice_matches_transformers(fp32_model, tmp_path):
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (tools/requirements-test.txt)")
    assert all("hf_loglikelihood" in c for d in GOLDENS["docs"] for c in d["choices"]), \
        "goldens lack transformers' values: run the goldens step of make_lm_eval_goldens.py"
    server = Server(fp32_model, tmp_path / "serve.log")
    try:
        tasks = tmp_path / "tasks"
        tasks.mkdir()
        (tasks / "vpod_mc.yaml").write_text(TASK_YAML.format(data=DATA / "lm_eval_mc.jsonl"))
        out = tmp_path / "out"
        env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        cmd = [sys.executable, "-m", "lm_eval", "--model", "local-completions",
               "--model_args",
               f"model=tiny,base_url={server.url}/v1/completions,tokenizer={fp32_model},"
               "tokenizer_backend=huggingface,num_concurrent=2,max_retries=1",
               "--tasks", "vpod_mc", "--include_path", str(tasks),
               "--output_path", str(out), "--log_samples", "--batch_size", "1"]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-5000:]
        samples = list(out.rglob("samples_vpod_mc_*.jsonl"))
        assert len(samples) == 1, list(out.rglob("*"))
        rows = [json.loads(line) for line in samples[0].read_text().splitlines() if line]
    finally:
        server.kill()
    assert len(rows) == len(GOLDENS["docs"])
    worst = 0.0
    for row in rows:
        doc = GOLDENS["docs"][row["doc_id"]]
        assert len(row["resps"]) == len(doc["choices"])
        for resp, golden in zip(row["resps"], doc["choices"]):
            loglik, is_greedy = resp[0]
            worst = max(worst, abs(float(loglik) - golden["hf_loglikelihood"]))
            assert abs(float(loglik) - golden["hf_loglikelihood"]) <= TOLERANCE, \
                (row["doc_id"], loglik, golden["hf_loglikelihood"])
            # lm-eval's sample log writes the flag as a string.
            greedy = is_greedy if isinstance(is_greedy, bool) else str(is_greedy) == "True"
            assert greedy == golden["hf_is_greedy"]
    print(f"largest |vpod - transformers| loglikelihood difference: {worst:.2e}")
