#!/usr/bin/env python3
"""vpod against Hugging Face transformers on the GPU machine.

For each of a Llama-3-style (GQA, llama3 rope scaling), a Qwen2-style (q/k/v
bias) and a Qwen3-style (q/k norm) model with 4 layers, hidden 1024 and head
dim 128 (`vpod make-model --preset test-*`): the same random weights are
loaded in both; greedy generation of 32 tokens from 5 prompts must give the
same tokens, and the largest logit difference over every generated step is
reported. fp32 is the exact comparison (transformers in fp32 with TF32 off,
vpod's CUDA backend in fp32); bf16 runs vpod with its attention kernels and
compares its logits with transformers' fp32 ones along the same tokens.

    python3 tools/model/compare_hf.py --vpod build/vpod --work /tmp/hf --json out.json
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch
from transformers import AutoModelForCausalLM

MODELS = [("test-llama3", 101), ("test-qwen2", 102), ("test-qwen3", 103)]
PROMPT_LENGTHS = [1, 7, 33, 64, 120]
NEW_TOKENS = 32


def prompts(vocab, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, min(vocab, 100000), size=n).tolist() for n in PROMPT_LENGTHS]


def vpod_generate(vpod, model_dir, prompts_ids, dtype, attention, dump):
    """One vpod process for all prompts: generated ids and [prompts, steps, vocab] logits."""
    cmd = [vpod, "--log-level", "warn", "generate", "--model", model_dir, "--max-tokens", str(NEW_TOKENS),
           "--temperature", "0", "--ignore-eos", "--device", "cuda", "--dtype", dtype, "--attention",
           attention, "--dump-logits", dump]
    for ids in prompts_ids:
        cmd += ["--prompt-ids", ",".join(map(str, ids))]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    results = [json.loads(l)["output_ids"] for l in out.stdout.splitlines() if l.startswith("{")]
    logits = np.fromfile(dump, dtype=np.float32).reshape(len(prompts_ids), NEW_TOKENS, -1)
    os.remove(dump)
    return results, logits, out.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vpod", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.work, exist_ok=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "torch": torch.__version__,
              "transformers": __import__("transformers").__version__, "models": []}
    all_ok = True
    for preset, seed in MODELS:
        d = os.path.join(args.work, preset)
        subprocess.run([args.vpod, "make-model", "--out", d, "--preset", preset, "--seed", str(seed),
                        "--dtype", "fp32", "--no-tokenizer"], check=True, stdout=subprocess.DEVNULL)
        hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").cuda().eval()
        vocab = hf.config.vocab_size
        entry = {"preset": preset, "prompts": []}
        prompt_list = prompts(vocab, seed)
        hf_ids_all, hf_logits_all = [], []
        for ids in prompt_list:
            with torch.no_grad():
                gen = hf.generate(torch.tensor([ids], device="cuda"), max_new_tokens=NEW_TOKENS,
                                  min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
                hf_ids_all.append(gen[0, len(ids):].tolist())
                # Logits of every generated step along HF's tokens, in one forward.
                full = gen[:, : len(ids) + NEW_TOKENS - 1]
                hf_logits_all.append(hf(full).logits[0, len(ids) - 1:].float().cpu().numpy())
        for dtype, attention in [("fp32", "simple"), ("bf16", "serial")]:
            dump = os.path.join(args.work, f"{preset}_{dtype}_{attention}.bin")
            try:
                out_ids, logits, log = vpod_generate(args.vpod, d, prompt_list, dtype, attention, dump)
            except subprocess.CalledProcessError as e:
                print(f"{preset} {dtype} {attention}: vpod failed: {e.stderr[-2000:]}", flush=True)
                entry["prompts"].append({"dtype": dtype, "attention": attention, "error": e.stderr[-2000:]})
                all_ok = False
                continue
            print(log.strip().splitlines()[-1] if log.strip() else "", flush=True)
            for i, ids in enumerate(prompt_list):
                hf_ids, hf_logits = hf_ids_all[i], hf_logits_all[i]
                same = out_ids[i] == hf_ids
                n = NEW_TOKENS  # compare along the common prefix (inputs differ after it)
                for k in range(NEW_TOKENS):
                    if out_ids[i][k] != hf_ids[k]:
                        n = k + 1
                        break
                diff = float(np.abs(logits[i, :n] - hf_logits[:n]).max())
                entry["prompts"].append({"prompt_len": len(ids), "dtype": dtype, "attention": attention,
                                         "identical": same, "max_logit_diff": diff,
                                         "first_divergence": None if same else n - 1})
                if dtype == "fp32" and not same:
                    all_ok = False
                print(preset, entry["prompts"][-1], flush=True)
        hf_logits = np.concatenate(hf_logits_all)
        entry["max_logit_range"] = float(np.abs(hf_logits).max())
        report["models"].append(entry)
        del hf
        torch.cuda.empty_cache()
    report["fp32_greedy_identical"] = all_ok
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1)
    print("fp32 greedy identical for all models and prompts:", all_ok)
    sys.exit(0 if all_ok else 1)


if __name__ == "__main__":
    main()
