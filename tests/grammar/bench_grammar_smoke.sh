#!/usr/bin/env bash
# `vpod bench grammar` on a weightless test-llama3 folder (the Llama-3
# vocabulary): the bench runs, and it fails by itself if a token its mask
# allowed is refused or if the threaded masks differ from the one-thread
# walk's. Skips (exit 77) without the tokenizer fixtures.
#   tests/grammar/bench_grammar_smoke.sh VPOD_BINARY
set -euo pipefail
vpod=$1
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if ! "$vpod" make-model --out "$dir/model" --preset test-llama3 --no-weights >"$dir/log" 2>&1; then
  if grep -q "no tokenizer fixtures" "$dir/log"; then
    echo "skipped: no tokenizer fixtures (set VPOD_FIXTURES)"
    exit 77
  fi
  cat "$dir/log"
  exit 1
fi
"$vpod" bench grammar --model "$dir/model" \
  --json-schema "$here/../../bench/datasets/json_schema_long_array.json" \
  --batch 8 --steps 48 --threads 1 2 --json "$dir/out.json"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['steps'] > 0 and len(d['rows']) == 2, d" "$dir/out.json"
