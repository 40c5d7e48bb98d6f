#!/usr/bin/env bash
# Issue 23's decode bar (vpod against FlashInfer's tensor-core decode and
# cuDNN, the three shapes, one run) and its bf16 16K bar sustained at the
# power cap (800 back-to-back runs, vpod and FA3 alternating).
set -uo pipefail
repo=$PWD
[[ -d .carry/fixtures ]] || tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
timeout 120 $vpod bench attention --case decode --layouts per_layer paged16 --json $W/decode.json > $W/decode.txt 2>&1; echo "decode rc=$?"
grep -E "^decode" $W/decode.txt | cut -c1-110
timeout 240 python3 tools/bench_attention_peers.py --vpod-json $W/decode.json --case decode --json $W/decode_peers.json > $W/decode_peers.txt 2>&1; echo "peers rc=$?"
tail -12 $W/decode_peers.txt | cut -c1-200
date -u
for r in 1 2; do for l in per_layer fi_fa3; do
  timeout 60 $vpod bench attention --dtype bf16 --layouts $l --case "prefill 16384" --min-iters 800 --max-iters 800 > $W/sus_${l}_$r.txt 2>&1
  echo "sus $l r$r: $(grep -E "^prefill 16384 +$l " $W/sus_${l}_$r.txt | cut -c1-60)"
done; done
date -u
