#!/usr/bin/env bash
# Issue 23's bars from one call per dtype: POD's four cases with FlashInfer's
# serial composition and POD wrapper, and the prefill and chunk cases against
# FA3 head to head, with the four POD cases' chunks alone (prefill parts).
set -uo pipefail
repo=$PWD
[[ -d .carry/fixtures ]] || tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
for dt in fp16 bf16; do
  timeout 100 $vpod bench pod --dtype $dt --sweep 0 --json $W/pod_$dt.json > $W/pod_$dt.txt 2>&1
  echo "pod $dt rc=$?"; grep -E "^chunk|vs FI|over 4" $W/pod_$dt.txt | cut -c1-160 | head -12
  for c in chunk prefill; do
    extra=""; [[ $c == chunk ]] && extra="--chunk-shape 1x1024@3072 1x2048@6144 1x512@15872 1x1024@11264"
    timeout 100 $vpod bench attention --dtype $dt --layouts per_layer fi_fa3 --ab-rounds 2 --case $c $extra > $W/att_${dt}_$c.txt 2>&1
    echo "att $dt $c rc=$?"; grep -E "^(prefill|chunk) " $W/att_${dt}_$c.txt | cut -c1-130
  done
done
date -u
