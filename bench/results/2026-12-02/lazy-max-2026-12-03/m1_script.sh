#!/usr/bin/env bash
# Lazy running max (slack 2^8) against the exact max (--no-lazy-max): the
# warp-specialized tests, then A/B interleaved (order flipped per round),
# then sustained bf16 runs at the power cap.
set -uo pipefail
repo=$PWD
tar -xzf .carry/fixtures.tar.gz -C .carry
source tools/seam/unpack_build.sh .carry/b.tar.gz $repo >/dev/null
W=$(mktemp -d)
trap 'tar -czf $OUT/all.tgz -C $W .' EXIT
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; $vpod info 2>&1 | grep -i commit; } | tee $W/env.txt
timeout 150 $build/tests/test_kernels_gpu --gtest_filter='*WarpSpecialized*:*KernelsFit*:*ChunkedPrefill*' > $W/tests.log 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED|rising|exact max" $W/tests.log | cut -c1-140
run_v() { # mode dtype case round
  local flag=""; [[ $1 == exact ]] && flag=--no-lazy-max
  timeout 60 $vpod bench attention --dtype $2 --layouts per_layer fi_fa3 --ab-rounds 2 --case $3 $flag > $W/att_$2_$3_$1_$4.txt 2>&1
  echo "r$4 $2 $3 $1 rc=$?"
  grep -E "^(prefill|chunk) [0-9 @]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x" $W/att_$2_$3_$1_$4.txt | cut -c1-70
}
for r in 1 2; do
for dt in fp16 bf16; do for c in chunk prefill; do
  if (( r % 2 == 1 )); then run_v exact $dt $c $r; run_v lazy $dt $c $r; else run_v lazy $dt $c $r; run_v exact $dt $c $r; fi
done; done
done
for r in 1 2; do for m in exact lazy; do for c in "prefill 16384" "chunk 2048 @16384"; do
  flag=""; [[ $m == exact ]] && flag=--no-lazy-max
  f=$W/sus_${m}_${c// /_}_$r.txt
  timeout 60 $vpod bench attention --dtype bf16 --layouts per_layer --case "$c" --min-iters 800 --max-iters 800 $flag > $f 2>&1
  echo "sus $m r$r: $(grep -E "^$c" $f | cut -c1-60)"
done; done; done
date -u
