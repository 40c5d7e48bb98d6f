#!/usr/bin/env python3
"""Compares `vpod tokenize` with Hugging Face `tokenizers`, live: the fixture
tokenizers (when present), two tokenizers trained right now with a fresh seed,
and every feature variant on top of those. Encodes the corpus with and without
special tokens and decodes ids with and without skip_special_tokens; any
difference fails. Exits 77 (ctest: skipped) when `tokenizers` is not installed.

Usage: compare_live.py --vpod build/vpod [--fixtures ../shared/fixtures/tokenizers]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# tokenizers panics on a few decoder inputs (Strip longer than the text); the
# tests skip those cases, so keep Rust from printing whole backtraces for them.
os.environ["RUST_BACKTRACE"] = "0"

try:
    import tokenizers
    from tokenizers import Tokenizer
except ImportError:
    print("SKIP: the Python package 'tokenizers' is not installed "
          "(pip install -r tools/requirements-test.txt)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokcases  # noqa: E402


def run_vpod(vpod, path, lines, flags):
    """One `vpod tokenize` process over `lines` (JSON values); returns parsed outputs."""
    stdin = "".join(json.dumps(v, ensure_ascii=False) + "\n" for v in lines)
    proc = subprocess.run([vpod, "tokenize", "--tokenizer", path] + flags, input=stdin.encode(),
                          capture_output=True, timeout=600)
    # Only "\n" ends a line: decoded text may hold U+2028 or U+0085 unescaped.
    out = proc.stdout.decode("utf-8").split("\n")
    if out and out[-1] == "":
        out.pop()
    if proc.returncode not in (0, 1) or len(out) != len(lines):
        raise RuntimeError("vpod tokenize %s on %s failed (exit %d): %s" %
                           (" ".join(flags), path, proc.returncode, proc.stderr.decode()[-2000:]))
    return [json.loads(line) for line in out]


def compare(name, vpod, path, tok, lines, seed, report):
    failures = 0

    def check(what, got, want, shown):
        nonlocal failures
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                failures += 1
                if failures <= 5:
                    report.append("%s %s: input %s\n    vpod:       %s\n    tokenizers: %s" % (
                        name, what, json.dumps(shown[i], ensure_ascii=False)[:300],
                        json.dumps(g, ensure_ascii=False)[:300],
                        json.dumps(w, ensure_ascii=False)[:300]))

    plain = [tok.encode(line, add_special_tokens=False).ids for line in lines]
    special = [tok.encode(line, add_special_tokens=True).ids for line in lines]
    check("encode", run_vpod(vpod, path, lines, []), plain, lines)
    check("encode --add-special-tokens", run_vpod(vpod, path, lines, ["--add-special-tokens"]),
          special, lines)
    seqs = special + tokcases.random_id_sequences(tok, seed, 40)
    for skip in (False, True):
        want = [tokcases.safe_decode(tok, s, skip) for s in seqs]
        keep = [i for i, w in enumerate(want) if w is not None]  # tokenizers panicked on the rest
        flags = ["--decode"] + (["--skip-special-tokens"] if skip else [])
        got = run_vpod(vpod, path, [seqs[i] for i in keep], flags)
        check("decode" + (" --skip-special-tokens" if skip else ""), got,
              [want[i] for i in keep], [seqs[i] for i in keep])
    return failures, len(lines) * 2 + len(seqs) * 2


def main():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vpod", required=True, help="the vpod binary")
    parser.add_argument("--fixtures", default=os.path.join(repo, "..", "shared", "fixtures",
                                                           "tokenizers"))
    parser.add_argument("--seed", type=int, default=int(time.strftime("%j")),
                        help="seed of the corpus and of training (default: day of the year)")
    args = parser.parse_args()

    if not os.access(args.vpod, os.X_OK):
        print("SKIP: %s is not built (build the vpod target first)" % args.vpod)
        sys.exit(77)
    print("tokenizers %s, seed %d" % (tokenizers.__version__, args.seed))
    lines = tokcases.corpus(seed=args.seed, random_count=60)
    jobs = []
    for name in ["llama3", "qwen3", "mistral"]:
        path = os.path.join(args.fixtures, name, "tokenizer.json")
        if os.path.exists(path):
            jobs.append((name, path, Tokenizer.from_file(path), lines))
        else:
            print("note: fixture %s not found at %s, not compared" % (name, path))
    tmp = tempfile.mkdtemp(prefix="vpod-tok-live-")
    bases = {"bytelevel": tokcases.train_bytelevel(seed=args.seed, vocab_size=650),
             "sentencepiece": tokcases.train_sentencepiece(seed=args.seed, vocab_size=750)}
    variants = [(name, data) for name, data in bases.items()]
    for feature in tokcases.features():
        variants.append(("feature_" + feature["name"],
                         tokcases.apply_override(bases[feature["base"]], feature["override"])))
    for name, data in variants:
        path = os.path.join(tmp, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
        jobs.append((name, path, Tokenizer.from_file(path),
                     lines if not name.startswith("feature_") else tokcases.CURATED))

    report = []
    total_failures = 0
    total_checks = 0
    for seed, (name, path, tok, job_lines) in enumerate(jobs):
        failures, checks = compare(name, args.vpod, path, tok, job_lines, args.seed + seed, report)
        total_failures += failures
        total_checks += checks
        print("%-40s %s" % (name, "ok" if failures == 0 else "%d MISMATCHES" % failures))
    for r in report:
        print(r)
    print("%d tokenizers, %d comparisons, %d mismatches" % (len(jobs), total_checks,
                                                             total_failures))
    sys.exit(1 if total_failures else 0)


if __name__ == "__main__":
    main()
