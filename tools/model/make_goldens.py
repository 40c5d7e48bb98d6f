#!/usr/bin/env python3
"""Regenerates tests/model/data/goldens.json: Hugging Face transformers'
logits for the tiny presets written by `vpod make-model --seed`.

The C++ test (tests/model/golden_test.cpp) writes the same models with the
same seeds, checks their bytes against the fingerprint recorded here (so the
PRNG is the same everywhere), runs the CPU backend and compares the logits.

    python3 tools/model/make_goldens.py --vpod build/vpod \
        --out tests/model/data/goldens.json

Needs torch and transformers (CPU is enough). Logits are computed in float32
(a bf16 checkpoint is upcast exactly), matching the CPU backend's math.
"""
import argparse
import json
import os
import subprocess
import tempfile

import torch
from transformers import AutoModelForCausalLM

from fingerprint import fingerprint

# (preset, seed, dtype, prompt token ids). Token ids are arbitrary in-vocab ids.
CASES = [
    ("tiny", 11, "bf16", [128000, 791, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679, 13, 128009]),
    ("tiny-qwen2", 12, "fp32", [151643, 785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13]),
    ("tiny-qwen3", 13, "bf16", [151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644]),
]
NUM_SAMPLED = 251  # logits kept per position, at evenly spaced vocabulary ids
TOP = 8            # plus the top ids of each position


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vpod", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    result = {"generator": "tools/model/make_goldens.py", "transformers": __import__("transformers").__version__,
              "torch": torch.__version__, "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        for preset, seed, dtype, ids in CASES:
            d = os.path.join(tmp, preset)
            subprocess.run([args.vpod, "make-model", "--out", d, "--preset", preset, "--seed", str(seed),
                            "--dtype", dtype, "--no-tokenizer"], check=True, stdout=subprocess.DEVNULL)
            model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
            model.eval()
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0].float()  # [T, V]
            vocab = logits.shape[1]
            step = vocab // NUM_SAMPLED
            sampled = list(range(0, step * NUM_SAMPLED, step))
            positions = []
            for t in range(len(ids)):
                row = logits[t]
                top = torch.topk(row, TOP)
                idx = sorted(set(sampled) | set(top.indices.tolist()))
                positions.append({
                    "argmax": int(torch.argmax(row)),
                    "ids": idx,
                    "logits": [float(row[i]) for i in idx],
                })
            result["cases"].append({
                "preset": preset, "seed": seed, "dtype": dtype, "token_ids": ids,
                "vocab_size": vocab,
                "weights": fingerprint(os.path.join(d, "model.safetensors")),
                "positions": positions,
            })
            print(f"{preset}: {len(ids)} positions, max |logit| {logits.abs().max():.4f}")
    with open(args.out, "w") as f:
        json.dump(result, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
