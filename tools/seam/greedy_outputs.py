#!/usr/bin/env python3
"""Greedy outputs of a running vpod server, for before/after comparisons of
a refactor (issue 21): fixed prompts, temperature 0, token ids back
(return_token_ids). Two passes:
  sequential: one request at a time, so every step's batch is the same from
    run to run and outputs must be byte-identical across builds;
  burst: all requests at once (hybrid prefill+decode steps, POD); batches
    depend on arrival timing, so this pass is reported, not required equal.
Prints one sha256 per pass and writes every output to --json.
Only the standard library: it runs on the GPU machine as is."""
import argparse
import concurrent.futures
import hashlib
import json
import random
import urllib.request

WORDS = ("the of and to in is was for on as with by at from that this which be it are "
         "an or had not but have his they one all were her she there been their has more "
         "if will would about into than them some could other time these two may then do "
         "first any my now such like our over man me even most made after also did many "
         "before must through back years where much your way well down should because each "
         "just those people how too little state good very make world still own see men "
         "work long get here between both life being under never day same another know "
         "while last might us great old year off come since against go came right used "
         "take three").split()


def prompts(seed: int, lengths: list[int]) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(n)) for n in lengths]


def complete(url: str, model: str, prompt: str, max_tokens: int) -> list[int]:
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True, "return_token_ids": True,
                       "seed": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    return out["choices"][0]["token_ids"]


def digest(outputs: list[list[int]]) -> str:
    return hashlib.sha256(json.dumps(outputs).encode()).hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", required=True, help="served model name")
    ap.add_argument("--lengths", default="5,40,300,900,1700,2600,4000,6000",
                    help="prompt lengths in words")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--burst-copies", type=int, default=3,
                    help="the burst pass sends each prompt this many times")
    ap.add_argument("--json", required=True)
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    ps = prompts(a.seed, [int(x) for x in a.lengths.split(",")])
    seq = [complete(a.url, a.model, p, a.max_tokens) for p in ps]
    burst_prompts = ps * a.burst_copies
    with concurrent.futures.ThreadPoolExecutor(len(burst_prompts)) as pool:
        burst = list(pool.map(lambda p: complete(a.url, a.model, p, a.max_tokens), burst_prompts))
    # Within the burst, copies of one prompt must agree with the sequential pass
    # up to near-ties; count exact matches.
    same = sum(1 for i, b in enumerate(burst) if b == seq[i % len(ps)])
    result = {"tag": a.tag, "sequential_sha": digest(seq), "burst_sha": digest(burst),
              "burst_equal_to_sequential": f"{same}/{len(burst)}",
              "sequential": seq, "burst": burst}
    with open(a.json, "w") as f:
        json.dump(result, f)
    print(f"{a.tag:14s} sequential {result['sequential_sha']}  burst {result['burst_sha']}  "
          f"burst==sequential {same}/{len(burst)}")


if __name__ == "__main__":
    main()
