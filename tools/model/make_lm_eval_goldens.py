#!/usr/bin/env python3
"""Regenerates tests/e2e/data/lm_eval_goldens.json: Hugging Face transformers'
loglikelihoods of the multiple-choice task in tests/e2e/data/lm_eval_mc.jsonl
on a tiny fp32 model written by `vpod make-model --seed`, which
tests/e2e/test_lm_eval.py compares with what lm-eval gets from vpod.

Two steps, because no one machine has both lm-eval and torch:

  # 1. token ids exactly as lm-eval 0.4.13's local-completions encodes each
  #    (context, continuation) pair (needs lm-eval[api] and transformers):
  python3 tools/model/make_lm_eval_goldens.py cases --vpod build/vpod \
      --out tests/e2e/data/lm_eval_goldens.json
  # 2. transformers' fp32 loglikelihood of each continuation (needs torch and
  #    transformers; the GPU machine has them), filled into the same file:
  python3 tools/model/make_lm_eval_goldens.py goldens --vpod build/vpod \
      --file tests/e2e/data/lm_eval_goldens.json

The model: preset, seed and dtype below; its bytes are fingerprinted so the
test knows it runs the same weights.
"""
import argparse
import json
import pathlib
import subprocess
import tempfile

from fingerprint import fingerprint

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "e2e" / "data" / "lm_eval_mc.jsonl"
PRESET, SEED, DTYPE = "tiny", 7, "fp32"
# As the task YAML in test_lm_eval.py renders a document.
DOC_TO_TEXT = "Question: {question}\nAnswer:"


def make_model(vpod, out):
    subprocess.run([vpod, "make-model", "--out", str(out), "--preset", PRESET, "--seed", str(SEED),
                    "--dtype", DTYPE], check=True, stdout=subprocess.DEVNULL)


def cases(args):
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    docs = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        model = pathlib.Path(tmp) / "model"
        make_model(args.vpod, model)
        lm = LocalCompletionsAPI(base_url="http://127.0.0.1:1/v1/completions", model="tiny",
                                 tokenizer=str(model), tokenizer_backend="huggingface")
        out = {"generator": "tools/model/make_lm_eval_goldens.py",
               "lm_eval": __import__("lm_eval").__version__,
               "model": {"preset": PRESET, "seed": SEED, "dtype": DTYPE,
                         "weights": fingerprint(model / "model.safetensors")},
               "docs": []}
        for i, doc in enumerate(docs):
            context = DOC_TO_TEXT.format(question=doc["question"])
            choices = []
            for choice in doc["choices"]:
                # lm-eval's multiple_choice puts the target delimiter " " before each choice.
                ctx, cont = lm._encode_pair(context, " " + choice)
                choices.append({"context_ids": ctx, "continuation_ids": cont})
            out["docs"].append({"doc_id": i, "choices": choices})
    pathlib.Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


def goldens(args):
    import torch
    from transformers import AutoModelForCausalLM

    data = json.loads(pathlib.Path(args.file).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = pathlib.Path(tmp) / "model"
        make_model(args.vpod, model_dir)
        assert fingerprint(model_dir / "model.safetensors") == data["model"]["weights"]
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                     attn_implementation="eager")
        model.eval()
        torch.backends.cuda.matmul.allow_tf32 = False
        for doc in data["docs"]:
            for c in doc["choices"]:
                ids = c["context_ids"] + c["continuation_ids"]
                with torch.no_grad():
                    logits = model(torch.tensor([ids])).logits[0].double()
                logprobs = torch.log_softmax(logits, dim=-1)
                n = len(c["context_ids"])
                per_token = [float(logprobs[n - 1 + k, t]) for k, t in
                             enumerate(c["continuation_ids"])]
                greedy = all(int(torch.argmax(logits[n - 1 + k])) == t for k, t in
                             enumerate(c["continuation_ids"]))
                c["hf_loglikelihood"] = sum(per_token)
                c["hf_is_greedy"] = greedy
    data["transformers"] = __import__("transformers").__version__
    data["torch"] = torch.__version__
    pathlib.Path(args.file).write_text(json.dumps(data, indent=1) + "\n")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="step", required=True)
    a = sub.add_parser("cases")
    a.add_argument("--vpod", required=True)
    a.add_argument("--out", required=True)
    b = sub.add_parser("goldens")
    b.add_argument("--vpod", required=True)
    b.add_argument("--file", required=True)
    args = ap.parse_args()
    cases(args) if args.step == "cases" else goldens(args)


if __name__ == "__main__":
    main()
