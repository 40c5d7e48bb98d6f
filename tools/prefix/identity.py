#!/usr/bin/env python3
"""Greedy outputs of a running vpod server for prompts that share long
prefixes, to compare a server with prefix caching on against one with it off
(issue 22: outputs byte-identical on and off). Prompts: a shared prefix of
--prefix-words words + a unique suffix, each sent twice (the second time its
whole prompt is cached but the last block), and a second family under another
cache_salt. Sequential (one request at a time, so every step's batch is the
same with and without caching apart from the skipped prefix), temperature 0,
token ids back. Prints the hash of all outputs and the cached tokens the
server reported; writes everything to --json. Standard library only."""
import argparse
import hashlib
import json
import random
import urllib.request

WORDS = ("the of and to in is was for on as with by at from that this which be it are "
         "an or had not but have his they one all were her she there been their has more "
         "if will would about into than them some could other time these two may then do "
         "first any my now such like our over man me even most made after also did many "
         "before must through back years where much your way well down should because each").split()


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def complete(url, model, prompt, max_tokens, salt=None):
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True, "seed": 0}
    if salt is not None:
        body["cache_salt"] = salt
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    choice = out["choices"][0]
    ids = choice.get("token_ids") or choice.get("output_token_ids") or []
    details = (out.get("usage") or {}).get("prompt_tokens_details") or {}
    return ids, int(details.get("cached_tokens") or 0), out["usage"]["prompt_tokens"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prefix-words", type=int, default=700)
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--tag", default="")
    ap.add_argument("--json")
    a = ap.parse_args()
    rng = random.Random(22)
    prefix = words(rng, a.prefix_words)
    cases = []
    for i in range(a.requests):
        cases.append((prefix + " " + words(rng, 20 + 13 * i), None))
    cases += [(c[0], None) for c in cases[:2]]               # repeated whole prompts
    cases += [(c[0], "tenant-b") for c in cases[:2]]         # same tokens, another salt
    results = []
    for prompt, salt in cases:
        ids, cached, prompt_tokens = complete(a.url, a.model, prompt, a.max_tokens, salt)
        results.append({"salt": salt, "prompt_tokens": prompt_tokens, "cached": cached, "ids": ids})
    digest = hashlib.sha256(json.dumps([r["ids"] for r in results]).encode()).hexdigest()[:16]
    cached = [r["cached"] for r in results]
    print(f"{a.tag} outputs {digest} cached_tokens {cached} "
          f"prompt_tokens {[r['prompt_tokens'] for r in results]}")
    if a.json:
        json.dump({"digest": digest, "results": results}, open(a.json, "w"))


if __name__ == "__main__":
    main()
